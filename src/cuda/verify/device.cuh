// The verifier's device building blocks (cuda/verify/verify.h), shared by its two
// kernel families: the staged kernels (verify.cu: first, sums, mass, draw) and the
// resident kernel (resident.cu). Every element operation comes from
// core/verify_math.h (the CPU reference's own functions) or cuda/verify/select.h
// (host/device, tested against it); every fold across threads, warps and CTAs is
// exact (packets by the order, 128-bit integer sums), so any split and any tree give
// the same bits. Included by .cu files only (an anonymous namespace: each translation
// unit keeps its own copy).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/verify/select.h"
#include "cuda/verify/verify.h"

namespace sparkdraft::cuda {
namespace {
using verify_select::digit;
using verify_select::FirstKey;
using verify_select::law_term_of_diff;
using verify_select::LawTerm;
using verify_select::order_key;
using verify_select::race_fold;
using verify_select::race_fold_u;
using verify_select::sum_term;
using verify_select::TermSum;

constexpr int kMaxThreads = 512;
constexpr int kRadixBuckets = verify_select::kBuckets;

SD_HD float neg_inf() { return bits_f32(0xff800000u); }

// The packet that never wins (no slice is empty, so it never survives a fold).
SD_HD MarkovPacket no_packet() { return MarkovPacket{neg_inf(), 0x7fffffff, 0}; }

// The kernels' view of one call: the op's parameters and the workspace's arrays
// for S slices of `slice` ids.
struct Args {
  ops::VerifyParams p;
  MarkovPacket* packets;
  U128* sums;
  U128* mass;
  MarkovPacket* draws;
  VerifyLaw* laws;
  uint64_t* keep;
  float* weights;
  float* chosen_weight;
  int32_t* accepted;
  int64_t* emitted;
  int S;
  int slice;
  int draw_S;      // the draw kernel's slices
  int draw_slice;  // and their width
  // Arrival counters (zero between calls): per item for first, per row for sums and draw.
  uint32_t* first_arrivals;
  uint32_t* sums_arrivals;
  uint32_t* draw_arrivals;
  // The lists form: list_capacity pairs per (item, side, slice); 0: the rows form.
  uint32_t* lists;
  uint32_t* list_lengths;
  int list_capacity;
  // The resident form (resident.cu; S = draw_S = its CTAs a row, slice = draw_slice their
  // width): requests in flight, and one arrival counter per row for all its phases.
  int resident_rows;
  uint32_t* resident_arrivals;
};

__device__ float target_logit(const ops::VerifyParams& p, int r, int j, int v) {
  const int64_t i = (static_cast<int64_t>(r) * (p.n + 1) + j) * p.vocab + v;
  return p.target_dtype == LogitsDType::f32 ? static_cast<const float*>(p.target_logits)[i]
                                            : to_f32(static_cast<const bf16*>(p.target_logits)[i]);
}

__device__ float draft_logit(const ops::VerifyParams& p, int64_t slot, int j, int v) {
  return to_f32(p.draft_logits[(slot * p.n + j) * p.vocab + v]);
}

// ---- reading a row of logits --------------------------------------------------

// Calls f(v, f32(row[v])) for every id v of [v0, v1) this thread owns: the ids
// before the first 16-byte boundary and after the last one one by one, the rest
// 16 bytes a load (8 bf16 or 4 fp32), the CTA's threads interleaved. A thread's ids
// come in increasing order (select.h's FirstKey and race_fold rely on it: a later id
// loses a tie). Every fold that consumes it is exact (packets by the order, integer
// sums), so the split among threads never changes a bit. kVector false: every id one
// by one (for the draw's long per-id code, which the unrolled vector path would copy
// 8 to 16 times).
__device__ float widen_logit(bf16 x) { return to_f32(x); }
__device__ float widen_logit(float x) { return x; }

// The ids [v0, v1) of a row of T cut for 16-byte loads: [v0, a0) before the row's
// first 16-byte boundary, `vecs` whole 16-byte vectors from a0, [a1, v1) after them.
struct VecSplit {
  int a0, vecs, a1;
};
template <class T>
__device__ VecSplit vec_split(const T* row, int v0, int v1) {
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const uintptr_t addr = reinterpret_cast<uintptr_t>(row + v0);
  const int head = min(v1 - v0, static_cast<int>(((16 - (addr & 15)) & 15) / sizeof(T)));
  const int a0 = v0 + head, vecs = (v1 - a0) / kVec;
  return {a0, vecs, a0 + vecs * kVec};
}

// The two bf16 of a 32-bit word as fp32 (the lower id in the low half).
__device__ __forceinline__ float bf16_lo(uint32_t u) { return bits_f32(u << 16); }
__device__ __forceinline__ float bf16_hi(uint32_t u) { return bits_f32(u & 0xffff0000u); }

template <bool kVector, class T, class F>
__device__ void for_each_logit(const T* row, int v0, int v1, F&& f) {
  if constexpr (!kVector) {
    for (int v = v0 + threadIdx.x; v < v1; v += blockDim.x) f(v, widen_logit(row[v]));
    return;
  }
  constexpr int kVec = 16 / static_cast<int>(sizeof(T));
  const VecSplit sp = vec_split(row, v0, v1);
  const int a0 = sp.a0, vecs = sp.vecs, a1 = sp.a1;
  for (int v = v0 + threadIdx.x; v < a0; v += blockDim.x) f(v, widen_logit(row[v]));
  const uint4* vrow = reinterpret_cast<const uint4*>(row + a0);
#pragma unroll 2
  for (int i = threadIdx.x; i < vecs; i += blockDim.x) {
    const uint4 w = __ldg(vrow + i);
    const int v = a0 + i * kVec;
    if constexpr (sizeof(T) == 2) {
      const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        f(v + 2 * e, bf16_lo(u[e]));
        f(v + 2 * e + 1, bf16_hi(u[e]));
      }
    } else {
      f(v, bits_f32(w.x));
      f(v + 1, bits_f32(w.y));
      f(v + 2, bits_f32(w.z));
      f(v + 3, bits_f32(w.w));
    }
  }
  for (int v = a1 + threadIdx.x; v < v1; v += blockDim.x) f(v, widen_logit(row[v]));
}

// The target's row of (r, j) visited over [v0, v1) (either dtype).
template <bool kVector = true, class F>
__device__ void for_each_target(const ops::VerifyParams& p, int r, int j, int v0, int v1, F&& f) {
  const int64_t base = (static_cast<int64_t>(r) * (p.n + 1) + j) * p.vocab;
  if (p.target_dtype == LogitsDType::f32)
    for_each_logit<kVector>(static_cast<const float*>(p.target_logits) + base, v0, v1, f);
  else
    for_each_logit<kVector>(static_cast<const bf16*>(p.target_logits) + base, v0, v1, f);
}

// The draft's cache row of (slot, j) visited over [v0, v1).
template <bool kVector = true, class F>
__device__ void for_each_draft(const ops::VerifyParams& p, int64_t slot, int j, int v0, int v1,
                               F&& f) {
  for_each_logit<kVector>(p.draft_logits + (slot * p.n + j) * p.vocab, v0, v1, f);
}

// The target's scaled logit with the kept set applied (-inf outside it).
__device__ float target_kept(const Args& a, int r, int j, int v, float T) {
  const float s = verify_scaled(target_logit(a.p, r, j, v), T);
  const uint64_t keep = a.keep[r * (a.p.n + 1) + j];
  return keep != 0 && order_key(s, v) < keep ? neg_inf() : s;
}

// Calls f(scaled) with scaled(x) = verify_scaled(x, T) for T > 0: at T = 1 the value
// itself (x / 1 is x, bit for bit, for every x but a NaN, which never reaches a
// non-degenerate law's pass), so the hot loops are compiled once without the division.
template <class F>
__device__ void with_scaling(float T, F&& f) {
  if (T == 1.0f)
    f([](float x) { return x; });
  else
    f([T](float x) { return verify_scaled(x, T); });
}

__device__ LawStats stats_of(const VerifyLaw& l) {
  LawStats st;
  st.first = l.first;
  return st;
}

// ---- CTA-wide folds (exact: any order gives these bits) ---------------------

__device__ MarkovPacket shfl_xor(MarkovPacket x, int off) {
  x.value = __shfl_xor_sync(0xffffffffu, x.value, off);
  x.id = __shfl_xor_sync(0xffffffffu, x.id, off);
  x.nan = __shfl_xor_sync(0xffffffffu, x.nan, off);
  return x;
}
__device__ uint64_t shfl_xor(uint64_t x, int off) { return __shfl_xor_sync(0xffffffffu, x, off); }
__device__ U128 shfl_xor(U128 x, int off) {
  x.lo = __shfl_xor_sync(0xffffffffu, x.lo, off);
  x.hi = __shfl_xor_sync(0xffffffffu, x.hi, off);
  return x;
}

// Folds every thread's x with op; the result is valid in thread 0.
// Shared arrays of types with member initializers (U128) are declared as raw
// bytes (a __shared__ variable cannot run a constructor).
#define SD_SHARED_ARRAY(T, name, count)                                 \
  __shared__ alignas(16) unsigned char name##_raw[sizeof(T) * (count)]; \
  T* name = reinterpret_cast<T*>(name##_raw)

template <class T, class Op>
__device__ T block_fold(T x, T identity, Op op) {
  SD_SHARED_ARRAY(T, part, kMaxThreads / 32);
  for (int off = 16; off > 0; off >>= 1) x = op(x, shfl_xor(x, off));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  __syncthreads();  // part may still be read by a previous fold
  if (lane == 0) part[warp] = x;
  __syncthreads();
  if (warp == 0) {
    x = lane < warps ? part[lane] : identity;
    for (int off = 16; off > 0; off >>= 1) x = op(x, shfl_xor(x, off));
  }
  return x;
}

__device__ uint64_t key_op(const uint64_t& a, const uint64_t& b) { return max(a, b); }

// The packet of an order key: the id, the NaN flag, the value's bits back (a NaN as
// the quiet NaN and -0 as +0: of a NaN the law reads the id alone, and the sign of
// a zero M changes no E).
__device__ MarkovPacket packet_of_key(uint64_t key) {
  const uint32_t o = static_cast<uint32_t>(key >> 32);
  const int32_t id = static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key));
  if (o == 0xffffffffu) return MarkovPacket{bits_f32(0x7fc00000u), id, 1};
  return MarkovPacket{bits_f32((o & 0x80000000u) ? (o & 0x7fffffffu) : ~o), id, 0};
}

__device__ MarkovPacket packet_op(const MarkovPacket& a, const MarkovPacket& b) {
  return first_of(a, b);
}
__device__ U128 sum_op(const U128& a, const U128& b) { return u128_add(a, b); }

// The fold of n partials in global memory by one warp: lane l folds partials l,
// l + 32, ..., then the xor butterfly; the result in every lane. The partials are
// packets or integer sums, whose folds are exact, so this tree gives the bits of the
// fixed tree of contract.md section 6 (and of any other) in O(n / 32 + 5) steps.
// A partial written by another CTA of the running kernel, read from L2 (ld.global.cg:
// never a line this SM's L1 may hold from before that CTA wrote it).
template <class T>
__device__ T load_cg(const T* src) {
  static_assert(sizeof(T) % 4 == 0);
  T x;
  const unsigned* from = reinterpret_cast<const unsigned*>(src);
  unsigned* to = reinterpret_cast<unsigned*>(&x);
#pragma unroll
  for (int i = 0; i < static_cast<int>(sizeof(T) / 4); ++i) to[i] = __ldcg(from + i);
  return x;
}

template <class T, class Op>
__device__ T warp_fold(const T* src, int n, T identity, Op op) {
  T x = identity;
  // Unrolled so that a lane's loads (one L2 round trip each) are in flight together.
#pragma unroll 8
  for (int i = threadIdx.x % 32; i < n; i += 32) x = op(x, load_cg(src + i));
  for (int off = 16; off > 0; off >>= 1) x = op(x, shfl_xor(x, off));
  return x;
}

// The last-block pattern: every CTA of a group calls this after its thread 0 wrote
// the CTA's partial; true (in every thread) in the one CTA that arrives last of
// `count`, which then folds the group's partials (warp_fold reads them from L2) and
// resets the counter for the next call (a captured graph replays with it at 0).
__device__ bool last_to_arrive(uint32_t* counter, uint32_t count) {
  __shared__ int last;
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();  // this CTA's partial before its arrival
    last = atomicAdd(counter, 1u) + 1 == count;
    if (last) *counter = 0;  // every arrival is in: nobody else touches it this call
  }
  __syncthreads();
  if (last) __threadfence();  // the others' partials before the fold
  return last != 0;
}

__device__ bool padding(const ops::VerifyParams& p, int r) { return p.cache_slots[r] < 0; }
__device__ bool greedy(const ops::VerifyParams& p, int r) { return !(p.temperatures[r] > 0.0f); }

// ---- stage (b) for the packets; the kept set of top-k / top-p -----------------

struct Radix {
  uint32_t count[kRadixBuckets];
  U128 sum[kRadixBuckets];
  int sel;
  uint32_t k_left;
  U128 above;
};

__device__ void atomic_add_u128(U128* a, U128 x) {
  auto* lo = reinterpret_cast<unsigned long long*>(&a->lo);
  auto* hi = reinterpret_cast<unsigned long long*>(&a->hi);
  const unsigned long long old = atomicAdd(lo, static_cast<unsigned long long>(x.lo));
  const unsigned long long carry = old + x.lo < old ? 1ull : 0ull;
  if (x.hi + carry) atomicAdd(hi, static_cast<unsigned long long>(x.hi + carry));
}

// The kept set of section 8.3 as the smallest kept key (every id with a key at or
// above it is kept): the radix descent of cuda/verify/select.h, each level's
// histogram built by the whole CTA, its bucket step on thread 0. One CTA.
__device__ uint64_t kept_threshold(const Args& a, int r, int j, float T, float M, int32_t top_k,
                                   float top_p, Radix& rx) {
  const ops::VerifyParams& p = a.p;
  const int V = p.vocab;
  const bool use_k = top_k > 0 && top_k < V, use_p = top_p < 1.0f;
  auto key_of = [&](int v) { return order_key(verify_scaled(target_logit(p, r, j, v), T), v); };
  uint64_t thr_k = 0;
  if (use_k) {
    uint64_t prefix = 0, mask = 0;
    if (threadIdx.x == 0) rx.k_left = static_cast<uint32_t>(top_k);
    for (int shift = 56; shift >= 0; shift -= 8) {
      for (int b = threadIdx.x; b < kRadixBuckets; b += blockDim.x) rx.count[b] = 0;
      __syncthreads();
      for (int v = threadIdx.x; v < V; v += blockDim.x) {
        const uint64_t key = key_of(v);
        if ((key & mask) == prefix) atomicAdd(&rx.count[digit(key, shift)], 1u);
      }
      __syncthreads();
      if (threadIdx.x == 0) rx.sel = verify_select::top_k_bucket(rx.count, rx.k_left);
      __syncthreads();
      prefix |= static_cast<uint64_t>(rx.sel) << shift;
      mask |= uint64_t{0xff} << shift;
      __syncthreads();
    }
    thr_k = prefix;  // the k-th key: the top-k set is every key >= it
  }
  if (!use_p) return thr_k;
  U128 total;
  for (int v = threadIdx.x; v < V; v += blockDim.x) {
    const float s = verify_scaled(target_logit(p, r, j, v), T);
    if (order_key(s, v) >= thr_k) total = u128_add(total, sum_term(s, M));
  }
  total = block_fold(total, U128{}, sum_op);
  SD_SHARED_ARRAY(U128, total_all, 1);
  if (threadIdx.x == 0) {
    *total_all = total;
    rx.above = U128{};
  }
  __syncthreads();
  total = *total_all;
  uint64_t prefix = 0, mask = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int b = threadIdx.x; b < kRadixBuckets; b += blockDim.x) {
      rx.count[b] = 0;
      rx.sum[b] = U128{};
    }
    __syncthreads();
    for (int v = threadIdx.x; v < V; v += blockDim.x) {
      const float s = verify_scaled(target_logit(p, r, j, v), T);
      const uint64_t key = order_key(s, v);
      if (key >= thr_k && (key & mask) == prefix) {
        const int b = digit(key, shift);
        atomicAdd(&rx.count[b], 1u);
        atomic_add_u128(&rx.sum[b], sum_term(s, M));
      }
    }
    __syncthreads();
    if (threadIdx.x == 0)
      rx.sel = verify_select::top_p_bucket(rx.count, rx.sum, rx.above, top_p, total);
    __syncthreads();
    prefix |= static_cast<uint64_t>(rx.sel) << shift;
    mask |= uint64_t{0xff} << shift;
    __syncthreads();
  }
  return prefix;
}

// The law's first packet from the raw one (first_kernel): M = fdiv(raw M, T); a NaN
// keeps its id; when every scaled value is -inf the first id is 0; when M is +inf
// the first id is the lowest with a scaled +inf, found by the CTA's scan of the
// scaled row (the only case where a raw tie-break can differ from the scaled one
// and the law reads it). Uniform over the CTA (raw in shared memory).
__device__ MarkovPacket law_first(const Args& a, int r, int j, int side, float T,
                                  const MarkovPacket& raw) {
  if (!(T > 0.0f) || raw.nan) return raw;
  MarkovPacket f{fdiv_rn(raw.value, T), raw.id, 0};
  if (f.value == neg_inf()) f.id = 0;
  if (f.value != bits_f32(0x7f800000u)) return f;
  const ops::VerifyParams& p = a.p;
  MarkovPacket scan = no_packet();
  auto fold = [&](int v, float x) { fold_first(scan, verify_scaled(x, T), v); };
  if (side == 0)
    for_each_target<false>(p, r, j, 0, p.vocab, fold);
  else
    for_each_draft<false>(p, p.cache_slots[r], j, 0, p.vocab, fold);
  return block_fold(scan, no_packet(), packet_op);  // thread 0's is the law's
}

// ---- stage (a), pass 3: the draw packet at position k ----------------------------

// The target's draw at position j of row r over [v0, v1): the race over
// E = exp_law(s - M) on the kept set (keys at or above `keep`; 0: every id) of a
// non-degenerate law of maximum M (ids of E = 0 cannot win and are skipped).
__device__ MarkovPacket target_race(const Args& a, int r, int j, int v0, int v1, uint32_t gd,
                                    float T, float M, uint64_t keep) {
  MarkovPacket win = no_packet();
  with_scaling(T, [&](auto scaled) {
    for_each_target<false>(a.p, r, j, v0, v1, [&](int v, float x) {
      const float s = scaled(x);
      const float E = law_exp(keep != 0 && order_key(s, v) < keep ? neg_inf() : s, M);
      if (E > 0.0f) race_fold(win, E, gd, v);
    });
  });
  return win;
}

// ---- stage (b) for the draw packets; the outputs ----------------------------------

// Stage (b) for the draw packets of one row and its outputs, by the CTA that arrives
// last after the draw (draw_kernel's, or the resident kernel's), given what the
// decision left: k accepted, the target law's first packet at position k and its
// kept-set key (keep), and for a greedy row the pick to emit. The draw packets (a.draw_S
// of them) come from the other CTAs, read from L2.
__device__ void finish_row(const Args& a, int r, int k, const MarkovPacket& target_first,
                           uint64_t keep, int64_t greedy_pick) {
  const ops::VerifyParams& p = a.p;
  const int N = p.n, n = p.row_length(r);
  __shared__ MarkovPacket win;
  __shared__ int64_t emitted;
  const bool g = greedy(p, r);
  LawStats tst;
  tst.first = target_first;
  if (threadIdx.x < 32) {
    if (g) {
      if (threadIdx.x == 0) emitted = greedy_pick;
    } else {
      const MarkovPacket f = warp_fold(a.draws + r * a.draw_S, a.draw_S, no_packet(), packet_op);
      if (threadIdx.x == 0) {
        win = f;
        // The bonus from a degenerate law is its point.
        emitted = k == n && tst.degenerate() ? target_first.id : f.id;
      }
    }
  }
  __syncthreads();
  // k < N and no residual mass (no positive score): the target's own draw at k, by the
  // CTA over the whole vocabulary (rare: p <= q at every id).
  if (!g && k < n && !(win.value > 0.0f)) {
    if (tst.degenerate()) {
      if (threadIdx.x == 0) emitted = target_first.id;
    } else {
      const uint32_t gd = verify_step_seed(p.seeds[r], p.anchor_positions[r] + k, p.draw_salt);
      const MarkovPacket t = block_fold(
          target_race(a, r, k, 0, p.vocab, gd, p.temperatures[r], target_first.value, keep),
          no_packet(), packet_op);
      if (threadIdx.x == 0) emitted = t.id;
    }
  }
  if (threadIdx.x != 0) return;
  p.num_accepted[r] = k;
  const int64_t* x = p.draft_tokens + static_cast<int64_t>(r) * N;
  int64_t* out = p.tokens + static_cast<int64_t>(r) * (N + 1);
  for (int i = 0; i <= N; ++i) out[i] = i < k ? x[i] : (i == k ? emitted : -1);
}

}  // namespace
}  // namespace sparkdraft::cuda
