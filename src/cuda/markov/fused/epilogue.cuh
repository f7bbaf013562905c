// The epilogue of the fused step (phase B, every fused_epilogue_tiles tiles): lane
// slots of kEpl consecutive entries of one row (8 from 16 rows, fewer below):
// l = step_logit(base, bias) (base read once, streaming), the cache store, then
// for T > 0, branch-free over the slot, the Philox uniform u and a bracket
// zlo <= z <= zhi of the score z = RN(RN(l / T) + g) without a division or a
// log (score_bracket: RN(l * RN(1 / T)) within a proven margin, g within u's
// noise bucket, directed rounding). The row's known lower bound (grid-wide and
// block-wide, order keys, atomicMax) takes the largest zlo; an entry whose zhi
// is below it cannot be the row's maximum and is dropped. The few survivors
// wait in a per-warp queue and are scored exactly (the contract's division and
// logs) at the end of the walk, when the bound has grown and drops most of them.
// T = 0 rows and non-finite scores are exact candidates at once.
//
// This header holds the epilogue's pieces; the loop over the lane slots that uses
// them is in the kernel body (launch.cu), where it was before the split: moved into a
// function of its own it changed the register count of some instantiations.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/common/ptx.cuh"
#include "cuda/markov/device.cuh"
#include "cuda/markov/fused/params.h"
#include "cuda/markov/fused/smem.cuh"
#include "cuda/markov/tile.h"
#include "sparkdraft/core/philox.h"
#include "sparkdraft/core/sampling.h"

namespace sparkdraft::cuda::markov_detail {

// A candidate as one 64-bit key whose unsigned order is the sampling rule's
// preference (core/sampling.h `better`): the high word orders the values (NaN above
// every number, -0 as +0, which `better` treats as equal), the low word prefers
// the lower id. So the blocks fold their bests into a row with one atomicMax.
__device__ __forceinline__ unsigned long long pack_candidate(const MarkovCandidate& c) {
  const int key = c.value != c.value ? 0x7fffffff : order_key(c.value == 0.0f ? 0.0f : c.value);
  const uint32_t hi = static_cast<uint32_t>(key) ^ 0x80000000u;
  const uint32_t lo = ~static_cast<uint32_t>(c.id);
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}
__device__ __forceinline__ MarkovCandidate unpack_candidate(unsigned long long k) {
  const int key = static_cast<int>(static_cast<uint32_t>(k >> 32) ^ 0x80000000u);
  const float value = key == 0x7fffffff ? __int_as_float(0x7fffffff) : key_value(key);
  return MarkovCandidate{value, static_cast<int32_t>(~static_cast<uint32_t>(k))};
}

// The noise bounds of the buckets (noise_bound_table(), then kNoiseFloor): static,
// so loaded before grid_dependency_wait.
__device__ __forceinline__ void load_noise_bounds(const FusedStepParams& p, float* noise_b,
                                                  int tid) {
  for (int b = tid; b <= kNoiseBuckets; b += kFusedThreads)
    noise_b[b] = b < kNoiseBuckets ? p.noise_bound[b] : kNoiseFloor;
}

// This step's per-row values: temperatures, step seeds, cache rows, the block's
// bound (-inf) and best (none).
__device__ __forceinline__ void load_rows(const FusedStepParams& p, const FusedSmem& s, int tid) {
  for (int r = tid; r < p.rows; r += kFusedThreads) {
    s.temp[r] = p.temperatures[r];
    s.seed[r] = draft_step_seed(p.seeds[r], p.anchor_positions[r], p.step);
    const int64_t slot = ops::step_slot(p.cache_slots, p.lengths, r, p.step);
    s.cache_row[r] = slot < 0 ? -1 : (p.cache_by_row ? r : slot);
    s.known_s[r] = order_key(__int_as_float(static_cast<int>(0xff800000u)));  // -inf
  }
  for (int x = tid; x < p.rows; x += kFusedThreads) s.best[x] = 0ull;
}

// Base logits requested ahead of their epilogue pass: the 2E bytes of a full slot of E = 8
// or 4 entries (vec_io; E = 4: raw.x, raw.y), loaded before phase A so that the load's
// latency overlaps the tensor-core work; `ok` false where there is none (load_logits
// loads then).
struct BasePrefetch {
  uint4 raw;
  bool ok;
};

// The slot widths with a vector path: E = 8 or 4 entries, whose 2E bytes move as one
// access (SlotVec<E>: uint4 or uint2), held in the first E / 2 words of a uint4.
template <int E>
inline constexpr bool kVectorWidth = E == 8 || E == 4;
template <int E>
using SlotVec = std::conditional_t<E == 8, uint4, uint2>;
template <int E>
__device__ __forceinline__ uint4 widen(SlotVec<E> v) {
  if constexpr (E == 8)
    return v;
  else
    return make_uint4(v.x, v.y, 0u, 0u);
}
template <int E>
__device__ __forceinline__ SlotVec<E> narrow(const uint32_t (&w)[4]) {
  if constexpr (E == 8)
    return make_uint4(w[0], w[1], w[2], w[3]);
  else
    return make_uint2(w[0], w[1]);
}

// Whether load_logits takes its vector path (one 2E-byte access of base and of cache)
// for n entries of an E-entry slot.
template <int E>
__device__ __forceinline__ bool vector_slot(const FusedStepParams& p, int n) {
  return kVectorWidth<E> && p.vec_io && n == E;
}
// The 2E bytes of base logits at b (2E-byte aligned): a streaming load.
template <int E>
__device__ __forceinline__ uint4 load_base_vec(const bf16* b) {
  return widen<E>(ld_streaming(reinterpret_cast<const SlotVec<E>*>(b)));
}

// The prefetch of n entries v0.. of row r: made when load_logits would take its vector
// path for them, else none.
template <int E>
__device__ __forceinline__ BasePrefetch prefetch_base(const FusedStepParams& p, bool active, int r,
                                                      int v0, int n) {
  BasePrefetch f{make_uint4(0u, 0u, 0u, 0u), false};
  if constexpr (kVectorWidth<E>) {
    if (active && vector_slot<E>(p, n)) {
      f.raw = load_base_vec<E>(p.base + r * p.base_row_stride + v0);
      f.ok = true;
    }
  }
  return f;
}

// The step logits l = step_logit(base, bias) of n <= E consecutive entries v0.. of
// row r (bias from the staging buffer), stored to cache row `crow` when crow >= 0;
// lv = f32(l). Base logits and cache are touched once: streaming (evict-first)
// accesses, so that L2 keeps w2 for the next step. E = 8 or 4 and vec_io: one 2E-byte
// access each (the base's already made when pre.ok: prefetch_base of the same entries).
// The E sums first, then the transform of all E under one branch: a branch per entry
// put the transform's code (tanh_f32) between the entries' few instructions, which
// then ran one region at a time past the cold code (ncu 2026-12-07d run 1: 9.2% of the
// step kernel's stall samples waiting for an instruction; 2.6% after, run 2).
template <int E>
__device__ __forceinline__ void load_logits(const FusedStepParams& p, int r, int v0, int n,
                                            const bf16* bias, int64_t crow, float lv[E],
                                            const BasePrefetch& pre) {
  const bf16* base = p.base + r * p.base_row_stride + v0;
  bf16* cache = crow >= 0 ? p.cache + crow * p.cache_row_stride + v0 : nullptr;
  bf16 l[E];
  if constexpr (kVectorWidth<E>) {
    if (vector_slot<E>(p, n)) {
      constexpr int kWords = E / 2;  // 32-bit words: two entries each
      const uint4 braw = pre.ok ? pre.raw : load_base_vec<E>(base);
      const uint4 sraw = widen<E>(*reinterpret_cast<const SlotVec<E>*>(bias));
      const uint32_t bw[4] = {braw.x, braw.y, braw.z, braw.w};
      const uint32_t sw[4] = {sraw.x, sraw.y, sraw.z, sraw.w};
#pragma unroll
      for (int i = 0; i < kWords; ++i) {
        l[2 * i] = step_sum(bf16{static_cast<uint16_t>(bw[i] & 0xffffu)},
                            bf16{static_cast<uint16_t>(sw[i] & 0xffffu)});
        l[2 * i + 1] = step_sum(bf16{static_cast<uint16_t>(bw[i] >> 16)},
                                bf16{static_cast<uint16_t>(sw[i] >> 16)});
      }
      if (p.transform.enabled) step_transform_n<E>(l, p.transform);
      uint32_t lw[4] = {0u, 0u, 0u, 0u};
#pragma unroll
      for (int i = 0; i < kWords; ++i) {
        lw[i] =
            static_cast<uint32_t>(l[2 * i].bits) | (static_cast<uint32_t>(l[2 * i + 1].bits) << 16);
        lv[2 * i] = to_f32(l[2 * i]);
        lv[2 * i + 1] = to_f32(l[2 * i + 1]);
      }
      if (cache != nullptr) st_streaming(reinterpret_cast<SlotVec<E>*>(cache), narrow<E>(lw));
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < E; ++i)
    l[i] = i < n ? step_sum(bf16{ld_streaming(reinterpret_cast<const unsigned short*>(base + i))},
                            bias[i])
                 : bf16{0};
  if (p.transform.enabled) step_transform_n<E>(l, p.transform);
#pragma unroll
  for (int i = 0; i < E; ++i) {
    if (i >= n) {
      lv[i] = 0.0f;
      continue;
    }
    if (cache != nullptr) st_streaming(reinterpret_cast<unsigned short*>(cache + i), l[i].bits);
    lv[i] = to_f32(l[i]);
  }
}

// The bracket zlo <= z <= zhi of an entry's score z = RN(RN(l / T) + g) without the
// division or the logs: sa = RN(l * y), y = RN(1 / T), is within
// d = |sa| 2^-22 + 2^-126 of RN(l / T) (two roundings of 2^-24 each plus RN's half
// ulp; the absolute term covers subnormal results), and g lies in [lo, hi] of u's
// bucket; rounding down and up keeps the bracket. Valid for finite sa and
// T in [2^-100, 2^100]; the callers send everything else to the exact path.
struct Bracket {
  float lo, hi;
};
__device__ __forceinline__ Bracket score_bracket(float l, float y, float u, const float* noise_b) {
  const float sa = __fmul_rn(l, y);
  const float d = __fmaf_ru(fabsf(sa), 0x1p-22f, 0x1p-126f);
  const int b = noise_bucket(u);
  return Bracket{__fadd_rd(__fsub_rd(sa, d), noise_b[b + 1]),
                 __fadd_ru(__fadd_ru(sa, d), noise_b[b])};
}
__device__ __forceinline__ bool bracket_ok(float l, float y, float t) {
  return (__float_as_uint(__fmul_rn(l, y)) & 0x7f800000u) != 0x7f800000u && t >= 0x1p-100f &&
         t <= 0x1p100f;
}

// The slot's cut, before any Philox draw: true when no entry of the slot (its n
// entries lv[0..n)) can be the row's token, because even the slot's largest logit
// with the largest noise the sampler draws scores below k0, a proven lower bound of
// the row's largest score (the known bound: the largest zlo or exact score seen).
// Proof. Let m = max of the slot's l (none NaN: a NaN row entry is never cut), and
// H = score_bracket(m, y, u, .).hi with u in bucket 0, i.e.
// H = RU(RU(sa + d) + kGumbelMax), sa = RN(m y), d = RU(|sa| 2^-22 + 2^-126), valid
// when sa is finite and T in [2^-100, 2^100] (score_bracket's own conditions). For an
// entry l <= m: RN(l / T) <= RN(m / T) (RN and the division by T > 0 are monotone)
// <= sa + d (score_bracket's margin) <= RU(sa + d); g <= kGumbelMax (core/sampling.h,
// checked in tests/core/test_sampling.cpp); so z = RN(RN(l / T) + g) <= H. With
// H < k0 <= the row's largest score, z is strictly below it: not the maximum, and a
// non-NaN z is not picked by the NaN rule either; -inf entries score -inf. So the
// slot needs no draw, no bracket and gives no candidate; the bound it would have
// raised is only a lower bound, so leaving it out changes which entries the later
// cuts drop, never the token. sa = +-inf, all-(-inf) slots (d = inf: H is NaN) and
// NaN logits fall through to the full path. Costs kEpl max/compares and one
// bracket per slot; n = 0 (inactive lanes) draws nothing either.
template <int kEpl>
__device__ __forceinline__ bool slot_below(const float (&lv)[kEpl], int n, float y, float t,
                                           float k0) {
  if (n == 0) return true;
  float m = lv[0];
  bool nan = lv[0] != lv[0];
#pragma unroll
  for (int i = 1; i < kEpl; ++i)
    if (i < n) m = fmaxf(m, lv[i]), nan |= lv[i] != lv[i];
  if (nan || !(t >= 0x1p-100f && t <= 0x1p100f)) return false;
  const float sa = __fmul_rn(m, y);
  const float d = __fmaf_ru(fabsf(sa), 0x1p-22f, 0x1p-126f);
  return __fadd_ru(__fadd_ru(sa, d), kGumbelMax) < k0;
}

// A warp's survivors (entries whose bracket reaches the row's bound) wait in its
// queue; flush() scores them exactly (contract arithmetic) with the bound of the
// time, which by then drops most of them, and folds them into the block's bests.
struct SurvivorQueue {
  Survivor* slots;  // this warp's kQueue slots
  int count;        // warp-uniform
};

// (`lane` by reference, like the lambda this was, keeps the compiler's operand order
// and with it the kernel's registers.)
__device__ __forceinline__ void flush(SurvivorQueue& q, const FusedSmem& s, const int& lane) {
  __syncwarp();
  MarkovCandidate c = no_candidate();
  int row = -1;
  if (lane < q.count) {  // q.count <= kQueue <= 32
    const Survivor sv = q.slots[lane];
    row = sv.row;
    const float t = s.temp[row];
    const float kr = key_value(ld_volatile(s.known_s + row));
    if (!(score_bracket(sv.l, __frcp_rn(t), sv.u, s.noise_b).hi < kr))
      c = MarkovCandidate{__fadd_rn(__fdiv_rn(sv.l, t), gumbel_noise(sv.u)), sv.id};
  }
  for (unsigned left = __ballot_sync(0xffffffffu, row >= 0); left != 0u;
       left = __ballot_sync(0xffffffffu, row >= 0)) {
    const int r0 = __shfl_sync(0xffffffffu, row, __ffs(left) - 1);
    const MarkovCandidate o = warp_best(row == r0 ? c : no_candidate());
    if (lane == 0) {
      if (o.id != 0x7fffffff) atomicMax(s.best + r0, pack_candidate(o));
      if (o.value == o.value && o.id != 0x7fffffff) atomicMax(s.known_s + r0, order_key(o.value));
    }
    if (row == r0) row = -1;
  }
  q.count = 0;
  __syncwarp();
}

// This lane's survivors (the bits of `surv`, entries v0 + i of row `row`) to the
// queue slots pos, pos + 1, ..; with kClip only those that fall in [0, kQueue).
// (p.id_offset read here and row, v0 by reference, as in the loops this replaces:
// the compiler then associates the id sum as before and the registers stay the same.)
template <int kEpl, bool kClip>
__device__ __forceinline__ void enqueue_survivors(const FusedStepParams& p, Survivor* queue,
                                                  unsigned surv, int pos, const int& row,
                                                  const int& v0, const float (&lv)[kEpl],
                                                  const float (&u)[kEpl]) {
  for (unsigned m = surv; m != 0u; m &= m - 1u, ++pos) {
    const int i = __ffs(m) - 1;
    if constexpr (kClip)
      if (pos < 0 || pos >= kQueue) continue;
    float li = 0.0f, ui = 0.0f;
#pragma unroll
    for (int j = 0; j < kEpl; ++j)
      if (j == i) li = lv[j], ui = u[j];
    queue[pos] = Survivor{row, v0 + i + p.id_offset, li, ui};
  }
}

// Merges the grid-wide bounds into the block's, and publishes the block's where it
// is ahead (once per row and epilogue: the grid-wide bound is one hot address per
// row, so the warps do not each update it). known_g: row tid's grid-wide bound, loaded
// by the caller when the epilogue's tiles began (rows past the block size read theirs here).
__device__ __forceinline__ void merge_known_bounds(const FusedStepParams& p, int* known_s,
                                                   int known_g, int tid) {
  if (tid < p.rows) {
    const int mine = atomicMax(known_s + tid, known_g);
    if (mine > known_g) atomicMax(p.known + tid, mine);
  }
  for (int r = tid + kFusedThreads; r < p.rows; r += kFusedThreads) {
    const int g = ld_volatile(p.known + r), mine = atomicMax(known_s + r, g);
    if (mine > g) atomicMax(p.known + r, mine);
  }
}

}  // namespace sparkdraft::cuda::markov_detail
