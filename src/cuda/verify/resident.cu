// The verifier's resident form (cuda/verify/verify.h): contract.md section 8 in one
// cooperative kernel that reads the target logits and the draft-logits cache once.
//
// Grid: resident_rows x G CTAs (G = ceil(V / slice)), all resident at once (a
// cooperative launch refuses a grid that is not). CTA (q, g) owns the ids
// [g * slice, (g + 1) * slice) of the rows q, q + resident_rows, ... and per row runs:
//   copy     its slice of the row's 2N + 1 logit rows (N + 1 target, N cache; a greedy
//            row only the target's) into shared memory by 16-byte cp.async, each row
//            at the phase that keeps the global row's 16-byte pieces whole (the
//            unaligned ends one element a thread);
//   first    one warp per law: the slice's first-id packet of the raw logits (select.h
//            FirstKey, each lane's ids in increasing order), to the workspace; then the
//            row's G CTAs meet (group_barrier: an arrival counter per row, one thread
//            of each CTA spinning on it with acquire loads). A greedy row instead
//            arrives once (last_to_arrive): the last CTA folds the packets, decides
//            and finishes;
//   laws     every CTA folds each law's G packets itself (warp_fold, from L2) and
//            takes the law's first packet (law_first: M = fdiv(raw M, T), its rare
//            scans); a row with top-k / top-p has CTA g find the kept-set threshold of
//            the positions j = g, g + G, ... (kept_threshold), then one more meeting;
//   sums     one warp per law: the slice's exact sum of terms from shared memory
//            (TermSum, the staged sums pass's arithmetic), to the workspace; meet;
//   decide   every CTA folds each law's G sums (Z), computes p_j(x_j), q_j(x_j), u_j
//            and runs the sequential decision itself (the same bits in every CTA, so no
//            CTA waits for another's result); block verification adds its masses R_i
//            (one warp per position, from shared memory), one more meeting, and h_i;
//   draw     the CTA's slice of the race at position k from shared memory (each
//            thread's ids in increasing order, select.h race_fold), to the workspace;
//            the CTA that arrives last folds the G draw packets and writes the row
//            (finish_row), and resets the counter for the next call.
// Data another CTA wrote in this kernel is read only through L2 (warp_fold's ld.cg);
// what a CTA needs of the decision it holds in its own shared memory. Every fold is
// one of the staged kernels' exact folds, so the slice width, G, resident_rows and the
// block size never change a bit.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/common/launch.h"
#include "cuda/common/ptx.cuh"
#include "cuda/verify/device.cuh"
#include "cuda/verify/select.h"
#include "cuda/verify/verify.h"
#include "sparkdraft/cuda/check.h"

namespace sparkdraft::cuda {
namespace {

using verify_select::FirstKey;
using verify_select::law_term_of_diff;
using verify_select::order_key;
using verify_select::race_fold;
using verify_select::TermSum;

constexpr int kMaxN = 64;                  // VerifyWorkspace's bound on N
constexpr int kMaxLaws = 2 * (kMaxN + 1);  // law j * 2 + side

// Bytes of shared memory for `slice` elements of `elem` bytes at any phase, a multiple
// of 16.
__host__ __device__ inline size_t row_bytes(int slice, int elem) {
  return (static_cast<size_t>(slice) * elem + 16 + 15) / 16 * 16;
}

// One logit row's slice: global address of its first id, shared address of the same id
// (congruent to it mod 16), element size, ids.
struct SliceRow {
  const unsigned char* src;
  unsigned char* dst;
  int elem;  // 2 (bf16) or 4 (fp32)
  int n;     // ids of the slice
};

// Row l of row r's 2N + 1 (l <= N: the target's position l; else the cache's position
// l - N - 1), ids [v0, v0 + n), in the CTA's shared memory `smem` (target rows of rbt
// bytes first, then cache rows of rbd bytes).
__device__ SliceRow slice_row(const ops::VerifyParams& p, int r, int l, int v0, int n,
                              unsigned char* smem, size_t rbt, size_t rbd) {
  const int N = p.n;
  SliceRow s;
  s.n = n;
  unsigned char* base;
  if (l <= N) {
    s.elem = p.target_dtype == LogitsDType::f32 ? 4 : 2;
    const int64_t at = (static_cast<int64_t>(r) * (N + 1) + l) * p.vocab + v0;
    s.src = static_cast<const unsigned char*>(p.target_logits) + at * s.elem;
    base = smem + static_cast<size_t>(l) * rbt;
  } else {
    s.elem = 2;
    const int64_t at = (p.cache_slots[r] * N + (l - N - 1)) * p.vocab + v0;
    s.src = reinterpret_cast<const unsigned char*>(p.draft_logits + at);
    base = smem + static_cast<size_t>(N + 1) * rbt + static_cast<size_t>(l - N - 1) * rbd;
  }
  s.dst = base + (reinterpret_cast<uintptr_t>(s.src) & 15);
  return s;
}

// The slice's elements before its first 16-byte boundary, and its whole 16-byte pieces.
__device__ int head_elems(const SliceRow& s) {
  const int to_boundary = static_cast<int>((16 - (reinterpret_cast<uintptr_t>(s.src) & 15)) & 15);
  return min(s.n, to_boundary / s.elem);
}

// Global -> shared by the CTA: the whole pieces by cp.async (16 bytes), the ends one
// element a thread. The caller commits and waits.
__device__ void copy_slice(const SliceRow& s) {
  const int head = head_elems(s);
  const int per = 16 / s.elem;
  const int pieces = (s.n - head) / per;
  const int tail = head + pieces * per;
  for (int i = threadIdx.x; i < head; i += blockDim.x)
    for (int b = 0; b < s.elem; ++b) s.dst[i * s.elem + b] = s.src[i * s.elem + b];
  for (int q = threadIdx.x; q < pieces; q += blockDim.x) {
    const size_t off = static_cast<size_t>(head + q * per) * s.elem;
    cp_async_16(s.dst + off, s.src + off, 16);
  }
  for (int i = tail + threadIdx.x; i < s.n; i += blockDim.x)
    for (int b = 0; b < s.elem; ++b) s.dst[i * s.elem + b] = s.src[i * s.elem + b];
}

__device__ __forceinline__ float elem_f32(const unsigned char* at, int elem) {
  return elem == 4 ? *reinterpret_cast<const float*>(at)
                   : bits_f32(static_cast<uint32_t>(*reinterpret_cast<const uint16_t*>(at)) << 16);
}

// Calls f(v, f32(logit v)) for the slice's ids that lane `lane` of `lanes` owns, in
// increasing order: the head one by one, the whole pieces 16 bytes a load (lane-strided),
// the tail one by one. kVec: the pieces' elements (8 bf16 or 4 fp32).
template <int kElem, class F>
__device__ void lane_visit(const SliceRow& s, int v0, int lane, int lanes, F&& f) {
  constexpr int kVec = 16 / kElem;
  const int head = head_elems(s);
  const int pieces = (s.n - head) / kVec;
  const int tail = head + pieces * kVec;
  for (int i = lane; i < head; i += lanes) f(v0 + i, elem_f32(s.dst + i * kElem, kElem));
  const uint4* vp = reinterpret_cast<const uint4*>(s.dst + head * kElem);
  for (int q = lane; q < pieces; q += lanes) {
    const uint4 w = vp[q];
    const int v = v0 + head + q * kVec;
    if constexpr (kElem == 2) {
      const uint32_t u[4] = {w.x, w.y, w.z, w.w};
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        f(v + 2 * e, bits_f32(u[e] << 16));
        f(v + 2 * e + 1, bits_f32(u[e] & 0xffff0000u));
      }
    } else {
      f(v, bits_f32(w.x));
      f(v + 1, bits_f32(w.y));
      f(v + 2, bits_f32(w.z));
      f(v + 3, bits_f32(w.w));
    }
  }
  for (int i = tail + lane; i < s.n; i += lanes) f(v0 + i, elem_f32(s.dst + i * kElem, kElem));
}

// lane_visit over a warp (f32 or bf16 by the row).
template <class F>
__device__ void warp_visit(const SliceRow& s, int v0, F&& f) {
  const int lane = threadIdx.x % 32;
  if (s.elem == 4)
    lane_visit<4>(s, v0, lane, 32, f);
  else
    lane_visit<2>(s, v0, lane, 32, f);
}

// A meeting still incomplete after this long is a bug (a CTA that never arrives), not
// slowness: the kernel traps, so the launch fails with an error instead of hanging the
// GPU (10 s: far above any stage's time, even under compute-sanitizer).
constexpr uint64_t kMeetingLimitNs = 10'000'000'000ull;

__device__ __forceinline__ uint64_t global_ns() {
  uint64_t t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

// The CTA's threads meet those of the other CTAs of the row: `target` arrivals on the
// row's counter (G times the meetings so far, this one included). Every write before it,
// by any thread of the CTA, is visible to every CTA after it (bar.sync, then the fence
// before the arrival; the acquire load and a fence after the wait).
__device__ void group_barrier(uint32_t* counter, uint32_t target) {
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    atomicAdd(counter, 1u);
    const uint64_t start = global_ns();
    for (;;) {
      uint32_t seen;
      asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(seen) : "l"(counter) : "memory");
      if (seen >= target) break;
      if (global_ns() - start > kMeetingLimitNs) __trap();
    }
    __threadfence();
  }
  __syncthreads();
}

// What every CTA of the row knows after the decision (shared memory).
struct RowState {
  MarkovPacket first[kMaxLaws];  // each law's first packet
  float z[kMaxLaws];             // and Z (non-degenerate laws)
  uint64_t keep[kMaxN + 1];      // the target's kept-set key per position (0: all)
  float P[kMaxN], Q[kMaxN], U[kMaxN];
  float w[kMaxN + 1], h[kMaxN + 1];
  int k;
  float chosen;  // the weight of the draw (block: w_k; standard: 1)
};

__device__ LawStats law_stats(const MarkovPacket& first) {
  LawStats st;
  st.first = first;
  return st;
}

// A greedy row (T = 0), by the CTA that arrived last: the target's first id at each
// position (the raw packets' fold), the decision of section 8.5 and the row's outputs.
__device__ void greedy_row(const Args& a, int r, RowState& st) {
  const ops::VerifyParams& p = a.p;
  const int N = p.n, n = p.row_length(r), G = a.S;
  const int warp = threadIdx.x / 32, warps = blockDim.x / 32;
  for (int j = warp; j <= N; j += warps) {
    const MarkovPacket f = warp_fold(a.packets + ((r * (N + 1) + j) * 2) * static_cast<int64_t>(G),
                                     G, no_packet(), packet_op);
    if (threadIdx.x % 32 == 0) st.first[j * 2] = f;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    const int64_t* x = p.draft_tokens + static_cast<int64_t>(r) * N;
    int k = 0;
    while (k < n && x[k] == st.first[k * 2].id) ++k;
    st.k = k;
  }
  __syncthreads();
  const int k = st.k;
  finish_row(a, r, k, st.first[k * 2], 0, st.first[k * 2].id);
}

// Row r (not padding) by CTA g of its group, its ids [v0, v0 + nids).
__device__ void resident_row(const Args& a, int r, int g, int v0, int nids, unsigned char* smem,
                             size_t rbt, size_t rbd, RowState& st) {
  const ops::VerifyParams& p = a.p;
  const int N = p.n, n = p.row_length(r), G = a.S;
  const float T = p.temperatures[r];
  const bool greedy_r = !(T > 0.0f);
  const int64_t slot = p.cache_slots[r], seed = p.seeds[r], anchor = p.anchor_positions[r];
  const int64_t* x = p.draft_tokens + static_cast<int64_t>(r) * N;
  uint32_t* counter = a.resident_arrivals + r;
  uint32_t meetings = 0;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, warps = blockDim.x / 32;
  const int item0 = r * (N + 1);
  auto row = [&](int l) { return slice_row(p, r, l, v0, nids, smem, rbt, rbd); };
  auto law_of = [&](int l) { return l <= N ? l * 2 : (l - N - 1) * 2 + 1; };
  auto partial = [&](int law) { return (static_cast<int64_t>(item0) * 2 + law) * G; };

  // copy: the previous row's readers are done first.
  const int rows = greedy_r ? N + 1 : 2 * N + 1;
  __syncthreads();
  for (int l = 0; l < rows; ++l) copy_slice(row(l));
  cp_async_commit();
  cp_async_wait(0);
  __syncthreads();

  // first: one warp per law.
  for (int l = warp; l < rows; l += warps) {
    FirstKey f;
    warp_visit(row(l), v0, [&](int v, float xv) { f.add(xv, v); });
    uint64_t key = f.key();
    for (int off = 16; off > 0; off >>= 1) key = max(key, shfl_xor(key, off));
    if (lane == 0) a.packets[partial(law_of(l)) + g] = packet_of_key(key);
  }
  if (greedy_r) {
    if (last_to_arrive(counter, static_cast<uint32_t>(G))) greedy_row(a, r, st);
    return;
  }
  group_barrier(counter, ++meetings * G);

  // laws: every CTA folds the packets; law_first's scans (rare) one law at a time.
  for (int l = warp; l < rows; l += warps) {
    const int law = law_of(l);
    const MarkovPacket f = warp_fold(a.packets + partial(law), G, no_packet(), packet_op);
    if (lane == 0) st.first[law] = f;
  }
  __syncthreads();
  for (int l = 0; l < rows; ++l) {  // CTA-uniform: law_first may scan the row (M = +inf)
    const int law = law_of(l);
    const MarkovPacket raw = st.first[law];
    const MarkovPacket f = law_first(a, r, law / 2, law % 2, T, raw);
    __syncthreads();
    if (threadIdx.x == 0) st.first[law] = f;
  }
  __syncthreads();
  const int32_t top_k = p.top_k ? p.top_k[r] : 0;
  const float top_p = p.top_p ? p.top_p[r] : 1.0f;
  if ((top_k > 0 && top_k < p.vocab) || top_p < 1.0f) {
    for (int j = g; j <= N; j += G) {
      const LawStats tst = law_stats(st.first[j * 2]);
      uint64_t keep = 0;
      if (!tst.degenerate()) {
        SD_SHARED_ARRAY(Radix, rx, 1);
        keep = kept_threshold(a, r, j, T, tst.first.value, top_k, top_p, *rx);
      }
      if (threadIdx.x == 0) a.keep[item0 + j] = keep;
      __syncthreads();
    }
    group_barrier(counter, ++meetings * G);
    for (int j = threadIdx.x; j <= N; j += blockDim.x) st.keep[j] = load_cg(a.keep + item0 + j);
  } else {
    for (int j = threadIdx.x; j <= N; j += blockDim.x) st.keep[j] = 0;
  }
  __syncthreads();

  // sums: one warp per non-degenerate law.
  with_scaling(T, [&](auto scaled) {
    for (int l = warp; l < rows; l += warps) {
      const int law = law_of(l);
      const LawStats ls = law_stats(st.first[law]);
      if (ls.degenerate()) continue;
      const float M = ls.first.value;
      const uint64_t keep = law % 2 == 0 ? st.keep[law / 2] : 0;
      TermSum t;
      if (keep == 0) {
        warp_visit(row(l), v0,
                   [&](int, float xv) { t.add(law_term_of_diff(fsub_rn(scaled(xv), M))); });
      } else {
        warp_visit(row(l), v0, [&](int v, float xv) {
          const float sv = scaled(xv);
          if (order_key(sv, v) >= keep) t.add(law_term_of_diff(fsub_rn(sv, M)));
        });
      }
      U128 s = t.wide();
      for (int off = 16; off > 0; off >>= 1) s = u128_add(s, shfl_xor(s, off));
      if (lane == 0) a.sums[partial(law) + g] = s;
    }
  });
  group_barrier(counter, ++meetings * G);

  // decide: Z of every law, p, q and u at the drafts, the sequential decision.
  for (int l = warp; l < rows; l += warps) {
    const int law = law_of(l);
    if (law_stats(st.first[law]).degenerate()) continue;
    const U128 s = warp_fold(a.sums + partial(law), G, U128{}, sum_op);
    if (lane == 0) st.z[law] = f32_of_fixed64(s);
  }
  __syncthreads();
  for (int j = threadIdx.x; j < n; j += blockDim.x) {
    const int v = static_cast<int>(x[j]);
    const float sv = verify_scaled(target_logit(p, r, j, v), T);
    const uint64_t keep = st.keep[j];
    const float kept = keep != 0 && order_key(sv, v) < keep ? neg_inf() : sv;
    st.P[j] = law_prob(law_stats(st.first[j * 2]), st.z[j * 2], kept, v);
    st.Q[j] = law_prob(law_stats(st.first[j * 2 + 1]), st.z[j * 2 + 1],
                       verify_scaled(draft_logit(p, slot, j, v), T), v);
    st.U[j] = accept_uniform(seed, anchor + j, p.accept_salt, x[j]);
  }
  __syncthreads();
  const bool standard = p.method == VerifyMethod::standard;
  if (threadIdx.x == 0) {
    if (standard) {
      int k = 0;
      while (k < n && accept_standard(st.U[k], st.Q[k], st.P[k])) ++k;
      st.k = k;
      st.chosen = 1.0f;
    } else {
      st.w[0] = 1.0f;
      for (int i = 1; i <= n; ++i)
        st.w[i] = block_weight_next(st.w[i - 1], st.P[i - 1], st.Q[i - 1]);
    }
  }
  __syncthreads();
  if (!standard) {
    // Block verification's residual masses R_i (i = 1 .. n-1): one warp per position.
    with_scaling(T, [&](auto scaled) {
      for (int i = 1 + warp; i < n; i += warps) {
        const LawStats tst = law_stats(st.first[i * 2]), dst = law_stats(st.first[i * 2 + 1]);
        const float zt = st.z[i * 2], zd = st.z[i * 2 + 1], w = st.w[i];
        const uint64_t keep = st.keep[i];
        const SliceRow tr = row(i), cr = row(N + 1 + i);
        U128 m;
        // Pairs of (target, cache) ids one at a time (the rows' phases may differ).
        for (int e = lane; e < nids; e += 32) {
          const int v = v0 + e;
          const float sv = scaled(elem_f32(tr.dst + e * tr.elem, tr.elem));
          const float pv =
              law_prob(tst, zt, keep != 0 && order_key(sv, v) < keep ? neg_inf() : sv, v);
          const float qv = law_prob(dst, zd, scaled(elem_f32(cr.dst + e * 2, 2)), v);
          m = u128_add(m, fixed64_of_unit(block_mass(w, pv, qv)));
        }
        for (int off = 16; off > 0; off >>= 1) m = u128_add(m, shfl_xor(m, off));
        if (lane == 0) a.mass[(static_cast<int64_t>(r) * N + i) * G + g] = m;
      }
    });
    group_barrier(counter, ++meetings * G);
    for (int i = 1 + warp; i < n; i += warps) {
      const U128 m = warp_fold(a.mass + (static_cast<int64_t>(r) * N + i) * G, G, U128{}, sum_op);
      if (lane == 0) st.h[i] = block_h(f32_of_fixed64(m), st.w[i]);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      st.h[n] = st.w[n];
      int k = 0;
      for (int i = 1; i <= n; ++i)
        if (accept_uniform(seed, anchor + i - 1, p.accept_salt, x[i - 1]) < st.h[i]) k = i;
      st.k = k;
      st.chosen = st.w[k];
    }
    __syncthreads();
  }

  // draw: this slice's packet of the race at position k, each thread's ids in increasing
  // order (race_fold).
  const int k = st.k;
  const uint32_t gd = verify_step_seed(seed, anchor + k, p.draw_salt);
  const LawStats tst = law_stats(st.first[k * 2]);
  const uint64_t keep_k = st.keep[k];
  const SliceRow tr = row(k);
  MarkovPacket win = no_packet();
  if (k < n) {
    const LawStats dst = law_stats(st.first[k * 2 + 1]);
    const float zt = st.z[k * 2], zd = st.z[k * 2 + 1], w = st.chosen;
    const SliceRow cr = row(N + 1 + k);
    with_scaling(T, [&](auto scaled) {
      for (int e = threadIdx.x; e < nids; e += blockDim.x) {
        const int v = v0 + e;
        const float sv = scaled(elem_f32(tr.dst + e * tr.elem, tr.elem));
        const float pv =
            law_prob(tst, zt, keep_k != 0 && order_key(sv, v) < keep_k ? neg_inf() : sv, v);
        // The weight is at most p (race_fold's bound): q is not read where p cannot win.
        if (!(pv > 0.0f) || fmul_rn(pv, 0x1p25f) < win.value) continue;
        const float qv = law_prob(dst, zd, scaled(elem_f32(cr.dst + e * 2, 2)), v);
        const float m = standard ? residual_weight(pv, qv) : block_mass(w, pv, qv);
        if (m > 0.0f) race_fold(win, m, gd, v);
      }
    });
  } else if (!tst.degenerate()) {
    const float M = tst.first.value;
    with_scaling(T, [&](auto scaled) {
      for (int e = threadIdx.x; e < nids; e += blockDim.x) {
        const int v = v0 + e;
        const float s = scaled(elem_f32(tr.dst + e * tr.elem, tr.elem));
        const float E = law_exp(keep_k != 0 && order_key(s, v) < keep_k ? neg_inf() : s, M);
        if (E > 0.0f) race_fold(win, E, gd, v);
      }
    });
  }
  win = block_fold(win, no_packet(), packet_op);
  if (threadIdx.x == 0) a.draws[static_cast<int64_t>(r) * G + g] = win;
  if (last_to_arrive(counter, (meetings + 1) * G)) finish_row(a, r, k, tst.first, keep_k, 0);
}

extern __shared__ uint4 resident_smem[];

__global__ void __launch_bounds__(kMaxThreads) resident_kernel(const Args a) {
  pdl_enter();
  __shared__ RowState st;
  const ops::VerifyParams& p = a.p;
  const int G = a.S, group = blockIdx.x / G, g = blockIdx.x % G;
  const int v0 = g * a.slice, nids = min(p.vocab, v0 + a.slice) - v0;
  const size_t rbt = row_bytes(a.slice, p.target_dtype == LogitsDType::f32 ? 4 : 2);
  const size_t rbd = row_bytes(a.slice, 2);
  unsigned char* smem = reinterpret_cast<unsigned char*>(resident_smem);
  for (int r = group; r < p.rows; r += a.resident_rows)
    if (!padding(p, r)) resident_row(a, r, g, v0, nids, smem, rbt, rbd, st);
}

}  // namespace

namespace detail {

size_t resident_smem_bytes(int n, int slice, LogitsDType target) {
  return static_cast<size_t>(n + 1) * row_bytes(slice, target == LogitsDType::f32 ? 4 : 2) +
         static_cast<size_t>(n) * row_bytes(slice, 2);
}

void resident_prepare() {
  int device = 0, optin = 0;
  SD_CUDA_CHECK(cudaGetDevice(&device));
  SD_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  cudaFuncAttributes attr{};
  SD_CUDA_CHECK(cudaFuncGetAttributes(&attr, resident_kernel));
  SD_CUDA_CHECK(cudaFuncSetAttribute(resident_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     optin - static_cast<int>(attr.sharedSizeBytes)));
}

int resident_occupancy(int threads, size_t smem) {
  int blocks = 0;
  const cudaError_t err =
      cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, resident_kernel, threads, smem);
  if (err == cudaErrorInvalidValue) {  // more shared memory than a CTA may have
    (void)cudaGetLastError();
    return 0;
  }
  SD_CUDA_CHECK(err);
  return blocks;
}

void resident_launch(const ops::VerifyParams& p, VerifyWorkspace& ws, const VerifyShape& shape,
                     cudaStream_t stream) {
  const int64_t G = (static_cast<int64_t>(p.vocab) + shape.slice - 1) / shape.slice;
  require(G <= ws.max_resident_slices(), "verify",
          "the resident form's slice " + std::to_string(shape.slice) + " makes " +
              std::to_string(G) + " CTAs a request, more than the workspace's " +
              std::to_string(ws.max_resident_slices()));
  require(shape.list_capacity == 0, "verify", "the resident form has no lists (list_capacity 0)");
  const size_t smem = resident_smem_bytes(p.n, shape.slice, p.target_dtype);
  const int per_sm = resident_occupancy(shape.threads, smem);
  require(per_sm > 0, "verify",
          "the resident form's slice " + std::to_string(shape.slice) + " needs " +
              std::to_string(smem) + " bytes of shared memory a CTA, more than the GPU gives");
  const int64_t ctas = shape.resident_rows * G;
  require(ctas <= static_cast<int64_t>(per_sm) * ws.sm_count(), "verify",
          std::to_string(shape.resident_rows) + " requests in flight of " + std::to_string(G) +
              " CTAs are " + std::to_string(ctas) + " CTAs; at most " +
              std::to_string(per_sm * ws.sm_count()) + " can be resident at once");
  Args a{};
  a.p = p;
  a.packets = ws.packets.data();
  a.sums = ws.sums.data();
  a.mass = ws.mass.data();
  a.draws = ws.draws.data();
  a.laws = ws.laws.data();
  a.keep = ws.keep.data();
  a.weights = ws.weights.data();
  a.chosen_weight = ws.chosen_weight.data();
  a.accepted = ws.accepted.data();
  a.emitted = ws.emitted.data();
  a.S = static_cast<int>(G);
  a.slice = shape.slice;
  a.draw_S = static_cast<int>(G);
  a.draw_slice = shape.slice;
  a.resident_rows = shape.resident_rows;
  a.resident_arrivals = ws.arrivals.data() + static_cast<size_t>(ws.max_rows()) * (ws.n() + 3);
  LaunchShape ls{dim3(static_cast<unsigned>(ctas)), dim3(static_cast<unsigned>(shape.threads)),
                 smem, stream};
  ls.cooperative = true;
  launch_kernel("verify_resident", resident_kernel, ls, a);
}

}  // namespace detail
}  // namespace sparkdraft::cuda
