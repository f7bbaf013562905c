// The verifier's kernels (cuda/verify/verify.h): ops/verify.h in its three
// stages, every element operation from core/verify_math.h (the CPU reference's
// own functions), every combine exact (packets by the order, 128-bit integer sums)
// and, across slices, by one warp per law (warp_fold: exact, so any tree gives the bits).
// The sums pass (sums_part) computes each id's term without a branch (select.h
// law_term_of_diff: exp_law's bits without a conversion, the term one 64-bit shift) and
// adds it to the thread's 96-bit partial by one carry chain (TermSum), widened to 128
// bits only for the folds; at T = 1 the passes skip the division (x / 1 is x).
// The lists form (verify.h) replaces the sums pass's reading of the logits by a
// shared-memory histogram of the slice's bf16 patterns in the first pass: Zi is the
// same integer sum, grouped by pattern (count x term). The building blocks these
// kernels share with the resident form's kernel (resident.cu) are in device.cuh.
#include "cuda/verify/verify.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>

#include "cuda/common/launch.h"
#include "cuda/common/ptx.cuh"
#include "cuda/verify/device.cuh"
#include "cuda/verify/select.h"
#include "sparkdraft/cuda/check.h"

namespace sparkdraft::cuda {
namespace {

constexpr int kRowThreads = 256;  // block verification's decide: one CTA per row

// Stage (b) for the packets of one item, by the CTA of first_kernel that arrives last:
// the law's first packet per side (law_first) and the target's kept-set threshold.
__device__ void head(const Args& a, int item) {
  const ops::VerifyParams& p = a.p;
  const int r = item / (p.n + 1), j = item % (p.n + 1);
  const float T = p.temperatures[r];
  __shared__ MarkovPacket first[2];
  const int warp = threadIdx.x / 32;
  const int sides = j < p.n && T > 0.0f ? 2 : 1;
  if (warp < sides) {
    const MarkovPacket f =
        warp_fold(a.packets + (item * 2 + warp) * a.S, a.S, no_packet(), packet_op);
    if (threadIdx.x % 32 == 0) first[warp] = f;
  }
  __syncthreads();
  for (int side = 0; side < sides; ++side) {
    const MarkovPacket f = law_first(a, r, j, side, T, first[side]);
    __syncthreads();
    if (threadIdx.x == 0) first[side] = f;
    __syncthreads();
  }
  if (threadIdx.x < sides) {
    VerifyLaw l{};
    l.first = first[threadIdx.x];
    a.laws[item * 2 + threadIdx.x] = l;
  }
  uint64_t keep = 0;
  const int32_t top_k = p.top_k ? p.top_k[r] : 0;
  const float top_p = p.top_p ? p.top_p[r] : 1.0f;
  LawStats st;
  st.first = first[0];
  if (T > 0.0f && !st.degenerate() && ((top_k > 0 && top_k < p.vocab) || top_p < 1.0f)) {
    SD_SHARED_ARRAY(Radix, rx, 1);
    keep = kept_threshold(a, r, j, T, st.first.value, top_k, top_p, *rx);
  }
  if (threadIdx.x == 0) a.keep[item] = keep;
}

// ---- the lists form: a slice's bf16 patterns counted in shared memory ----------

constexpr int kHistWords = 32768;  // 65536 16-bit counts, two a word
constexpr size_t kHistSmemBytes = kHistWords * sizeof(uint32_t);

// The histogram: the kernel's dynamic shared memory, named at this scope so that every
// access is a shared-memory one (red.shared / atom.shared, not generic).
extern __shared__ uint4 verify_hist_smem[];
__device__ uint32_t* hist_words() { return reinterpret_cast<uint32_t*>(verify_hist_smem); }

__device__ void hist_clear() {
  for (int i = threadIdx.x; i < kHistWords / 4; i += blockDim.x)
    verify_hist_smem[i] = make_uint4(0u, 0u, 0u, 0u);
}

// Counts one id of bf16 pattern `pattern` (a reduction: nothing waits for it).
__device__ __forceinline__ void hist_add(uint32_t pattern) {
  atomicAdd(hist_words() + (pattern >> 1), 1u << ((pattern & 1u) << 4));
}

// Counts every id of [v0, v1) of `row` (at most kVerifyMaxListSlice ids, so no count
// overflows its 16 bits): 16-byte loads, four a thread in flight while the four before
// them are counted. The order of the counts is free (integer counts).
__device__ void hist_count(const bf16* row, int v0, int v1) {
  const uint16_t* r16 = reinterpret_cast<const uint16_t*>(row);
  const VecSplit sp = vec_split(row, v0, v1);
  const int a0 = sp.a0, vecs = sp.vecs, a1 = sp.a1;
  for (int v = v0 + threadIdx.x; v < a0; v += blockDim.x) hist_add(r16[v]);
  for (int v = a1 + threadIdx.x; v < v1; v += blockDim.x) hist_add(r16[v]);
  const uint4* vrow = reinterpret_cast<const uint4*>(row + a0);
  constexpr int kInFlight = 4;
  const int step = static_cast<int>(blockDim.x);
  auto load = [&](uint4(&w)[kInFlight], int i0) {
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      const int i = i0 + u * step;
      w[u] = i < vecs ? __ldg(vrow + i) : make_uint4(0u, 0u, 0u, 0u);
    }
  };
  uint4 cur[kInFlight], next[kInFlight];
  load(cur, threadIdx.x);
  for (int i0 = threadIdx.x; i0 < vecs; i0 += kInFlight * step) {
    load(next, i0 + kInFlight * step);
#pragma unroll
    for (int u = 0; u < kInFlight; ++u) {
      if (i0 + u * step < vecs) {
        const uint32_t x[4] = {cur[u].x, cur[u].y, cur[u].z, cur[u].w};
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          hist_add(x[e] & 0xffffu);
          hist_add(x[e] >> 16);
        }
      }
      cur[u] = next[u];
    }
  }
}

// A bf16 pattern's place in the order of section 8.2 as 16 bits (larger first; -0
// as +0; not for a NaN), and back.
__device__ uint32_t order16(uint32_t pattern) {
  const uint32_t p = pattern == 0x8000u ? 0u : pattern;
  return (p & 0x8000u) ? (~p & 0xffffu) : (p | 0x8000u);
}
__device__ uint32_t pattern_of_order16(uint32_t o) {
  return (o & 0x8000u) ? (o & 0x7fffu) : (~o & 0xffffu);
}

// What a slice's histogram says, in every thread.
struct HistSummary {
  uint32_t length;  // the pairs of the list (more than the capacity: not all written)
  uint32_t top;     // order16 of the largest pattern that is not a NaN (0: none)
  bool nan;         // a NaN among them
};

// Writes the slice's list (every counted finite pattern as pattern << 16 | count, at
// most `capacity` of them, in any order) and leaves the histogram zeroed for the next
// count: the threads scan it 16 bytes (8 counts) a load, every thread the same number
// of rounds (the block sizes divide kHistWords / 4), and each warp claims its pairs'
// places with one atomic a round. Infinite patterns join no list (-inf's term is 0;
// +inf or a NaN make the law degenerate: it has no sums).
__device__ HistSummary hist_drain(uint32_t* list, uint32_t capacity) {
  __shared__ uint32_t length;
  __shared__ uint32_t folded;
  if (threadIdx.x == 0) length = 0;
  __syncthreads();
  const unsigned lane = threadIdx.x % 32;
  uint32_t top = 0;
  bool nan = false;
  for (int i = threadIdx.x; i < kHistWords / 4; i += blockDim.x) {
    const uint4 q = verify_hist_smem[i];
    const bool any = (q.x | q.y | q.z | q.w) != 0;
    if (!__any_sync(0xffffffffu, any)) continue;  // the whole warp's words are zero
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
    auto count = [&](int k) { return (words[k / 2] >> ((k & 1) * 16)) & 0xffffu; };
    const uint32_t first = static_cast<uint32_t>(i) * 8;  // the 8 patterns share sign and exponent
    uint32_t listed = 0;  // bit k: pattern first + k goes to the list
    if (any) {
      verify_hist_smem[i] = make_uint4(0u, 0u, 0u, 0u);
      const bool special = (first & 0x7f80u) == 0x7f80u;  // inf or NaN
#pragma unroll
      for (int k = 0; k < 8; ++k) {
        if (count(k) == 0) continue;
        const uint32_t pattern = first + k;
        if (special && (pattern & 0x7fu)) {
          nan = true;
          continue;
        }
        if (!special) listed |= 1u << k;
        top = max(top, order16(pattern));
      }
    }
    const uint32_t n = __popc(listed);
    uint32_t inclusive = n;
#pragma unroll
    for (int off = 1; off < 32; off <<= 1) {
      const uint32_t t = __shfl_up_sync(0xffffffffu, inclusive, off);
      if (lane >= static_cast<unsigned>(off)) inclusive += t;
    }
    uint32_t base = 0;
    if (lane == 31) base = atomicAdd(&length, inclusive);
    base = __shfl_sync(0xffffffffu, base, 31);
    uint32_t at = base + inclusive - n;
#pragma unroll
    for (int k = 0; k < 8; ++k) {
      if (!((listed >> k) & 1u)) continue;
      if (at < capacity) list[at] = (first + k) << 16 | count(k);
      ++at;
    }
  }
  const uint64_t f = block_fold(uint64_t{nan ? 0x10000u : top}, uint64_t{0}, key_op);
  if (threadIdx.x == 0) folded = static_cast<uint32_t>(f);
  __syncthreads();
  return HistSummary{length, folded & 0xffffu, folded == 0x10000u};
}

// The lists form's first pass of one CTA (rows with T > 0): per side the histogram of
// the slice, its list and its raw first packet. The packet's value is the largest
// pattern's (what FirstKey gives); its id is read only for a NaN (law_first: a law
// with no NaN reads the id only when M is +-inf, and finds it itself then), so it
// is the first NaN's, by FirstKey over the slice, and otherwise the slice's first id.
// An fp32 target is folded by FirstKey as in the rows form.
__device__ void first_lists(const Args& a, int item, int s, bool with_draft) {
  const ops::VerifyParams& p = a.p;
  const int r = item / (p.n + 1), j = item % (p.n + 1);
  const int64_t slot = p.cache_slots[r];
  const int v0 = s * a.slice, v1 = min(p.vocab, v0 + a.slice);
  hist_clear();
  __syncthreads();
  for (int side = 0; side < (with_draft ? 2 : 1); ++side) {
    const int law = item * 2 + side;
    MarkovPacket packet;
    if (side == 0 && p.target_dtype == LogitsDType::f32) {
      FirstKey f;
      for_each_target(p, r, j, v0, v1, [&](int v, float x) { f.add(x, v); });
      packet = packet_of_key(block_fold(f.key(), uint64_t{0}, key_op));
    } else {
      const bf16* row = side == 0 ? static_cast<const bf16*>(p.target_logits) +
                                        (static_cast<int64_t>(r) * (p.n + 1) + j) * p.vocab
                                  : p.draft_logits + (slot * p.n + j) * p.vocab;
      hist_count(row, v0, v1);
      __syncthreads();
      const size_t list = static_cast<size_t>(law) * a.S + s;
      const HistSummary sum =
          hist_drain(a.lists + list * a.list_capacity, static_cast<uint32_t>(a.list_capacity));
      if (threadIdx.x == 0) a.list_lengths[list] = sum.length;
      if (sum.nan) {
        FirstKey f;
        for_each_logit<true>(row, v0, v1, [&](int v, float x) { f.add(x, v); });
        packet = packet_of_key(block_fold(f.key(), uint64_t{0}, key_op));
      } else {
        packet = MarkovPacket{bf16_lo(pattern_of_order16(sum.top)), v0, 0};
      }
    }
    if (threadIdx.x == 0) a.packets[law * a.S + s] = packet;
    __syncthreads();  // the drain's zeroing before the next side's counts
  }
}

// ---- stage (a), pass 1: first-id packets --------------------------------------

// The first packet of the raw (unscaled) logits: the division by T > 0 is monotone,
// so the scaled maximum is fdiv(raw maximum, T) and the NaN ids are the same; only
// the first id can differ (the division may tie distinct raw values), and the law
// reads it only when it is degenerate: head's law_first settles that.
__global__ void first_kernel(const Args a) {
  pdl_enter();
  const ops::VerifyParams& p = a.p;
  const int item = blockIdx.x, s = blockIdx.y, r = item / (p.n + 1), j = item % (p.n + 1);
  if (padding(p, r)) return;
  const float T = p.temperatures[r];
  const bool with_draft = j < p.n && T > 0.0f;
  if (a.list_capacity > 0 && T > 0.0f) {
    first_lists(a, item, s, with_draft);
    if (last_to_arrive(a.first_arrivals + item, static_cast<uint32_t>(a.S))) head(a, item);
    return;
  }
  const int64_t slot = p.cache_slots[r];
  const int v0 = s * a.slice, v1 = min(p.vocab, v0 + a.slice);
  // The first id is the largest order key (select.h): per thread one 32-bit comparison
  // an id (FirstKey: a thread's ids come in increasing order), then the 64-bit keys.
  FirstKey ft, fd;
  for_each_target(p, r, j, v0, v1, [&](int v, float x) { ft.add(x, v); });
  if (with_draft) for_each_draft(p, slot, j, v0, v1, [&](int v, float x) { fd.add(x, v); });
  const uint64_t t = block_fold(ft.key(), uint64_t{0}, key_op);
  const uint64_t d = with_draft ? block_fold(fd.key(), uint64_t{0}, key_op) : 0;
  if (threadIdx.x == 0) {
    a.packets[(item * 2 + 0) * a.S + s] = packet_of_key(t);
    if (with_draft) a.packets[(item * 2 + 1) * a.S + s] = packet_of_key(d);
  }
  if (last_to_arrive(a.first_arrivals + item, static_cast<uint32_t>(a.S))) head(a, item);
}

// ---- stage (b) for the sums, and (c): the decision ---------------------------------

// Stage (b) for the sums of one row and (c), its decision, by the CTA of sums_kernel
// that arrives last.
__device__ void decide(const Args& a, int r) {
  const ops::VerifyParams& p = a.p;
  const int N = p.n, n = p.row_length(r);  // n: the drafts row r verifies
  const int64_t* x = p.draft_tokens + static_cast<int64_t>(r) * N;
  if (greedy(p, r)) {
    // Section 8.5, T = 0: the first id of f32(t_j) at each position.
    if (threadIdx.x == 0) {
      int k = 0;
      int64_t pick = a.laws[0 + r * (N + 1) * 2].first.id;
      while (k < n && x[k] == pick) {
        ++k;
        pick = a.laws[(r * (N + 1) + k) * 2].first.id;
      }
      a.accepted[r] = k;
      a.emitted[r] = pick;
    }
    return;
  }
  // Z of every (position, side): one warp per law folds its slices (warp_fold).
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int l = warp; l < 2 * N + 1; l += warps) {
    const int j = l / 2, side = l % 2;
    const int item = r * (N + 1) + j;
    VerifyLaw* law = a.laws + item * 2 + side;
    if (stats_of(*law).degenerate()) continue;  // uniform across the warp
    const U128 sum = warp_fold(a.sums + (item * 2 + side) * a.S, a.S, U128{}, sum_op);
    if (threadIdx.x % 32 == 0) law->z = f32_of_fixed64(sum);
  }
  __syncthreads();
  // p_j(x_j), q_j(x_j) and the accept uniform u_j of every position, one thread each;
  // then thread 0 runs the sequential decision over them.
  __shared__ float P[64], Q[64], U[64];
  const float T = p.temperatures[r];
  const int64_t seed = p.seeds[r], anchor = p.anchor_positions[r], slot = p.cache_slots[r];
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const int v = static_cast<int>(x[j]);
    const VerifyLaw& lt = a.laws[(r * (N + 1) + j) * 2];
    const VerifyLaw& ld = a.laws[(r * (N + 1) + j) * 2 + 1];
    P[j] = law_prob(stats_of(lt), lt.z, target_kept(a, r, j, v, T), v);
    Q[j] = law_prob(stats_of(ld), ld.z, verify_scaled(draft_logit(p, slot, j, v), T), v);
    U[j] = accept_uniform(seed, anchor + j, p.accept_salt, x[j]);
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  if (p.method == VerifyMethod::standard) {
    int k = 0;
    while (k < n && accept_standard(U[k], Q[k], P[k])) ++k;
    a.accepted[r] = k;
    a.chosen_weight[r] = 1.0f;
  } else {
    float* w = a.weights + r * (N + 1);
    w[0] = 1.0f;
    for (int i = 1; i <= n; ++i) w[i] = block_weight_next(w[i - 1], P[i - 1], Q[i - 1]);
  }
}

// ---- stage (a), pass 2: the exact sums Zi ---------------------------------------

// A slice's sum from its list (the lists form): count x term per pattern, the same
// integer as the sum of the terms of its ids. A term is at most 2^64 and a count below
// 2^16, so each product fits the 128-bit partial.
template <class Scaled>
__device__ U128 list_sum(const uint32_t* list, uint32_t length, float max_value, Scaled scaled) {
  U128 acc;
  for (uint32_t i = threadIdx.x; i < length; i += blockDim.x) {
    const uint32_t pair = list[i];
    const uint64_t c = pair & 0xffffu;
    const LawTerm t = law_term_of_diff(fsub_rn(scaled(bf16_hi(pair)), max_value));
    acc = u128_add(acc, U128{t.lo * c, __umul64hi(t.lo, c) + t.one * c});
  }
  return acc;
}

// One CTA's part of the sums: slice s of item `item`.
__device__ void sums_part(const Args& a, int item, int s) {
  const ops::VerifyParams& p = a.p;
  const int r = item / (p.n + 1), j = item % (p.n + 1);
  const float T = p.temperatures[r];
  const int64_t slot = p.cache_slots[r];
  const LawStats tst = stats_of(a.laws[item * 2]);
  const bool with_target = !tst.degenerate();
  bool with_draft = false;
  float md = 0.0f;
  if (j < p.n) {
    const LawStats dst = stats_of(a.laws[item * 2 + 1]);
    with_draft = !dst.degenerate();
    md = dst.first.value;
  }
  const float mt = tst.first.value;
  const uint64_t keep = a.keep[item];
  const int v0 = s * a.slice, v1 = min(p.vocab, v0 + a.slice);
  // The lists form's list of a side, or null where that slice reads the logits.
  auto list_of = [&](int side, uint32_t& length) -> const uint32_t* {
    if (a.list_capacity == 0) return nullptr;
    const size_t list = static_cast<size_t>(item * 2 + side) * a.S + s;
    length = a.list_lengths[list];
    return length <= static_cast<uint32_t>(a.list_capacity) ? a.lists + list * a.list_capacity
                                                            : nullptr;
  };
  uint32_t t_length = 0, d_length = 0;
  const uint32_t* t_list = with_target && keep == 0 && p.target_dtype == LogitsDType::bf16
                               ? list_of(0, t_length)
                               : nullptr;
  const uint32_t* d_list = with_draft ? list_of(1, d_length) : nullptr;
  TermSum t, d;
  U128 t_listed, d_listed;
  with_scaling(T, [&](auto scaled) {
    if (t_list) {
      t_listed = list_sum(t_list, t_length, mt, scaled);
    } else if (with_target) {
      if (keep == 0) {
        for_each_target(p, r, j, v0, v1,
                        [&](int, float x) { t.add(law_term_of_diff(fsub_rn(scaled(x), mt))); });
      } else {
        for_each_target(p, r, j, v0, v1, [&](int v, float x) {
          const float sv = scaled(x);
          if (order_key(sv, v) >= keep) t.add(law_term_of_diff(fsub_rn(sv, mt)));
        });
      }
    }
    if (d_list)
      d_listed = list_sum(d_list, d_length, md, scaled);
    else if (with_draft)
      for_each_draft(p, slot, j, v0, v1,
                     [&](int, float x) { d.add(law_term_of_diff(fsub_rn(scaled(x), md))); });
  });
  U128 tw = u128_add(t.wide(), t_listed), dw = u128_add(d.wide(), d_listed);
  if (with_target) tw = block_fold(tw, U128{}, sum_op);
  if (with_draft) dw = block_fold(dw, U128{}, sum_op);
  if (threadIdx.x == 0) {
    if (with_target) a.sums[(item * 2 + 0) * a.S + s] = tw;
    if (with_draft) a.sums[(item * 2 + 1) * a.S + s] = dw;
  }
}

// Grid (items, S); the last CTA of a row runs its decision (a greedy row's CTAs only
// arrive).
__global__ void sums_kernel(const Args a) {
  pdl_enter();
  const ops::VerifyParams& p = a.p;
  const int item = blockIdx.x, r = item / (p.n + 1);
  if (padding(p, r)) return;
  if (!greedy(p, r)) sums_part(a, item, blockIdx.y);
  if (last_to_arrive(a.sums_arrivals + r, static_cast<uint32_t>((p.n + 1) * a.S))) decide(a, r);
}

// Calls f(v, f32(t[v]), f32(c[v])) for every id v of [v0, v1) this thread owns, for a
// bf16 target row t and a cache row c: 16 bytes of each a load where the two rows share
// their alignment (every id once, in any order: the callers' folds are exact), else one
// id at a time.
template <class F>
__device__ void for_each_pair(const bf16* t, const bf16* c, int v0, int v1, F&& f) {
  const uintptr_t at = reinterpret_cast<uintptr_t>(t + v0),
                  ac = reinterpret_cast<uintptr_t>(c + v0);
  if ((at & 15) != (ac & 15)) {
    for (int v = v0 + threadIdx.x; v < v1; v += blockDim.x) f(v, to_f32(t[v]), to_f32(c[v]));
    return;
  }
  const VecSplit sp = vec_split(t, v0, v1);
  const int a0 = sp.a0, vecs = sp.vecs, a1 = sp.a1;
  for (int v = v0 + threadIdx.x; v < a0; v += blockDim.x) f(v, to_f32(t[v]), to_f32(c[v]));
  for (int v = a1 + threadIdx.x; v < v1; v += blockDim.x) f(v, to_f32(t[v]), to_f32(c[v]));
  const uint4* tv = reinterpret_cast<const uint4*>(t + a0);
  const uint4* cv = reinterpret_cast<const uint4*>(c + a0);
  for (int i = threadIdx.x; i < vecs; i += blockDim.x) {
    const uint4 x = __ldg(tv + i), y = __ldg(cv + i);
    const uint32_t xs[4] = {x.x, x.y, x.z, x.w}, ys[4] = {y.x, y.y, y.z, y.w};
    const int v = a0 + i * 8;
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      f(v + 2 * e, bf16_lo(xs[e]), bf16_lo(ys[e]));
      f(v + 2 * e + 1, bf16_hi(xs[e]), bf16_hi(ys[e]));
    }
  }
}

// Block verification: the residual mass R_i of positions i = 1 .. N-1, per slice. Where
// both laws are non-degenerate (then law_prob is fdiv(law_exp(s, M), Z) on the kept set)
// and the target is bf16, the pairs come 16 bytes a load and the division by T is
// skipped at T 1 (x / 1 is x); otherwise id by id through law_prob.
__global__ void mass_kernel(const Args a) {
  pdl_enter();
  const ops::VerifyParams& p = a.p;
  const int N = p.n, r = blockIdx.x / (N - 1), i = blockIdx.x % (N - 1) + 1, s = blockIdx.y;
  if (padding(p, r) || greedy(p, r) || i >= p.row_length(r)) return;  // R_i for i < n only
  const float T = p.temperatures[r];
  const int64_t slot = p.cache_slots[r];
  const int item = r * (N + 1) + i;
  const VerifyLaw lt = a.laws[item * 2], ld = a.laws[item * 2 + 1];
  const LawStats tst = stats_of(lt), dst = stats_of(ld);
  const float w = a.weights[item];
  const uint64_t keep = a.keep[item];
  const int v0 = s * a.slice, v1 = min(p.vocab, v0 + a.slice);
  U128 m;
  if (!tst.degenerate() && !dst.degenerate() && p.target_dtype == LogitsDType::bf16) {
    const bf16* t_row = static_cast<const bf16*>(p.target_logits) +
                        (static_cast<int64_t>(r) * (N + 1) + i) * p.vocab;
    const bf16* c_row = p.draft_logits + (slot * N + i) * p.vocab;
    const float mt = tst.first.value, md = dst.first.value;
    with_scaling(T, [&](auto scaled) {
      for_each_pair(t_row, c_row, v0, v1, [&](int v, float x, float y) {
        const float sv = scaled(x);
        const float pv =
            keep != 0 && order_key(sv, v) < keep ? 0.0f : fdiv_rn(law_exp(sv, mt), lt.z);
        const float qv = fdiv_rn(law_exp(scaled(y), md), ld.z);
        m = u128_add(m, fixed64_of_unit(block_mass(w, pv, qv)));
      });
    });
  } else {
    for (int v = v0 + threadIdx.x; v < v1; v += blockDim.x) {
      const float pv = law_prob(tst, lt.z, target_kept(a, r, i, v, T), v);
      const float qv = law_prob(dst, ld.z, verify_scaled(draft_logit(p, slot, i, v), T), v);
      m = u128_add(m, fixed64_of_unit(block_mass(w, pv, qv)));
    }
  }
  m = block_fold(m, U128{}, sum_op);
  if (threadIdx.x == 0) a.mass[(r * N + i) * a.S + s] = m;
}

// Block verification: h_i and k (the largest i with u_{i-1} < h_i).
__global__ void block_decide_kernel(const Args a) {
  pdl_enter();
  const ops::VerifyParams& p = a.p;
  const int r = blockIdx.x, N = p.n, n = p.row_length(r);
  if (padding(p, r) || greedy(p, r)) return;
  __shared__ float h[64 + 1];
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const float* w = a.weights + r * (N + 1);
  for (int i = 1 + warp; i < n; i += warps) {
    const U128 m = warp_fold(a.mass + (r * N + i) * a.S, a.S, U128{}, sum_op);
    if (threadIdx.x % 32 == 0) h[i] = block_h(f32_of_fixed64(m), w[i]);
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  h[n] = w[n];
  const int64_t seed = p.seeds[r], anchor = p.anchor_positions[r];
  const int64_t* x = p.draft_tokens + static_cast<int64_t>(r) * N;
  int k = 0;
  for (int i = 1; i <= n; ++i)
    if (accept_uniform(seed, anchor + i - 1, p.accept_salt, x[i - 1]) < h[i]) k = i;
  a.accepted[r] = k;
  a.chosen_weight[r] = w[k];
}

// finish_row for draw_kernel: the decision's results from the workspace (written by
// earlier kernels).
__device__ void finish(const Args& a, int r) {
  const int k = a.accepted[r];
  const int item = r * (a.p.n + 1) + k;
  finish_row(a, r, k, a.laws[item * 2].first, a.keep[item],
             greedy(a.p, r) ? a.emitted[r] : int64_t{0});
}

// One CTA's draw slice s of row r: k < N, the residual race (standard or block);
// k == N, the target's race (the bonus; none for a degenerate law, whose point finish
// emits). Ids of weight 0 score 0, below every positive score: they are skipped (no
// noise drawn), and a slice with no positive weight leaves the packet that never wins.
// The target draw as the fallback of an empty residual is finish's.
__device__ void draw_part(const Args& a, int r, int s) {
  const ops::VerifyParams& p = a.p;
  const int N = p.n, n = p.row_length(r);
  const float T = p.temperatures[r];
  const int64_t slot = p.cache_slots[r];
  const int k = a.accepted[r];
  const int item = r * (N + 1) + k;
  const uint32_t gd = verify_step_seed(p.seeds[r], p.anchor_positions[r] + k, p.draw_salt);
  const VerifyLaw lt = a.laws[item * 2];
  const int v0 = s * a.draw_slice, v1 = min(p.vocab, v0 + a.draw_slice);
  MarkovPacket win = no_packet();
  if (k < n) {
    const VerifyLaw ld = a.laws[item * 2 + 1];
    const float w = a.chosen_weight[r];
    const bool standard = p.method == VerifyMethod::standard;
    const bf16* q_row = p.draft_logits + (slot * N + k) * p.vocab;
    const uint64_t keep = a.keep[item];
    const LawStats tst = stats_of(lt), dst = stats_of(ld);
    // The weight m is at most p (p - q, or w * p - q with w <= 1, each rounding
    // monotone): an id whose p * 2^25 is below win's value cannot win (race_fold's
    // bound) and needs neither q nor a uniform. Otherwise the uniform and q are two
    // independent chains (Philox; exp_law and a division) for the scheduler to
    // interleave: the draw is issue-bound on this per-id code (2026-12-05d run 1). The
    // cache's value is loaded before p's chain, used or not.
    with_scaling(T, [&](auto scaled) {
      for_each_target<false>(p, r, k, v0, v1, [&](int v, float x) {
        const float y = to_f32(q_row[v]);
        const float sv = scaled(x);
        const float pv =
            law_prob(tst, lt.z, keep != 0 && order_key(sv, v) < keep ? neg_inf() : sv, v);
        if (!(pv > 0.0f) || fmul_rn(pv, 0x1p25f) < win.value) return;
        const float u = philox_uniform_u32(gd, static_cast<uint32_t>(v));
        const float qv = law_prob(dst, ld.z, scaled(y), v);
        const float m = standard ? residual_weight(pv, qv) : block_mass(w, pv, qv);
        if (m > 0.0f) race_fold_u(win, m, u, v);
      });
    });
  } else if (!stats_of(lt).degenerate()) {
    win = target_race(a, r, k, v0, v1, gd, T, lt.first.value, a.keep[item]);
  }
  win = block_fold(win, no_packet(), packet_op);
  if (threadIdx.x == 0) a.draws[r * a.draw_S + s] = win;
}

// Grid (rows, D draw slices); the last CTA of a row finishes it (a greedy row's CTAs
// only arrive).
__global__ void draw_kernel(const Args a) {
  pdl_enter();
  const ops::VerifyParams& p = a.p;
  const int r = blockIdx.x;
  if (padding(p, r)) return;
  if (!greedy(p, r)) draw_part(a, r, blockIdx.y);
  if (last_to_arrive(a.draw_arrivals + r, static_cast<uint32_t>(a.draw_S))) finish(a, r);
}

}  // namespace

VerifyWorkspace::VerifyWorkspace(int max_rows, int n, int vocab, int max_slices)
    : max_rows_(max_rows), n_(n), vocab_(vocab), max_slices_(max_slices) {
  require(max_rows >= 1 && n >= 1 && n <= 64 && vocab >= 1, "VerifyWorkspace",
          "needs max_rows >= 1, N in [1, 64] and V >= 1; got " + std::to_string(max_rows) + ", " +
              std::to_string(n) + ", " + std::to_string(vocab));
  require(max_slices >= 1 && max_slices <= kVerifyMaxSlices, "VerifyWorkspace",
          "max_slices must be in [1, " + std::to_string(kVerifyMaxSlices) + "]");
  int device = 0;
  SD_CUDA_CHECK(cudaGetDevice(&device));
  SD_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
  max_resident_slices_ = kVerifyResidentCtasPerSm * sm_count_;
  // S: room for the staged kernels' slices and for the resident form's G.
  const size_t R = max_rows, N = n, S = std::max(max_slices, max_resident_slices_);
  packets = DeviceBuffer<MarkovPacket>(R * (N + 1) * 2 * S);
  sums = DeviceBuffer<U128>(R * (N + 1) * 2 * S);
  mass = DeviceBuffer<U128>(R * N * S);
  draws = DeviceBuffer<MarkovPacket>(R * std::max<size_t>(kVerifyMaxDrawSlices, S));
  laws = DeviceBuffer<VerifyLaw>(R * (N + 1) * 2);
  keep = DeviceBuffer<uint64_t>(R * (N + 1));
  weights = DeviceBuffer<float>(R * (N + 1));
  chosen_weight = DeviceBuffer<float>(R);
  accepted = DeviceBuffer<int32_t>(R);
  emitted = DeviceBuffer<int64_t>(R);
  arrivals = DeviceBuffer<uint32_t>(R * (N + 1) + 3 * R);
  SD_CUDA_CHECK(cudaMemset(arrivals.data(), 0, arrivals.bytes()));
  // Room for the pick's lists: S x max(64, slice / 8) <= V / 8 + 64 S + 1 for the
  // slices it cuts (each at most ceil(V / S) + 255 ids).
  list_region_ = vocab / 8 + 1 + static_cast<int64_t>(kVerifyMaxSlices) * 64;
  lists = DeviceBuffer<uint32_t>(R * (N + 1) * 2 * static_cast<size_t>(list_region_));
  list_lengths = DeviceBuffer<uint32_t>(R * (N + 1) * 2 * S);
  detail::resident_prepare();
  // The lists form's histogram is dynamic shared memory above the default 48 KB.
  SD_CUDA_CHECK(cudaFuncSetAttribute(first_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(kHistSmemBytes)));
}

namespace {

// ceil(V / S) rounded up to a multiple of 256, at most V.
int slice_width(int64_t vocab, int64_t S) {
  const int64_t slice = ((vocab + S - 1) / S + 255) / 256 * 256;
  return static_cast<int>(std::min(slice, vocab));
}

// The resident form's pick (VerifyWorkspace::pick); none when even one request does not
// fit in the GPU's shared memory.
std::optional<VerifyShape> resident_fit(int rows, int n, int vocab, int sm_count, int max_g,
                                        LogitsDType target) {
  // 512 threads: the sums are issue-bound at many rows, and 16 warps of each of two CTAs
  // an SM hide more of their latency (a warp per law: 2N + 1 = 15 laws at N 7).
  constexpr int kThreads = 512;
  const int64_t R = std::max(rows, 1), V = vocab;
  const int v8 = static_cast<int>((V + 7) / 8 * 8);
  // One request: one CTA an SM. Its time is mostly the CTAs' meetings and each CTA's
  // fold of the G packets, not the bytes (2026-12-05a run 1, V 151936, bf16: 39.3 us at
  // G 132, 40.2 at 66, 49.6 at 33, 53.8 at 264 CTAs, two an SM).
  const int first_per_sm = R == 1 ? 1 : kVerifyResidentCtasPerSm;
  for (int per_sm = first_per_sm; per_sm >= 1; --per_sm) {
    // The widest slice, a multiple of 8, of which per_sm CTAs fit an SM.
    auto fits = [&](int w) {
      return detail::resident_occupancy(kThreads, detail::resident_smem_bytes(n, w, target)) >=
             per_sm;
    };
    if (!fits(8)) continue;
    int lo = 1, hi = v8 / 8;  // fits(8 lo) holds
    while (lo < hi) {
      const int mid = lo + (hi - lo + 1) / 2;
      if (fits(8 * mid))
        lo = mid;
      else
        hi = mid - 1;
    }
    const int64_t w_max = 8 * static_cast<int64_t>(lo);
    const int64_t P = static_cast<int64_t>(per_sm) * sm_count;
    const int64_t g_min = (V + w_max - 1) / w_max;
    if (g_min > std::min<int64_t>(P, max_g)) continue;
    // The fewest rounds of requests, then the requests spread evenly over them, each
    // round's CTAs over its requests.
    const int64_t rf_max = std::min<int64_t>(P / g_min, R);
    const int64_t rounds = (R + rf_max - 1) / rf_max;
    const int64_t rf = (R + rounds - 1) / rounds;
    const int64_t G = std::min<int64_t>(P / rf, max_g);
    VerifyShape shape;
    shape.threads = kThreads;
    shape.slice = static_cast<int>(((V + G - 1) / G + 7) / 8 * 8);
    shape.resident_rows = static_cast<int>(rf);
    return shape;
  }
  return std::nullopt;
}

}  // namespace

VerifyShape VerifyWorkspace::pick(int rows, VerifyForm form, LogitsDType target,
                                  VerifyMethod method) const {
  if (form == VerifyForm::resident ||
      (form == VerifyForm::automatic && rows <= kVerifyResidentUpToRows &&
       method == VerifyMethod::standard)) {
    const std::optional<VerifyShape> shape =
        resident_fit(rows, n_, vocab_, sm_count_, max_resident_slices_, target);
    if (shape) return *shape;
    if (form == VerifyForm::resident)
      throw InvalidArgument("cuda::verify: the resident form cannot hold one request of V " +
                            std::to_string(vocab_) + " and N " + std::to_string(n_) +
                            " in the GPU's shared memory");
  }
  // About 4 CTAs per SM: over rows x (N + 1) items for the vocabulary kernels, over
  // the rows for the draw; slices of at least 1024 ids, a multiple of 256.
  const int64_t R = std::max(rows, 1), ctas = 4 * static_cast<int64_t>(sm_count_);
  const int64_t items = R * (n_ + 1);
  const int64_t by_width = std::max<int64_t>(1, vocab_ / 1024);
  const int64_t D = std::min<int64_t>({(ctas + R - 1) / R, by_width, kVerifyMaxDrawSlices});
  VerifyShape shape;
  shape.draw_slice = slice_width(vocab_, std::max<int64_t>(D, 1));
  const bool lists = form == VerifyForm::lists ||
                     (form == VerifyForm::automatic && items >= kVerifyListsFromItems);
  // The lists form: one CTA an SM; the fewest slices (each at most 255 x 256 ids, so
  // the rounding keeps it within kVerifyMaxListSlice) whose waves of CTAs x (ids a
  // slice + a CTA's fixed work, about 8192 ids' worth: the histogram's clearing and
  // draining) are the fewest.
  const int64_t s_min = (vocab_ + 255 * 256 - 1) / (255 * 256);
  if (lists && s_min <= max_slices_) {
    int64_t best = s_min, best_cost = INT64_MAX;
    for (int64_t S = s_min; S <= max_slices_; ++S) {
      const int64_t waves = (items * S + sm_count_ - 1) / sm_count_;
      const int64_t cost = waves * ((vocab_ + S - 1) / S + 8192);
      if (cost < best_cost) {
        best = S;
        best_cost = cost;
      }
    }
    shape.threads = 512;
    shape.draw_threads =
        256;  // the draw's long per-id code runs better at 256 (gpu-log 2026-12-04d)
    shape.slice = slice_width(vocab_, best);
    shape.list_capacity = std::max(64, shape.slice / 8);
    return shape;
  }
  const int64_t S = std::min<int64_t>({(ctas + items - 1) / items, by_width, max_slices_});
  shape.threads = 256;
  shape.slice = slice_width(vocab_, std::max<int64_t>(S, 1));
  return shape;
}

void verify(const ops::VerifyParams& p, VerifyWorkspace& ws, cudaStream_t stream,
            const VerifyShape* shape_in) {
  p.check();
  require(p.rows <= ws.max_rows() && p.n == ws.n() && p.vocab == ws.vocab(), "verify",
          "the call (rows " + std::to_string(p.rows) + ", N " + std::to_string(p.n) + ", V " +
              std::to_string(p.vocab) + ") exceeds the workspace (rows " +
              std::to_string(ws.max_rows()) + ", N " + std::to_string(ws.n()) + ", V " +
              std::to_string(ws.vocab()) + ")");
  if (p.rows == 0) return;
  const VerifyShape shape =
      shape_in ? *shape_in : ws.pick(p.rows, VerifyForm::automatic, p.target_dtype, p.method);
  auto is_choice = [](int t) {
    return std::find(std::begin(kVerifyThreadChoices), std::end(kVerifyThreadChoices), t) !=
           std::end(kVerifyThreadChoices);
  };
  require(is_choice(shape.threads), "verify",
          "threads " + std::to_string(shape.threads) + " is not 64, 128, 256 or 512");
  require(shape.draw_threads == 0 || is_choice(shape.draw_threads), "verify",
          "draw_threads " + std::to_string(shape.draw_threads) + " is not 0, 64, 128, 256 or 512");
  require(shape.resident_rows >= 0, "verify", "resident_rows must be >= 0");
  if (shape.resident_rows > 0) {
    require(shape.slice >= 1, "verify", "slice must be >= 1");
    detail::resident_launch(p, ws, shape, stream);
    return;
  }
  require(shape.slice >= 1 && shape.draw_slice >= 1, "verify", "slice and draw_slice must be >= 1");
  const int64_t S = (static_cast<int64_t>(p.vocab) + shape.slice - 1) / shape.slice;
  require(S <= ws.max_slices(), "verify",
          "slice " + std::to_string(shape.slice) + " makes " + std::to_string(S) +
              " slices, more than the workspace's " + std::to_string(ws.max_slices()));
  require(shape.list_capacity >= 0, "verify", "list_capacity must be >= 0");
  if (shape.list_capacity > 0) {
    require(shape.slice <= kVerifyMaxListSlice, "verify",
            "the lists form counts at most " + std::to_string(kVerifyMaxListSlice) +
                " ids a slice; slice " + std::to_string(shape.slice));
    require(S * shape.list_capacity <= ws.list_region(), "verify",
            std::to_string(S) + " slices of list_capacity " + std::to_string(shape.list_capacity) +
                " exceed the workspace's " + std::to_string(ws.list_region()) + " pairs a law");
  }
  const int64_t D = (static_cast<int64_t>(p.vocab) + shape.draw_slice - 1) / shape.draw_slice;
  require(D <= kVerifyMaxDrawSlices, "verify",
          "draw_slice " + std::to_string(shape.draw_slice) + " makes " + std::to_string(D) +
              " draw slices, more than " + std::to_string(kVerifyMaxDrawSlices));
  Args a{p,
         ws.packets.data(),
         ws.sums.data(),
         ws.mass.data(),
         ws.draws.data(),
         ws.laws.data(),
         ws.keep.data(),
         ws.weights.data(),
         ws.chosen_weight.data(),
         ws.accepted.data(),
         ws.emitted.data(),
         static_cast<int>(S),
         shape.slice,
         static_cast<int>(D),
         shape.draw_slice,
         ws.arrivals.data(),
         ws.arrivals.data() + static_cast<size_t>(ws.max_rows()) * (ws.n() + 1),
         ws.arrivals.data() + static_cast<size_t>(ws.max_rows()) * (ws.n() + 2),
         ws.lists.data(),
         ws.list_lengths.data(),
         shape.list_capacity};
  const unsigned items = static_cast<unsigned>(p.rows) * (p.n + 1);
  const unsigned rows = static_cast<unsigned>(p.rows);
  const dim3 block(static_cast<unsigned>(shape.threads));
  const unsigned s = static_cast<unsigned>(S);
  const size_t first_smem = shape.list_capacity > 0 ? kHistSmemBytes : 0;
  launch_kernel("verify_first", first_kernel,
                LaunchShape{dim3(items, s), block, first_smem, stream}, a);
  launch_kernel("verify_sums", sums_kernel, LaunchShape{dim3(items, s), block, 0, stream}, a);
  if (p.method == VerifyMethod::block) {
    if (p.n >= 2)
      launch_kernel("verify_mass", mass_kernel,
                    LaunchShape{dim3(rows * (p.n - 1), s), block, 0, stream}, a);
    launch_kernel("verify_block_decide", block_decide_kernel,
                  LaunchShape{dim3(rows), dim3(kRowThreads), 0, stream}, a);
  }
  const dim3 draw_block(
      static_cast<unsigned>(shape.draw_threads > 0 ? shape.draw_threads : shape.threads));
  launch_kernel("verify_draw", draw_kernel,
                LaunchShape{dim3(rows, static_cast<unsigned>(D)), draw_block, 0, stream}, a);
}

}  // namespace sparkdraft::cuda
