// The verifier's kernels (cuda/verify/verify.h): ops/verify.h in its three
// stages, every element operation from core/verify_math.h (the CPU reference's
// own functions), every combine exact (packets by the order, 128-bit integer sums)
// and, across slices, in the fixed tree of contract.md section 6.
#include "cuda/verify/verify.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <string>

#include "cuda/common/launch.h"
#include "cuda/verify/select.h"
#include "sparkdraft/cuda/check.h"

namespace sparkdraft::cuda {
namespace {

using verify_select::digit;
using verify_select::order_key;
using verify_select::sum_term;

constexpr int kMaxThreads = 512;
constexpr int kRowThreads = 256;  // decide / block decide / finish: one CTA per row
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
};

__device__ float target_logit(const ops::VerifyParams& p, int r, int j, int v) {
  const int64_t i = (static_cast<int64_t>(r) * (p.n + 1) + j) * p.vocab + v;
  return p.target_dtype == LogitsDType::f32 ? static_cast<const float*>(p.target_logits)[i]
                                            : to_f32(static_cast<const bf16*>(p.target_logits)[i]);
}

__device__ float draft_logit(const ops::VerifyParams& p, int64_t slot, int j, int v) {
  return to_f32(p.draft_logits[(slot * p.n + j) * p.vocab + v]);
}

// The target's scaled logit with the kept set applied (-inf outside it).
__device__ float target_kept(const Args& a, int r, int j, int v, float T) {
  const float s = verify_scaled(target_logit(a.p, r, j, v), T);
  const uint64_t keep = a.keep[r * (a.p.n + 1) + j];
  return keep != 0 && order_key(s, v) < keep ? neg_inf() : s;
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

__device__ MarkovPacket packet_op(const MarkovPacket& a, const MarkovPacket& b) {
  return first_of(a, b);
}
__device__ U128 sum_op(const U128& a, const U128& b) { return u128_add(a, b); }

// The fixed tree of contract.md section 6 over buf[0..n) (adjacent pairs, level by
// level, an odd last one rising unchanged), on one thread; buf is overwritten.
template <class T, class Op>
__device__ T fixed_tree(T* buf, int n, Op op) {
  for (int width = n; width > 1; width = (width + 1) / 2) {
    for (int i = 0; 2 * i + 1 < width; ++i) buf[i] = op(buf[2 * i], buf[2 * i + 1]);
    if (width % 2 == 1) buf[width / 2] = buf[width - 1];
  }
  return buf[0];
}

// The fixed tree over n <= kVerifyMaxSlices partials in global memory, by one warp
// (its lanes load, lane 0 folds in `scratch`); the result in lane 0.
template <class T, class Op>
__device__ T warp_tree(const T* src, int n, T* scratch, Op op) {
  const int lane = threadIdx.x % 32;
  for (int i = lane; i < n; i += 32) scratch[i] = src[i];
  __syncwarp();
  T r{};
  if (lane == 0) r = fixed_tree(scratch, n, op);
  __syncwarp();
  return r;
}

__device__ bool padding(const ops::VerifyParams& p, int r) { return p.cache_slots[r] < 0; }
__device__ bool greedy(const ops::VerifyParams& p, int r) { return !(p.temperatures[r] > 0.0f); }

// ---- stage (a), pass 1: first-id packets --------------------------------------

__global__ void first_kernel(const Args a) {
  const ops::VerifyParams& p = a.p;
  const int item = blockIdx.x, s = blockIdx.y, r = item / (p.n + 1), j = item % (p.n + 1);
  if (padding(p, r)) return;
  const float T = p.temperatures[r];
  const bool with_draft = j < p.n && T > 0.0f;
  const int64_t slot = p.cache_slots[r];
  const int v0 = s * a.slice, v1 = min(p.vocab, v0 + a.slice);
  MarkovPacket t = no_packet(), d = no_packet();
  for (int v = v0 + threadIdx.x; v < v1; v += blockDim.x) {
    fold_first(t, verify_scaled(target_logit(p, r, j, v), T), v);
    if (with_draft) fold_first(d, verify_scaled(draft_logit(p, slot, j, v), T), v);
  }
  t = block_fold(t, no_packet(), packet_op);
  if (with_draft) d = block_fold(d, no_packet(), packet_op);
  if (threadIdx.x == 0) {
    a.packets[(item * 2 + 0) * a.S + s] = t;
    if (with_draft) a.packets[(item * 2 + 1) * a.S + s] = d;
  }
}

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

__global__ void head_kernel(const Args a) {
  const ops::VerifyParams& p = a.p;
  const int item = blockIdx.x, r = item / (p.n + 1), j = item % (p.n + 1);
  if (padding(p, r)) return;
  const float T = p.temperatures[r];
  __shared__ MarkovPacket scratch[2][kVerifyMaxSlices];
  __shared__ MarkovPacket first[2];
  const int warp = threadIdx.x / 32;
  const int sides = j < p.n && T > 0.0f ? 2 : 1;
  if (warp < sides) {
    const MarkovPacket f =
        warp_tree(a.packets + (item * 2 + warp) * a.S, a.S, scratch[warp], packet_op);
    if (threadIdx.x % 32 == 0) first[warp] = f;
  }
  __syncthreads();
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

// ---- stage (a), pass 2: the exact sums Zi ---------------------------------------

constexpr int kExpTable = 2048;  // entries of each side's table in the sums kernel

// E = law_exp(f32(x) / T, M) of a bf16 logit x, memoised in a shared table keyed by
// x's bits: for the CTA's one (T, M) it is a function of the bits alone, so a hit
// gives the evaluation's own bits. An entry packs (bits << 32) | E in one 64-bit
// word read and written whole (volatile: one relaxed access, never torn); a clash
// just evaluates again. Empty entries are all ones (no bf16 key).
__device__ float table_exp(volatile unsigned long long* table, uint16_t bits, float T, float M) {
  const int at = (bits ^ (bits >> 11)) & (kExpTable - 1);
  const unsigned long long e = table[at];
  if (static_cast<uint32_t>(e >> 32) == bits) return bits_f32(static_cast<uint32_t>(e));
  const float E = law_exp(verify_scaled(to_f32(bf16{bits}), T), M);
  table[at] = (static_cast<unsigned long long>(bits) << 32) | f32_bits(E);
  return E;
}

// One id's term of the target's Zi: law_term of its kept scaled logit (0 outside the
// kept set; sum_term skips what cannot reach 2^-64; with a table, a bf16 logit's E
// from it: the same bits either way).
__device__ U128 target_term(const Args& a, int r, int j, int v, float T, float M,
                            volatile unsigned long long* table) {
  if (!table || a.p.target_dtype != LogitsDType::bf16)
    return sum_term(target_kept(a, r, j, v, T), M);
  const int64_t i = (static_cast<int64_t>(r) * (a.p.n + 1) + j) * a.p.vocab + v;
  const bf16 x = static_cast<const bf16*>(a.p.target_logits)[i];
  const uint64_t keep = a.keep[r * (a.p.n + 1) + j];
  if (keep != 0 && order_key(verify_scaled(to_f32(x), T), v) < keep) return U128{};
  return fixed64_of_unit(table_exp(table, x.bits, T, M));
}

template <bool kTable>
__global__ void sums_kernel(const Args a) {
  const ops::VerifyParams& p = a.p;
  const int item = blockIdx.x, s = blockIdx.y, r = item / (p.n + 1), j = item % (p.n + 1);
  if (padding(p, r) || greedy(p, r)) return;
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
  const int v0 = s * a.slice, v1 = min(p.vocab, v0 + a.slice);
  volatile unsigned long long* target_table = nullptr;
  volatile unsigned long long* draft_table = nullptr;
  if constexpr (kTable) {
    __shared__ unsigned long long tables[2 * kExpTable];
    for (int i = threadIdx.x; i < 2 * kExpTable; i += blockDim.x) tables[i] = ~0ull;
    __syncthreads();
    target_table = tables;
    draft_table = tables + kExpTable;
  }
  U128 t, d;
  for (int v = v0 + threadIdx.x; v < v1; v += blockDim.x) {
    if (with_target) t = u128_add(t, target_term(a, r, j, v, T, mt, target_table));
    if (with_draft) {
      if constexpr (kTable) {
        const bf16 x = p.draft_logits[(slot * p.n + j) * p.vocab + v];
        d = u128_add(d, fixed64_of_unit(table_exp(draft_table, x.bits, T, md)));
      } else {
        d = u128_add(d, sum_term(verify_scaled(draft_logit(p, slot, j, v), T), md));
      }
    }
  }
  if (with_target) t = block_fold(t, U128{}, sum_op);
  if (with_draft) d = block_fold(d, U128{}, sum_op);
  if (threadIdx.x == 0) {
    if (with_target) a.sums[(item * 2 + 0) * a.S + s] = t;
    if (with_draft) a.sums[(item * 2 + 1) * a.S + s] = d;
  }
}

// ---- stage (b) for the sums, and (c): the decision ---------------------------------

__global__ void decide_kernel(const Args a) {
  const ops::VerifyParams& p = a.p;
  const int r = blockIdx.x, N = p.n;
  if (padding(p, r)) return;
  const int64_t* x = p.draft_tokens + static_cast<int64_t>(r) * N;
  if (greedy(p, r)) {
    // Section 8.5, T = 0: the first id of f32(t_j) at each position.
    if (threadIdx.x == 0) {
      int k = 0;
      int64_t pick = a.laws[0 + r * (N + 1) * 2].first.id;
      while (k < N && x[k] == pick) {
        ++k;
        pick = a.laws[(r * (N + 1) + k) * 2].first.id;
      }
      a.accepted[r] = k;
      a.emitted[r] = pick;
    }
    return;
  }
  // Z of every (position, side): one warp per law, the slices in the fixed tree.
  SD_SHARED_ARRAY(U128, scratch, kRowThreads / 32 * kVerifyMaxSlices);
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int l = warp; l < 2 * N + 1; l += warps) {
    const int j = l / 2, side = l % 2;
    const int item = r * (N + 1) + j;
    VerifyLaw* law = a.laws + item * 2 + side;
    if (stats_of(*law).degenerate()) continue;  // uniform across the warp
    const U128 sum =
        warp_tree(a.sums + (item * 2 + side) * a.S, a.S, scratch + warp * kVerifyMaxSlices, sum_op);
    if (threadIdx.x % 32 == 0) law->z = f32_of_fixed64(sum);
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  const float T = p.temperatures[r];
  const int64_t seed = p.seeds[r], anchor = p.anchor_positions[r], slot = p.cache_slots[r];
  auto P = [&](int j) {
    const VerifyLaw& l = a.laws[(r * (N + 1) + j) * 2];
    return law_prob(stats_of(l), l.z, target_kept(a, r, j, static_cast<int>(x[j]), T), x[j]);
  };
  auto Q = [&](int j) {
    const VerifyLaw& l = a.laws[(r * (N + 1) + j) * 2 + 1];
    return law_prob(stats_of(l), l.z,
                    verify_scaled(draft_logit(p, slot, j, static_cast<int>(x[j])), T), x[j]);
  };
  if (p.method == VerifyMethod::standard) {
    int k = 0;
    for (; k < N; ++k) {
      const float u = accept_uniform(seed, anchor + k, p.accept_salt, x[k]);
      if (!accept_standard(u, Q(k), P(k))) break;
    }
    a.accepted[r] = k;
    a.chosen_weight[r] = 1.0f;
  } else {
    float* w = a.weights + r * (N + 1);
    w[0] = 1.0f;
    for (int i = 1; i <= N; ++i) w[i] = block_weight_next(w[i - 1], P(i - 1), Q(i - 1));
  }
}

// Block verification: the residual mass R_i of positions i = 1 .. N-1, per slice.
__global__ void mass_kernel(const Args a) {
  const ops::VerifyParams& p = a.p;
  const int N = p.n, r = blockIdx.x / (N - 1), i = blockIdx.x % (N - 1) + 1, s = blockIdx.y;
  if (padding(p, r) || greedy(p, r)) return;
  const float T = p.temperatures[r];
  const int64_t slot = p.cache_slots[r];
  const int item = r * (N + 1) + i;
  const VerifyLaw lt = a.laws[item * 2], ld = a.laws[item * 2 + 1];
  const float w = a.weights[item];
  const int v0 = s * a.slice, v1 = min(p.vocab, v0 + a.slice);
  U128 m;
  for (int v = v0 + threadIdx.x; v < v1; v += blockDim.x) {
    const float pv = law_prob(stats_of(lt), lt.z, target_kept(a, r, i, v, T), v);
    const float qv = law_prob(stats_of(ld), ld.z, verify_scaled(draft_logit(p, slot, i, v), T), v);
    m = u128_add(m, fixed64_of_unit(block_mass(w, pv, qv)));
  }
  m = block_fold(m, U128{}, sum_op);
  if (threadIdx.x == 0) a.mass[(r * N + i) * a.S + s] = m;
}

// Block verification: h_i and k (the largest i with u_{i-1} < h_i).
__global__ void block_decide_kernel(const Args a) {
  const ops::VerifyParams& p = a.p;
  const int r = blockIdx.x, N = p.n;
  if (padding(p, r) || greedy(p, r)) return;
  SD_SHARED_ARRAY(U128, scratch, kRowThreads / 32 * kVerifyMaxSlices);
  __shared__ float h[64 + 1];
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  const float* w = a.weights + r * (N + 1);
  for (int i = 1 + warp; i < N; i += warps) {
    const U128 m =
        warp_tree(a.mass + (r * N + i) * a.S, a.S, scratch + warp * kVerifyMaxSlices, sum_op);
    if (threadIdx.x % 32 == 0) h[i] = block_h(f32_of_fixed64(m), w[i]);
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  h[N] = w[N];
  const int64_t seed = p.seeds[r], anchor = p.anchor_positions[r];
  const int64_t* x = p.draft_tokens + static_cast<int64_t>(r) * N;
  int k = 0;
  for (int i = 1; i <= N; ++i)
    if (accept_uniform(seed, anchor + i - 1, p.accept_salt, x[i - 1]) < h[i]) k = i;
  a.accepted[r] = k;
  a.chosen_weight[r] = w[k];
}

// ---- stage (a), pass 3: the draw packets at position k --------------------------

__global__ void draw_kernel(const Args a) {
  const ops::VerifyParams& p = a.p;
  const int r = blockIdx.x, s = blockIdx.y, N = p.n;
  if (padding(p, r) || greedy(p, r)) return;
  const float T = p.temperatures[r];
  const int64_t slot = p.cache_slots[r];
  const int k = a.accepted[r];
  const int item = r * (N + 1) + k;
  const uint32_t gd = verify_step_seed(p.seeds[r], p.anchor_positions[r] + k, p.draw_salt);
  const VerifyLaw lt = a.laws[item * 2];
  const int v0 = s * a.slice, v1 = min(p.vocab, v0 + a.slice);
  MarkovPacket res = no_packet(), tgt = no_packet();
  if (k < N) {
    const VerifyLaw ld = a.laws[item * 2 + 1];
    const float w = a.chosen_weight[r];
    const bool standard = p.method == VerifyMethod::standard;
    for (int v = v0 + threadIdx.x; v < v1; v += blockDim.x) {
      const float g = draft_noise(gd, v);
      const float st = target_kept(a, r, k, v, T);
      const float pv = law_prob(stats_of(lt), lt.z, st, v);
      const float qv =
          law_prob(stats_of(ld), ld.z, verify_scaled(draft_logit(p, slot, k, v), T), v);
      fold_first(res,
                 standard ? residual_score(pv, qv, g) : fadd_rn(log_f32(block_mass(w, pv, qv)), g),
                 v);
      fold_first(tgt, target_draw_score(st, g), v);
    }
    res = block_fold(res, no_packet(), packet_op);
  } else {
    for (int v = v0 + threadIdx.x; v < v1; v += blockDim.x)
      fold_first(tgt, target_draw_score(target_kept(a, r, k, v, T), draft_noise(gd, v)), v);
  }
  tgt = block_fold(tgt, no_packet(), packet_op);
  if (threadIdx.x == 0) {
    a.draws[(r * 2 + 0) * a.S + s] = res;
    a.draws[(r * 2 + 1) * a.S + s] = tgt;
  }
}

// ---- stage (b) for the draw packets; the outputs ----------------------------------

__global__ void finish_kernel(const Args a) {
  const ops::VerifyParams& p = a.p;
  const int r = blockIdx.x, N = p.n;
  if (padding(p, r)) return;
  __shared__ MarkovPacket scratch[2][kVerifyMaxSlices];
  __shared__ MarkovPacket win[2];
  const int warp = threadIdx.x / 32;
  const bool g = greedy(p, r);
  if (!g && warp < 2) {
    const MarkovPacket f = warp_tree(a.draws + (r * 2 + warp) * a.S, a.S, scratch[warp], packet_op);
    if (threadIdx.x % 32 == 0) win[warp] = f;
  }
  __syncthreads();
  if (threadIdx.x != 0) return;
  const int k = a.accepted[r];
  int64_t emitted;
  if (g) {
    emitted = a.emitted[r];
  } else if (k == N) {
    emitted = win[1].id;  // the bonus: the target draw at position N
  } else {
    const bool none = !win[0].nan && win[0].value == neg_inf();  // no residual mass
    emitted = none ? win[1].id : win[0].id;
  }
  p.num_accepted[r] = k;
  const int64_t* x = p.draft_tokens + static_cast<int64_t>(r) * N;
  int64_t* out = p.tokens + static_cast<int64_t>(r) * (N + 1);
  for (int i = 0; i <= N; ++i) out[i] = i < k ? x[i] : (i == k ? emitted : -1);
}

}  // namespace

VerifyWorkspace::VerifyWorkspace(int max_rows, int n, int vocab, int max_slices)
    : max_rows_(max_rows), n_(n), vocab_(vocab), max_slices_(max_slices) {
  require(max_rows >= 1 && n >= 1 && n <= 64 && vocab >= 1, "VerifyWorkspace",
          "needs max_rows >= 1, N in [1, 64] and V >= 1; got " + std::to_string(max_rows) + ", " +
              std::to_string(n) + ", " + std::to_string(vocab));
  require(max_slices >= 1 && max_slices <= kVerifyMaxSlices, "VerifyWorkspace",
          "max_slices must be in [1, " + std::to_string(kVerifyMaxSlices) + "]");
  const size_t R = max_rows, N = n, S = max_slices;
  packets = DeviceBuffer<MarkovPacket>(R * (N + 1) * 2 * S);
  sums = DeviceBuffer<U128>(R * (N + 1) * 2 * S);
  mass = DeviceBuffer<U128>(R * N * S);
  draws = DeviceBuffer<MarkovPacket>(R * 2 * S);
  laws = DeviceBuffer<VerifyLaw>(R * (N + 1) * 2);
  keep = DeviceBuffer<uint64_t>(R * (N + 1));
  weights = DeviceBuffer<float>(R * (N + 1));
  chosen_weight = DeviceBuffer<float>(R);
  accepted = DeviceBuffer<int32_t>(R);
  emitted = DeviceBuffer<int64_t>(R);
  int device = 0;
  SD_CUDA_CHECK(cudaGetDevice(&device));
  SD_CUDA_CHECK(cudaDeviceGetAttribute(&sm_count_, cudaDevAttrMultiProcessorCount, device));
}

VerifyShape VerifyWorkspace::pick(int rows) const {
  // About 4 CTAs per SM over rows x (N + 1) items; slices of at least 1024 ids,
  // a multiple of 256.
  const int64_t items = static_cast<int64_t>(std::max(rows, 1)) * (n_ + 1);
  const int64_t want =
      std::max<int64_t>(1, (4 * static_cast<int64_t>(sm_count_) + items - 1) / items);
  const int64_t by_width = std::max<int64_t>(1, vocab_ / 1024);
  const int64_t S = std::min<int64_t>({want, by_width, max_slices_});
  int64_t slice = (vocab_ + S - 1) / S;
  slice = (slice + 255) / 256 * 256;
  VerifyShape shape;
  shape.threads = 256;
  shape.exp_table = true;
  shape.slice = static_cast<int>(std::min<int64_t>(slice, vocab_));
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
  const VerifyShape shape = shape_in ? *shape_in : ws.pick(p.rows);
  require(std::find(std::begin(kVerifyThreadChoices), std::end(kVerifyThreadChoices),
                    shape.threads) != std::end(kVerifyThreadChoices),
          "verify", "threads " + std::to_string(shape.threads) + " is not 64, 128, 256 or 512");
  require(shape.slice >= 1, "verify", "slice must be >= 1");
  const int64_t S = (static_cast<int64_t>(p.vocab) + shape.slice - 1) / shape.slice;
  require(S <= ws.max_slices(), "verify",
          "slice " + std::to_string(shape.slice) + " makes " + std::to_string(S) +
              " slices, more than the workspace's " + std::to_string(ws.max_slices()));
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
         shape.slice};
  const unsigned items = static_cast<unsigned>(p.rows) * (p.n + 1);
  const unsigned rows = static_cast<unsigned>(p.rows);
  const dim3 block(static_cast<unsigned>(shape.threads));
  const unsigned s = static_cast<unsigned>(S);
  launch_kernel("verify_first", first_kernel, LaunchShape{dim3(items, s), block, 0, stream}, a);
  launch_kernel("verify_head", head_kernel, LaunchShape{dim3(items), block, 0, stream}, a);
  launch_kernel("verify_sums", shape.exp_table ? sums_kernel<true> : sums_kernel<false>,
                LaunchShape{dim3(items, s), block, 0, stream}, a);
  launch_kernel("verify_decide", decide_kernel,
                LaunchShape{dim3(rows), dim3(kRowThreads), 0, stream}, a);
  if (p.method == VerifyMethod::block) {
    if (p.n >= 2)
      launch_kernel("verify_mass", mass_kernel,
                    LaunchShape{dim3(rows * (p.n - 1), s), block, 0, stream}, a);
    launch_kernel("verify_block_decide", block_decide_kernel,
                  LaunchShape{dim3(rows), dim3(kRowThreads), 0, stream}, a);
  }
  launch_kernel("verify_draw", draw_kernel, LaunchShape{dim3(rows, s), block, 0, stream}, a);
  launch_kernel("verify_finish", finish_kernel,
                LaunchShape{dim3(rows), dim3(kRowThreads), 0, stream}, a);
}

}  // namespace sparkdraft::cuda
