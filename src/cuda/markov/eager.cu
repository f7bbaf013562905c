// The eager Markov loop: one plain kernel per op, the GPU reference the fused loop
// is held to, each one the CPU op of cpu/ops.h on many rows:
//   markov_embed        e[r] = w1[token]                        (exact copies)
//   markov_bias         one warp per 16 entries x 8 rows: the tensor-core chain
//                       over the rank (core/mma.h), rounded once to bf16
//   markov_step_logits  one thread per entry: bf16(base + bias), the transform, bf16
//   markov_sample       per block the best (noised score, id) by `better`, then one
//                       warp per row reduces the blocks' bests (the rule is
//                       associative, so the split does not matter)
//   markov_fill_cache   a reduced vocabulary's cache rows: bf16 -inf everywhere first
//   markov_topk_candidates / markov_topk_step: the top-k loop (contract.md section 12):
//                       each position's k candidates once (a radix select over slices of
//                       4096 ids: two histogram kernels, a count kernel, a compaction
//                       kernel in id order), then per step the k bias
//                       chains (the dense kernel's chain code), the cache row and the token;
//                       the union form (12.5) adds per step the dense bias row's top-m
//                       (markov_bias, then the candidate kernel over the bias rows)
//   markov_head         the gated / rnn head (contract.md section 13): one block per row
//                       assembles x, cuda::gemm projects it (fp32 out), one thread per unit
//                       applies ops/markov_head.h's host/device units; u then feeds
//                       markov_bias in place of e
// eager_markov_loop runs them for N steps on a stream without host syncs. A reduced draft
// vocabulary (contract.md section 11) runs here: the entries are draft ids, each stored
// and scored as its target id, and (-inf, fill) joins each row's fold.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/common/launch.h"
#include "cuda/common/mma.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/kernels.h"
#include "cuda/markov/detail.h"
#include "cuda/markov/device.cuh"
#include "cuda/markov/markov.h"
#include "sparkdraft/core/philox.h"
#include "sparkdraft/core/reduce.h"
#include "sparkdraft/cuda/check.h"

namespace sparkdraft::cuda {
namespace {

using markov_detail::kThreads;
using markov_detail::kWarp;
using markov_detail::kWarps;
using markov_detail::require;

__global__ void embed_kernel(const int64_t* tokens, int64_t token_stride, const bf16* w1, int rank,
                             bf16* e) {
  pdl_enter();
  const int r = blockIdx.x;
  const bf16* src = w1 + tokens[r * token_stride] * rank;
  for (int k = threadIdx.x; k < rank; k += blockDim.x)
    e[static_cast<int64_t>(r) * rank + k] = src[k];
}

// Two bf16 of row p at k and k + 1 as an mma fragment register (zero past the rank; a
// null row, past the last one, is zero: both operands of a padded product are zero).
__device__ __forceinline__ uint32_t fragment_pair(const bf16* p, int rank, int k) {
  if (p == nullptr) return 0u;
  const uint32_t lo = k < rank ? p[k].bits : 0u, hi = k + 1 < rank ? p[k + 1].bits : 0u;
  return lo | (hi << 16);
}

// The bias chains of one warp's 16 x 8 tile (the one chain code of the eager bias, dense
// and top-k): the chain of mma.sync.m16n8k16 over the rank from +0, A = the w2 rows
// a_lo (this lane's row g) and a_hi (row g + 8), B = the embedding b (column g); fragments
// loaded straight from global memory (common/mma.cuh). acc[i] holds entry
// (row g + (i / 2) * 8, column 2 t + i % 2) with t = lane % 4.
__device__ __forceinline__ void bias_chain_tile(const bf16* a_lo, const bf16* a_hi, const bf16* b,
                                                int rank, int t, float acc[4]) {
  for (int i = 0; i < 4; ++i) acc[i] = 0.0f;
    // Unrolled so that several steps' fragments are in flight (the top-k step runs one warp
    // per 16 candidates: latency, not bandwidth); the mma order is the chain's either way.
#pragma unroll 8
  for (int k0 = 0; k0 < rank; k0 += 16) {
    const uint32_t a[4] = {
        fragment_pair(a_lo, rank, k0 + 2 * t), fragment_pair(a_hi, rank, k0 + 2 * t),
        fragment_pair(a_lo, rank, k0 + 2 * t + 8), fragment_pair(a_hi, rank, k0 + 2 * t + 8)};
    const uint32_t bb[2] = {fragment_pair(b, rank, k0 + 2 * t),
                            fragment_pair(b, rank, k0 + 2 * t + 8)};
    mma_bf16_16816(acc, a, bb, acc);
  }
}

__device__ __forceinline__ const bf16* row_or_null(const bf16* m, int row, int rows, int rank) {
  return row < rows ? m + static_cast<int64_t>(row) * rank : nullptr;
}

// One warp per 16 vocab entries x 8 rows (bias_chain_tile), so
// bias[n][v] = bf16(mma_chain(w2[v], e[n])). The row tiles run along blockIdx.y next to
// each other, so w2 comes from L2 for all but the first.
__global__ void bias_kernel(const bf16* e, int rows, const bf16* w2, int vocab, int rank,
                            bf16* bias) {
  pdl_enter();
  const int lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;
  const int v0 = (blockIdx.x * kWarps + threadIdx.x / kWarp) * 16;
  const int n0 = blockIdx.y * 8;
  if (v0 >= vocab) return;  // whole warps leave together
  float acc[4];
  bias_chain_tile(row_or_null(w2, v0 + g, vocab, rank), row_or_null(w2, v0 + g + 8, vocab, rank),
                  row_or_null(e, n0 + g, rows, rank), rank, t, acc);
  const int n = n0 + 2 * t;
  for (int i = 0; i < 4; ++i) {
    const int v = v0 + g + (i / 2) * 8, r = n + i % 2;
    if (v < vocab && r < rows) bias[static_cast<int64_t>(r) * vocab + v] = to_bf16(acc[i]);
  }
}

__global__ void step_logits_kernel(const bf16* base, int64_t base_stride, const bf16* bias,
                                   int vocab, ops::LogitTransform transform, bf16* logits,
                                   bf16* cache, const int64_t* cache_slots, const int32_t* lengths,
                                   int step, int64_t cache_slot_stride, const int32_t* ids) {
  pdl_enter();
  const int v = blockIdx.x * blockDim.x + threadIdx.x;
  const int r = blockIdx.y;
  if (v >= vocab) return;
  const bf16 l = markov_detail::step_logit(base[r * base_stride + v],
                                           bias[static_cast<int64_t>(r) * vocab + v], transform);
  logits[static_cast<int64_t>(r) * vocab + v] = l;
  if (cache != nullptr) {
    const int64_t slot = ops::step_slot(cache_slots, lengths, r, step);
    if (slot >= 0) cache[slot * cache_slot_stride + (ids ? ids[v] : v)] = l;
  }
}

// The gated / rnn head's input: row blockIdx.x's x (K values, ops::markov_head_input); with
// zero_state the rnn state part is +0 (step 0) and p.state is not read.
__global__ void head_gather_kernel(ops::MarkovHeadParams p, bf16* x, bool zero_state) {
  pdl_enter();
  const int r = blockIdx.x, K = p.proj_inputs();
  bf16* xr = x + static_cast<int64_t>(r) * K;
  for (int k = threadIdx.x; k < K; k += blockDim.x)
    xr[k] = zero_state && p.type == MarkovHeadType::rnn && k < p.rank
                ? bf16{0}
                : ops::markov_head_input(p, r, k);
}

// The gated / rnn head's units: one thread per (row, unit), ops::markov_head_unit.
__global__ void head_units_kernel(ops::MarkovHeadParams p, const bf16* x, const float* acc) {
  pdl_enter();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= static_cast<int64_t>(p.rows) * p.rank) return;
  ops::markov_head_unit(p, x, acc, static_cast<int>(t / p.rank), static_cast<int>(t % p.rank));
}

// Row r's `steps` cache rows of width `vocab` (those below its length), every column bf16 -inf.
__global__ void fill_cache_kernel(const int64_t* cache_slots, const int32_t* lengths, int steps,
                                  int vocab, bf16* cache) {
  pdl_enter();
  const int r = blockIdx.y;
  const int64_t slot = cache_slots[r];
  if (slot < 0) return;
  // The steps the row runs (contract.md 9.5).
  const int run = lengths == nullptr ? steps : max(0, min(lengths[r], steps));
  const int64_t span = static_cast<int64_t>(run) * vocab;
  bf16* row = cache + slot * static_cast<int64_t>(steps) * vocab;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // 16-byte stores where the row starts on 16 bytes, the tail one by one.
  const int64_t nvec = (reinterpret_cast<uintptr_t>(row) & 15u) == 0 ? span / 8 : 0;
  const uint4 fill8 = make_uint4(0xff80ff80u, 0xff80ff80u, 0xff80ff80u, 0xff80ff80u);
  for (int64_t c = first; c < nvec; c += stride) reinterpret_cast<uint4*>(row)[c] = fill8;
  for (int64_t i = nvec * 8 + first; i < span; i += stride) row[i] = bf16{0xff80u};
}

// Row r's tokens past its length (contract.md 9.5): -1. One thread per (row, step).
__global__ void truncate_tokens_kernel(const int32_t* lengths, int rows, int steps,
                                       int64_t* tokens) {
  pdl_enter();
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= static_cast<int64_t>(rows) * steps) return;
  const int r = static_cast<int>(t / steps), j = static_cast<int>(t % steps);
  if (!ops::step_runs(lengths, r, j)) tokens[t] = -1;
}

// Block b of row r: entries [b * kSampleBlockVocab, ...) -> partials[r][b].
__global__ void sample_block_kernel(const bf16* logits, int vocab, int64_t id_offset,
                                    const float* temperatures, const int64_t* seeds,
                                    const int64_t* anchor_positions, int step, const int32_t* ids,
                                    MarkovCandidate* partials) {
  pdl_enter();
  __shared__ MarkovCandidate warp_best_smem[kWarps];
  const int r = blockIdx.y;
  const float t = temperatures[r];
  const uint32_t gs = draft_step_seed(seeds[r], anchor_positions[r], step);
  const bf16* row = logits + static_cast<int64_t>(r) * vocab;
  const int begin = blockIdx.x * kSampleBlockVocab;
  const int end = begin + kSampleBlockVocab < vocab ? begin + kSampleBlockVocab : vocab;
  MarkovCandidate best = markov_detail::no_candidate();
  for (int v = begin + threadIdx.x; v < end; v += blockDim.x) {
    const int32_t id = ids ? ids[v] : static_cast<int32_t>(v + id_offset);
    const MarkovCandidate c = markov_detail::score(row[v], t, gs, id);
    if (markov_detail::wins(c, best)) best = c;
  }
  best = markov_detail::warp_best(best);
  if (threadIdx.x % kWarp == 0) warp_best_smem[threadIdx.x / kWarp] = best;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w)
      if (markov_detail::wins(warp_best_smem[w], best)) best = warp_best_smem[w];
    partials[static_cast<int64_t>(r) * gridDim.x + blockIdx.x] = best;
  }
}

// One warp per row: the best of the row's block bests.
__global__ void sample_final_kernel(const MarkovCandidate* partials, int blocks, int32_t fill,
                                    MarkovCandidate* best, int64_t* tokens, int64_t token_stride) {
  pdl_enter();
  const int r = blockIdx.x;
  MarkovCandidate c = markov_detail::no_candidate();
  for (int b = threadIdx.x; b < blocks; b += kWarp) {
    const MarkovCandidate o = partials[static_cast<int64_t>(r) * blocks + b];
    if (markov_detail::wins(o, c)) c = o;
  }
  c = markov_detail::warp_best(c);
  if (threadIdx.x == 0) {
    if (fill >= 0) {  // the ids outside a reduced vocabulary: one candidate (-inf, fill)
      const MarkovCandidate f{__int_as_float(static_cast<int>(0xff800000u)), fill};
      if (markov_detail::wins(f, c)) c = f;
    }
    best[r] = c;
    if (tokens != nullptr) tokens[r * token_stride] = c.id;
  }
}

// ---- The top-k Markov loop (contract.md section 12) ----

// The order key of a bf16 base logit under the rule's preference: NaN highest (all NaNs
// one key: ties go to the lower id), +0 and -0 one key, else the value's order.
__device__ __forceinline__ uint32_t topk_key(bf16 x) {
  uint32_t b = x.bits;
  if ((b & 0x7fffu) > 0x7f80u) return 0xffffu;
  if (b == 0x8000u) b = 0u;
  return (b & 0x8000u) ? (~b & 0xffffu) : (b | 0x8000u);
}

// The candidate selection runs over slices of kTopkSliceIds ids, one block of kTopkThreads per
// (slice, position), in four kernels whose scratch (TopkScratch, per position: the two byte
// histograms, the selected key and count, the slices' counts) is zero between calls.
inline constexpr int kTopkThreads = 256;
inline constexpr int kTopkWarps = kTopkThreads / kWarp;
inline constexpr int kTopkSliceIds = 4096;

// Exclusive prefix sum over the block of one count per thread (thread order) and the block's
// total: warp shuffles, then the warp totals in order (exact integer sums).
__device__ __forceinline__ int block_exclusive_sum(int x, int* warp_sums, int* total) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  int incl = x;
  for (int off = 1; off < kWarp; off *= 2) {
    const int y = __shfl_up_sync(0xffffffffu, incl, off);
    if (lane >= off) incl += y;
  }
  __syncthreads();  // warp_sums free from the previous use
  if (lane == kWarp - 1) warp_sums[warp] = incl;
  __syncthreads();
  int before = 0, sum = 0;
  for (int w = 0; w < kTopkWarps; ++w) {
    if (w < warp) before += warp_sums[w];
    sum += warp_sums[w];
  }
  *total = sum;
  return before + incl - x;
}

// A position's scratch: hist_high[256], hist_low[256], select {T, need}, counts {above, at}
// per slice.
struct TopkSlot {
  int32_t* hist_high;
  int32_t* hist_low;
  int32_t* select;
  int32_t* counts;
};
// The ints of one position's slot: the two histograms, select, then two counts per slice.
__host__ __device__ constexpr int64_t topk_slot_ints(int slices) { return 514 + 2 * slices; }
__device__ __forceinline__ TopkSlot topk_slot(int32_t* scratch, int slices, int p) {
  int32_t* b = scratch + static_cast<int64_t>(p) * topk_slot_ints(slices);
  return TopkSlot{b, b + 256, b + 512, b + 514};
}

// Calls visit(v, key) for the ids of [lo, hi) of `row` in increasing order: 16-byte loads
// where `row + lo` is aligned.
template <class Visit>
__device__ __forceinline__ void topk_walk(const bf16* row, int lo, int hi, Visit&& visit) {
  int v = lo;
  if ((reinterpret_cast<uintptr_t>(row + lo) & 15u) == 0)
    for (; v + 8 <= hi; v += 8) {
      const uint4 u = *reinterpret_cast<const uint4*>(row + v);
      const bf16* e = reinterpret_cast<const bf16*>(&u);
#pragma unroll
      for (int i = 0; i < 8; ++i) visit(v + i, topk_key(e[i]));
    }
  for (; v < hi; ++v) visit(v, topk_key(row[v]));
}

// This thread's run of the block's slice [s0, s1): runs of a multiple of 8 ids.
__device__ __forceinline__ void topk_run(int s0, int s1, int* lo, int* hi) {
  const int per = (s1 - s0 + kTopkThreads - 1) / kTopkThreads;
  const int run = (per + 7) / 8 * 8;
  *lo = min(s1, s0 + static_cast<int>(threadIdx.x) * run);
  *hi = min(s1, *lo + run);
}

// The byte of the k-th best from a histogram: the largest b with `above` + count(> b) < k <=
// `above` + count(>= b) (b = 0 when the keys run out); *above_out = above + count(> b).
__device__ __forceinline__ int topk_select_byte(const int32_t* hist, int above, int k,
                                                int* above_out) {
  int b = 255;
  for (; b > 0; --b) {
    if (above + hist[b] >= k) break;
    above += hist[b];
  }
  *above_out = above;
  return b;
}

// Adds the block's per-warp histograms into the position's histogram `hist` (after the
// block's counting).
__device__ __forceinline__ void topk_hist_add(const int (*warp_hist)[256], int32_t* hist) {
  __syncthreads();
  for (int b = threadIdx.x; b < 256; b += blockDim.x) {
    int sum = 0;
    for (int w = 0; w < kTopkWarps; ++w) sum += warp_hist[w][b];
    if (sum) atomicAdd(&hist[b], sum);
  }
}

// Kernel 1 (grid slices x positions): the high byte's histogram of every slice, per warp in
// shared memory, then added into the position's histogram.
__global__ void __launch_bounds__(kTopkThreads)
    topk_hist_high_kernel(const bf16* base, int vocab, int32_t* scratch, int slices) {
  pdl_enter();
  __shared__ int warp_hist[kTopkWarps][256];
  const int p = blockIdx.y, s0 = blockIdx.x * kTopkSliceIds;
  const int s1 = min(vocab, s0 + kTopkSliceIds), warp = threadIdx.x / kWarp;
  for (int i = threadIdx.x; i < kTopkWarps * 256; i += blockDim.x) warp_hist[i / 256][i % 256] = 0;
  __syncthreads();
  const bf16* row = base + static_cast<int64_t>(p) * vocab;
  int lo, hi;
  topk_run(s0, s1, &lo, &hi);
  topk_walk(row, lo, hi, [&](int, uint32_t key) { atomicAdd(&warp_hist[warp][key >> 8], 1); });
  topk_hist_add(warp_hist, topk_slot(scratch, slices, p).hist_high);
}

// Kernel 2: the high byte H of the k-th best (from kernel 1's histogram), then the low byte's
// histogram over the keys with high byte H.
__global__ void __launch_bounds__(kTopkThreads)
    topk_hist_low_kernel(const bf16* base, int vocab, int k, int32_t* scratch, int slices) {
  pdl_enter();
  __shared__ int warp_hist[kTopkWarps][256];
  __shared__ uint32_t high_shared;
  const int p = blockIdx.y, s0 = blockIdx.x * kTopkSliceIds;
  const int s1 = min(vocab, s0 + kTopkSliceIds), warp = threadIdx.x / kWarp;
  const TopkSlot slot = topk_slot(scratch, slices, p);
  __shared__ int32_t hist[256];
  for (int i = threadIdx.x; i < kTopkWarps * 256; i += blockDim.x) warp_hist[i / 256][i % 256] = 0;
  for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = slot.hist_high[i];
  __syncthreads();  // the selection walks shared memory, not 256 dependent global loads
  if (threadIdx.x == 0) {
    int above;
    high_shared = static_cast<uint32_t>(topk_select_byte(hist, 0, k, &above));
  }
  __syncthreads();
  const uint32_t high = high_shared;
  const bf16* row = base + static_cast<int64_t>(p) * vocab;
  int lo, hi;
  topk_run(s0, s1, &lo, &hi);
  topk_walk(row, lo, hi, [&](int, uint32_t key) {
    if ((key >> 8) == high) atomicAdd(&warp_hist[warp][key & 0xffu], 1);
  });
  topk_hist_add(warp_hist, slot.hist_low);
}

// Kernel 3: the key T of the k-th best and `need` (how many ids at T are taken, lowest first;
// >= 1), stored by slice 0; every slice's count of ids above T and at T.
__global__ void __launch_bounds__(kTopkThreads)
    topk_count_kernel(const bf16* base, int vocab, int k, int32_t* scratch, int slices) {
  pdl_enter();
  __shared__ int warp_sums[kTopkWarps];
  __shared__ uint32_t t_shared;
  const int p = blockIdx.y, s = blockIdx.x, s0 = s * kTopkSliceIds;
  const int s1 = min(vocab, s0 + kTopkSliceIds);
  const TopkSlot slot = topk_slot(scratch, slices, p);
  __shared__ int32_t hist[512];  // high, then low
  for (int i = threadIdx.x; i < 512; i += blockDim.x) hist[i] = slot.hist_high[i];
  __syncthreads();
  if (threadIdx.x == 0) {
    int above_high, above;
    const int high = topk_select_byte(hist, 0, k, &above_high);
    const int low = topk_select_byte(hist + 256, above_high, k, &above);
    t_shared = static_cast<uint32_t>((high << 8) | low);
    if (s == 0) {
      slot.select[0] = static_cast<int32_t>(t_shared);
      slot.select[1] = k - above;
    }
  }
  __syncthreads();
  const uint32_t T = t_shared;
  const bf16* row = base + static_cast<int64_t>(p) * vocab;
  int lo, hi, above = 0, at = 0;
  topk_run(s0, s1, &lo, &hi);
  topk_walk(row, lo, hi, [&](int, uint32_t key) {
    above += key > T;
    at += key == T;
  });
  int total_above = 0, total_at = 0;
  block_exclusive_sum(above, warp_sums, &total_above);
  block_exclusive_sum(at, warp_sums, &total_at);
  if (threadIdx.x == 0) {
    slot.counts[2 * s] = total_above;
    slot.counts[2 * s + 1] = total_at;
  }
}

// Kernel 4: every slice writes its candidates in id order at its offset (the slices before
// it: their ids above T and the ties they take); slice 0 then clears the histograms for the
// next call (nothing in this kernel reads them).
__global__ void __launch_bounds__(kTopkThreads)
    topk_compact_kernel(const bf16* base, int vocab, int k, int32_t* scratch, int slices,
                        int32_t* ids) {
  pdl_enter();
  __shared__ int warp_sums[kTopkWarps];
  __shared__ int ties_shared, pos_shared;
  const int p = blockIdx.y, s = blockIdx.x, s0 = s * kTopkSliceIds;
  const int s1 = min(vocab, s0 + kTopkSliceIds);
  const TopkSlot slot = topk_slot(scratch, slices, p);
  const uint32_t T = static_cast<uint32_t>(slot.select[0]);
  const int need = slot.select[1];
  // The slices before this one: their counts staged in shared memory (in chunks of the
  // block's size), then folded in slice order by thread 0.
  __shared__ int32_t before[2 * kTopkThreads];
  int ties = 0, pos0 = 0;
  for (int q0 = 0; q0 < s; q0 += kTopkThreads) {
    const int n = min(kTopkThreads, s - q0);
    __syncthreads();
    for (int i = threadIdx.x; i < 2 * n; i += blockDim.x) before[i] = slot.counts[2 * q0 + i];
    __syncthreads();
    if (threadIdx.x == 0)
      for (int q = 0; q < n; ++q) {
        const int at = before[2 * q + 1];
        pos0 += before[2 * q] + max(0, min(at, need - ties));
        ties += at;
      }
  }
  if (threadIdx.x == 0) {
    ties_shared = ties;
    pos_shared = pos0;
  }
  __syncthreads();
  const bf16* row = base + static_cast<int64_t>(p) * vocab;
  int32_t* out = ids + static_cast<int64_t>(p) * k;
  int lo, hi, above = 0, at = 0;
  topk_run(s0, s1, &lo, &hi);
  topk_walk(row, lo, hi, [&](int, uint32_t key) {
    above += key > T;
    at += key == T;
  });
  int total = 0;
  int tie = ties_shared + block_exclusive_sum(at, warp_sums, &total);
  const int taken = max(0, min(at, need - tie));
  int pos = pos_shared + block_exclusive_sum(above + taken, warp_sums, &total);
  topk_walk(row, lo, hi, [&](int v, uint32_t key) {
    const bool take = key > T || (key == T && tie++ < need);
    if (take && pos < k) out[pos++] = v;
  });
  if (s == 0)
    for (int i = threadIdx.x; i < 512; i += blockDim.x) slot.hist_high[i] = 0;  // both
}

// One block per row r, step j (12.2): the cache row -inf, then per warp 16 candidates at a
// time: the bias chain of their w2 rows (bias_chain_tile with e[r] as the one column), the
// dense step's logit, the cache entry, the noised score; the row's best by the rule, folded
// with (-inf, f) (f = the lowest id off the candidates), is the token.
// Whether `id` is in the increasing list ids[0 .. n).
__device__ bool in_sorted(const int32_t* ids, int n, int32_t id) {
  int lo = 0, hi = n;
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (ids[mid] < id)
      lo = mid + 1;
    else
      hi = mid;
  }
  return lo < n && ids[lo] == id;
}

__global__ void topk_step_kernel(const bf16* e, const bf16* w2, int rank, const bf16* base,
                                 int64_t base_stride, const int32_t* ids, int64_t ids_stride, int k,
                                 const int32_t* more_ids, int64_t more_stride, int m, int vocab,
                                 ops::LogitTransform transform, const float* temperatures,
                                 const int64_t* seeds, const int64_t* anchor_positions, int step,
                                 bf16* cache, const int64_t* cache_slots, const int32_t* lengths,
                                 int64_t cache_slot_stride, int64_t* tokens, int64_t token_stride) {
  pdl_enter();
  __shared__ MarkovCandidate warp_best_smem[kWarps];
  __shared__ int warp_fill[kWarps];
  const int r = blockIdx.x;
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp, g = lane / 4, t = lane % 4;
  const int32_t* cand_k = ids + r * ids_stride;
  const int32_t* cand_m = more_ids != nullptr ? more_ids + r * more_stride : nullptr;
  const int total = k + m;  // candidate i: cand_k[i] below k, else cand_m[i - k]
  auto cand = [&](int i) { return i < k ? cand_k[i] : cand_m[i - k]; };
  const bf16* b = base + r * base_stride;
  const bf16* er = e + static_cast<int64_t>(r) * rank;
  // The cache row is -inf already (markov_fill_cache before the loop): only the candidates'
  // entries are stored here.
  const int64_t slot = ops::step_slot(cache_slots, lengths, r, step);
  bf16* crow = slot >= 0 ? cache + slot * cache_slot_stride : nullptr;
  const float temp = temperatures[r];
  const uint32_t gs = draft_step_seed(seeds[r], anchor_positions[r], step);
  MarkovCandidate best = markov_detail::no_candidate();
  for (int c0 = warp * 16; c0 < total; c0 += kWarps * 16) {
    const int i_lo = c0 + g, i_hi = c0 + g + 8;
    const bf16* a_lo = i_lo < total ? w2 + static_cast<int64_t>(cand(i_lo)) * rank : nullptr;
    const bf16* a_hi = i_hi < total ? w2 + static_cast<int64_t>(cand(i_hi)) * rank : nullptr;
    float acc[4];
    bias_chain_tile(a_lo, a_hi, g == 0 ? er : nullptr, rank, t, acc);
    if (t == 0) {  // column 0 (the embedding): acc[0] for row g, acc[2] for row g + 8
      for (int h = 0; h < 2; ++h) {
        const int i = h == 0 ? i_lo : i_hi;
        if (i >= total) continue;
        // An id of both lists is one candidate: the second list's copy is skipped (the same
        // value would be written and scored twice).
        if (i >= k && in_sorted(cand_k, k, cand(i))) continue;
        const int32_t v = cand(i);
        const bf16 l = markov_detail::step_logit(b[v], to_bf16(acc[2 * h]), transform);
        if (crow != nullptr) crow[v] = l;
        const MarkovCandidate s = markov_detail::score(l, temp, gs, v);
        if (markov_detail::wins(s, best)) best = s;
      }
    }
  }
  // f: the lowest id in neither list: 0 when 0 is not a candidate, else the lowest
  // candidate + 1 that is none (below vocab); no f when every id is a candidate.
  auto member = [&](int32_t id) {
    return in_sorted(cand_k, k, id) || (m > 0 && in_sorted(cand_m, m, id));
  };
  int fill = 0x7fffffff;
  for (int i = threadIdx.x; i <= total; i += blockDim.x) {
    const int32_t f = i == total ? 0 : cand(i) + 1;
    if (f < vocab && f < fill && !member(f)) fill = f;
  }
  for (int off = kWarp / 2; off > 0; off /= 2)
    fill = min(fill, __shfl_xor_sync(0xffffffffu, fill, off));
  best = markov_detail::warp_best(best);
  if (lane == 0) {
    warp_best_smem[warp] = best;
    warp_fill[warp] = fill;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) {
      if (markov_detail::wins(warp_best_smem[w], best)) best = warp_best_smem[w];
      fill = min(fill, warp_fill[w]);
    }
    if (fill != 0x7fffffff) {
      const MarkovCandidate f{__int_as_float(static_cast<int>(0xff800000u)), fill};
      if (markov_detail::wins(f, best)) best = f;
    }
    tokens[r * token_stride] = best.id;
  }
}

}  // namespace

void markov_embed(const int64_t* tokens, int64_t token_stride, int rows, const bf16* w1, int rank,
                  bf16* e, cudaStream_t stream) {
  require(rows >= 0 && rank >= 1, "markov_embed",
          "rows must be >= 0 and rank >= 1, got rows " + std::to_string(rows) + ", rank " +
              std::to_string(rank));
  if (rows == 0) return;
  require(tokens != nullptr && w1 != nullptr && e != nullptr, "markov_embed",
          "tokens, w1 and e must not be null");
  launch_kernel("embed_kernel", embed_kernel, LaunchShape{dim3(rows), dim3(128), 0, stream}, tokens,
                token_stride, w1, rank, e);
}

void markov_bias(const bf16* e, int rows, const bf16* w2, int vocab, int rank, bf16* bias,
                 cudaStream_t stream) {
  require(rows >= 0 && vocab >= 1 && rank >= 1, "markov_bias",
          "rows must be >= 0, vocab and rank >= 1, got rows " + std::to_string(rows) + ", vocab " +
              std::to_string(vocab) + ", rank " + std::to_string(rank));
  require(rows <= 65535, "markov_bias", "rows must be <= 65535, got " + std::to_string(rows));
  if (rows == 0) return;
  require(e != nullptr && w2 != nullptr && bias != nullptr, "markov_bias",
          "e, w2 and bias must not be null");
  const int vocab_blocks = (vocab + 16 * kWarps - 1) / (16 * kWarps);
  const dim3 grid(vocab_blocks, (rows + 7) / 8);
  launch_kernel("markov_bias_kernel", bias_kernel,
                LaunchShape{dim3(grid), dim3(kThreads), 0, stream}, e, rows, w2, vocab, rank, bias);
}

void markov_step_logits(const bf16* base, int64_t base_stride, const bf16* bias,
                        const ops::MarkovRows& mrows, int step, int vocab,
                        const ops::LogitTransform& transform, bf16* logits, bf16* cache,
                        int64_t cache_slot_stride, cudaStream_t stream, const DraftIdMap& map) {
  const int rows = mrows.num_rows;
  const int64_t* cache_slots = mrows.cache_slots;
  require(rows >= 0 && vocab >= 1, "markov_step_logits",
          "rows must be >= 0 and vocab >= 1, got rows " + std::to_string(rows) + ", vocab " +
              std::to_string(vocab));
  require(rows <= 65535, "markov_step_logits",
          "rows must be <= 65535, got " + std::to_string(rows));
  if (rows == 0) return;
  require(base != nullptr && bias != nullptr && logits != nullptr, "markov_step_logits",
          "base, bias and logits must not be null");
  require(cache == nullptr || cache_slots != nullptr, "markov_step_logits",
          "cache_slots must be given with a cache");
  const dim3 grid((vocab + kThreads - 1) / kThreads, rows);
  launch_kernel("markov_step_logits_kernel", step_logits_kernel,
                LaunchShape{dim3(grid), dim3(kThreads), 0, stream}, base, base_stride, bias, vocab,
                transform, logits, cache, cache_slots, mrows.lengths, step, cache_slot_stride,
                map.ids);
}

void markov_fill_cache(const ops::MarkovRows& mrows, int steps, int vocab, bf16* cache,
                       cudaStream_t stream) {
  const int rows = mrows.num_rows;
  require(rows >= 0 && rows <= 65535 && steps >= 1 && vocab >= 1, "markov_fill_cache",
          "rows must be in [0, 65535], steps and vocab >= 1, got rows " + std::to_string(rows) +
              ", steps " + std::to_string(steps) + ", vocab " + std::to_string(vocab));
  if (rows == 0) return;
  require(cache != nullptr && mrows.cache_slots != nullptr, "markov_fill_cache",
          "cache and cache_slots must not be null");
  const int64_t span = static_cast<int64_t>(steps) * vocab;
  const int64_t blocks = (span / 8 + kThreads) / kThreads;  // 8 entries a thread (16 bytes)
  const dim3 grid(static_cast<unsigned>(blocks < 1024 ? blocks : 1024), rows);
  launch_kernel("markov_fill_cache_kernel", fill_cache_kernel,
                LaunchShape{grid, dim3(kThreads), 0, stream}, mrows.cache_slots, mrows.lengths,
                steps, vocab, cache);
}

void markov_truncate_tokens(const ops::MarkovRows& mrows, int steps, int64_t* tokens,
                            cudaStream_t stream) {
  if (mrows.lengths == nullptr || mrows.num_rows == 0) return;
  require(tokens != nullptr && steps >= 1, "markov_truncate_tokens",
          "tokens must not be null and steps >= 1");
  const int64_t n = static_cast<int64_t>(mrows.num_rows) * steps;
  launch_kernel("markov_truncate_tokens_kernel", truncate_tokens_kernel,
                LaunchShape{dim3(static_cast<unsigned>((n + kThreads - 1) / kThreads)),
                            dim3(kThreads), 0, stream},
                mrows.lengths, mrows.num_rows, steps, tokens);
}

void markov_head(const ops::MarkovHeadParams& p, bf16* x, float* acc, cudaStream_t stream,
                 bool zero_state) {
  p.check("cuda::markov_head");
  require(p.rows <= 65535, "cuda::markov_head",
          "rows must be <= 65535, got " + std::to_string(p.rows));
  if (p.rows == 0) return;
  require(x != nullptr && acc != nullptr, "cuda::markov_head", "null x or acc");
  const int P = p.proj_rows(), K = p.proj_inputs();
  launch_kernel("markov_head_gather_kernel", head_gather_kernel,
                LaunchShape{dim3(p.rows), dim3(kThreads), 0, stream}, p, x, zero_state);
  ops::GemmParams g;
  g.x = x;
  g.x_stride = K;
  g.w = p.w;
  g.M = p.rows;
  g.N = P;
  g.K = K;
  g.y = acc;
  g.y_stride = P;
  g.y_dtype = StreamDType::f32;
  gemm(g, stream);
  const int64_t units = static_cast<int64_t>(p.rows) * p.rank;
  launch_kernel("markov_head_units_kernel", head_units_kernel,
                LaunchShape{dim3(static_cast<unsigned>((units + kThreads - 1) / kThreads)),
                            dim3(kThreads), 0, stream},
                p, static_cast<const bf16*>(x), static_cast<const float*>(acc));
}

int markov_sample_blocks(int vocab) { return (vocab + kSampleBlockVocab - 1) / kSampleBlockVocab; }

void markov_sample(const bf16* logits, const ops::MarkovRows& mrows, int vocab, int64_t id_offset,
                   int step, MarkovCandidate* partials, MarkovCandidate* best, int64_t* tokens,
                   int64_t token_stride, cudaStream_t stream, const DraftIdMap& map) {
  const int rows = mrows.num_rows;
  const float* temperatures = mrows.temperatures;
  const int64_t *seeds = mrows.seeds, *anchor_positions = mrows.anchor_positions;
  require(rows >= 0 && vocab >= 1, "markov_sample",
          "rows must be >= 0 and vocab >= 1, got rows " + std::to_string(rows) + ", vocab " +
              std::to_string(vocab));
  require(rows <= 65535, "markov_sample", "rows must be <= 65535, got " + std::to_string(rows));
  require(id_offset >= 0 && id_offset + vocab <= INT32_MAX, "markov_sample",
          "ids [" + std::to_string(id_offset) + ", " + std::to_string(id_offset + vocab) +
              ") must fit in int32");
  if (rows == 0) return;
  require(logits != nullptr && temperatures != nullptr && seeds != nullptr &&
              anchor_positions != nullptr && partials != nullptr && best != nullptr,
          "markov_sample",
          "logits, temperatures, seeds, anchor_positions, partials and best "
          "must not be null");
  const int blocks = markov_sample_blocks(vocab);
  launch_kernel("markov_sample_block_kernel", sample_block_kernel,
                LaunchShape{dim3(blocks, rows), dim3(kThreads), 0, stream}, logits, vocab,
                id_offset, temperatures, seeds, anchor_positions, step, map.ids, partials);
  launch_kernel("markov_sample_final_kernel", sample_final_kernel,
                LaunchShape{dim3(rows), dim3(kWarp), 0, stream}, partials, blocks, map.fill, best,
                tokens, token_stride);
}

int topk_slices(int vocab) { return (vocab + kTopkSliceIds - 1) / kTopkSliceIds; }

TopkScratch::TopkScratch(int positions, int vocab)
    : positions_(positions),
      slices_(topk_slices(vocab)),
      ints_(std::vector<int32_t>(
          static_cast<size_t>(positions) * static_cast<size_t>(topk_slot_ints(topk_slices(vocab))),
          0)) {}

void markov_topk_candidates(const bf16* base, int positions, int vocab, int k, int32_t* ids,
                            TopkScratch& scratch, cudaStream_t stream) {
  require(positions >= 0 && vocab >= 1 && k >= 1 && k <= vocab, "markov_topk_candidates",
          "positions must be >= 0, vocab >= 1 and k in [1, vocab], got positions " +
              std::to_string(positions) + ", vocab " + std::to_string(vocab) + ", k " +
              std::to_string(k));
  require(positions <= 65535, "markov_topk_candidates",
          "positions must be <= 65535, got " + std::to_string(positions));
  if (positions == 0) return;
  require(base != nullptr && ids != nullptr, "markov_topk_candidates",
          "base and ids must not be null");
  const int slices = topk_slices(vocab);
  require(positions <= scratch.positions() && slices == scratch.slices(), "markov_topk_candidates",
          "the scratch holds " + std::to_string(scratch.positions()) + " positions of " +
              std::to_string(scratch.slices()) + " slices, the call needs " +
              std::to_string(positions) + " of " + std::to_string(slices));
  const LaunchShape shape{dim3(slices, positions), dim3(kTopkThreads), 0, stream};
  int32_t* sc = scratch.data();
  launch_kernel("markov_topk_hist_high_kernel", topk_hist_high_kernel, shape, base, vocab, sc,
                slices);
  launch_kernel("markov_topk_hist_low_kernel", topk_hist_low_kernel, shape, base, vocab, k, sc,
                slices);
  launch_kernel("markov_topk_count_kernel", topk_count_kernel, shape, base, vocab, k, sc, slices);
  launch_kernel("markov_topk_compact_kernel", topk_compact_kernel, shape, base, vocab, k, sc,
                slices, ids);
}

void markov_topk_step(const bf16* e, const bf16* w2, int rank, const bf16* base,
                      int64_t base_stride, const int32_t* ids, int64_t ids_stride, int k,
                      const ops::MarkovRows& mrows, int vocab, const ops::LogitTransform& transform,
                      int step, bf16* cache, int64_t cache_slot_stride, int64_t* tokens,
                      int64_t token_stride, cudaStream_t stream, const TopkMoreIds& more) {
  const int rows = mrows.num_rows;
  require(rows >= 0 && vocab >= 1 && rank >= 1 && k >= 1 && k <= vocab, "markov_topk_step",
          "rows must be >= 0, vocab and rank >= 1, k in [1, vocab], got rows " +
              std::to_string(rows) + ", vocab " + std::to_string(vocab) + ", rank " +
              std::to_string(rank) + ", k " + std::to_string(k));
  require(more.count >= 0 && more.count <= vocab && (more.count == 0 || more.ids != nullptr),
          "markov_topk_step",
          "the union form's list needs ids and a count in [0, vocab], got count " +
              std::to_string(more.count));
  if (rows == 0) return;
  require(e != nullptr && w2 != nullptr && base != nullptr && ids != nullptr && cache != nullptr &&
              tokens != nullptr && mrows.cache_slots != nullptr && mrows.temperatures != nullptr &&
              mrows.seeds != nullptr && mrows.anchor_positions != nullptr,
          "markov_topk_step", "pointers must not be null");
  launch_kernel("markov_topk_step_kernel", topk_step_kernel,
                LaunchShape{dim3(rows), dim3(kThreads), 0, stream}, e, w2, rank, base, base_stride,
                ids, ids_stride, k, more.count > 0 ? more.ids : nullptr, more.stride, more.count,
                vocab, transform, mrows.temperatures, mrows.seeds, mrows.anchor_positions, step,
                cache, mrows.cache_slots, mrows.lengths, cache_slot_stride, tokens, token_stride);
}

void eager_markov_loop(const MarkovHead& head, const MarkovBatch& batch, MarkovWorkspace& ws,
                       cudaStream_t stream) {
  require(
      ws.tp_size() == 1, "eager_markov_loop",
      "the eager loop runs TP 1 only (workspace has " + std::to_string(ws.tp_size()) + " shards)");
  require(head.vocab == ws.vocab() && head.markov_rank == ws.markov_rank(), "eager_markov_loop",
          "head (vocab " + std::to_string(head.vocab) + ", rank " +
              std::to_string(head.markov_rank) + ") does not match the workspace (vocab " +
              std::to_string(ws.vocab()) + ", rank " + std::to_string(ws.markov_rank()) + ")");
  require(batch.rows.num_rows >= 0 && batch.rows.num_rows <= ws.max_rows(), "eager_markov_loop",
          "rows " + std::to_string(batch.rows.num_rows) + " not in [0, " +
              std::to_string(ws.max_rows()) + "]");
  require(
      batch.steps >= 1 && batch.steps <= ws.steps(), "eager_markov_loop",
      "steps " + std::to_string(batch.steps) + " not in [1, " + std::to_string(ws.steps()) + "]");
  if (batch.rows.num_rows == 0) return;
  require(head.w1 != nullptr && head.w2 != nullptr, "eager_markov_loop",
          "head.w1 and head.w2 must not be null");
  require(batch.rows.anchor_tokens != nullptr && batch.draft_tokens != nullptr &&
              batch.base_logits != nullptr && batch.cache != nullptr,
          "eager_markov_loop",
          "anchor_tokens, draft_tokens, base_logits and cache must not be null");
  require(!head.reduced() || (head.draft_ids != nullptr && head.draft_vocab <= head.vocab),
          "eager_markov_loop",
          "a reduced draft vocabulary needs its draft_ids and at most vocab entries (draft_vocab " +
              std::to_string(head.draft_vocab) + ", vocab " + std::to_string(head.vocab) + ")");
  require(!head.head_proj() || (!head.reduced() && head.topk == 0), "eager_markov_loop",
          "the gated / rnn head runs the dense loop over the full vocabulary (no top-k, no d2t)");
  // Base logits, bias and sampling over the head's width (draft ids); cache rows over V.
  const int64_t n = batch.steps, v = head.vocab, w = head.width();
  if (head.topk > 0) {  // the top-k loop (contract.md section 12)
    require(!head.reduced() && head.topk <= head.vocab, "eager_markov_loop",
            "the top-k loop needs the full vocabulary and k <= vocab (k " +
                std::to_string(head.topk) + ")");
    const int64_t k = head.topk;
    require(ws.topk_ids.size() >= static_cast<size_t>(batch.rows.num_rows) * n * k,
            "eager_markov_loop", "the workspace has no top-k candidate buffer of this size");
    require(head.bias_topk >= 0 && head.bias_topk <= head.vocab &&
                ws.bias_topk_ids.size() >=
                    static_cast<size_t>(batch.rows.num_rows) * static_cast<size_t>(head.bias_topk),
            "eager_markov_loop",
            "the union form needs bias_topk in [0, vocab] and its candidate buffer (bias_topk " +
                std::to_string(head.bias_topk) + ")");
    markov_topk_candidates(batch.base_logits, batch.rows.num_rows * batch.steps, head.vocab,
                           head.topk, ws.topk_ids.data(), ws.topk_scratch, stream);
    // Every cache row -inf at once (all rows and steps, a wide grid); each step then stores
    // only its candidates' entries.
    markov_fill_cache(batch.rows, batch.steps, head.vocab, batch.cache, stream);
    for (int j = 0; j < batch.steps; ++j) {
      if (j == 0)
        markov_embed(batch.rows.anchor_tokens, 1, batch.rows.num_rows, head.w1, head.markov_rank,
                     ws.e.data(), stream);
      else
        markov_embed(batch.draft_tokens + (j - 1), n, batch.rows.num_rows, head.w1,
                     head.markov_rank, ws.e.data(), stream);
      TopkMoreIds more;
      if (head.bias_topk > 0) {  // the union form (12.5): the dense bias row's top-m join
        markov_bias(ws.e.data(), batch.rows.num_rows, head.w2, head.vocab, head.markov_rank,
                    ws.bias.data(), stream);
        markov_topk_candidates(ws.bias.data(), batch.rows.num_rows, head.vocab, head.bias_topk,
                               ws.bias_topk_ids.data(), ws.topk_scratch, stream);
        more = TopkMoreIds{ws.bias_topk_ids.data(), head.bias_topk, head.bias_topk};
      }
      markov_topk_step(ws.e.data(), head.w2, head.markov_rank, batch.base_logits + j * v, n * v,
                       ws.topk_ids.data() + j * k, n * k, head.topk, batch.rows, head.vocab,
                       head.transform, j, batch.cache + j * v, n * v, batch.draft_tokens + j, n,
                       stream, more);
    }
    markov_truncate_tokens(batch.rows, batch.steps, batch.draft_tokens, stream);
    return;
  }
  const DraftIdMap map{head.draft_ids, head.reduced() ? head.fill : -1};
  if (head.reduced()) markov_fill_cache(batch.rows, batch.steps, head.vocab, batch.cache, stream);
  // The gated / rnn head (contract.md section 13): u replaces e in ws.e before the bias.
  ops::MarkovHeadParams hp;
  if (head.head_proj()) {
    hp = ops::MarkovHeadParams{head.head_type, batch.rows.num_rows, head.hidden, head.markov_rank};
    require(batch.hidden != nullptr && head.proj_w != nullptr && head.proj_b != nullptr,
            "eager_markov_loop",
            "the gated / rnn head needs the batch's hidden states and its projection weights");
    require(ws.head_x.size() >= static_cast<size_t>(hp.rows) * hp.proj_inputs() &&
                ws.head_acc.size() >= static_cast<size_t>(hp.rows) * hp.proj_rows() &&
                (head.head_type != MarkovHeadType::rnn ||
                 ws.head_state.size() >= static_cast<size_t>(hp.rows) * head.markov_rank),
            "eager_markov_loop", "the workspace has no Markov head buffers of this size");
    hp.h_stride = n * head.hidden;
    hp.e = ws.e.data();
    hp.w = head.proj_w;
    hp.b = head.proj_b;
    hp.state = head.head_type == MarkovHeadType::rnn ? ws.head_state.data() : nullptr;
    hp.u = ws.e.data();
  }
  for (int j = 0; j < batch.steps; ++j) {
    if (j == 0)
      markov_embed(batch.rows.anchor_tokens, 1, batch.rows.num_rows, head.w1, head.markov_rank,
                   ws.e.data(), stream);
    else
      markov_embed(batch.draft_tokens + (j - 1), n, batch.rows.num_rows, head.w1, head.markov_rank,
                   ws.e.data(), stream);
    if (head.head_proj()) {
      hp.h = batch.hidden + j * static_cast<int64_t>(head.hidden);
      markov_head(hp, ws.head_x.data(), ws.head_acc.data(), stream, j == 0);
    }
    markov_bias(ws.e.data(), batch.rows.num_rows, head.w2, head.width(), head.markov_rank,
                ws.bias.data(), stream);
    markov_step_logits(batch.base_logits + j * w, n * w, ws.bias.data(), batch.rows, j,
                       head.width(), head.transform, ws.logits.data(), batch.cache + j * v, n * v,
                       stream, map);
    markov_sample(ws.logits.data(), batch.rows, head.width(), 0, j, ws.sample_partials.data(),
                  ws.sample_best.data(), batch.draft_tokens + j, n, stream, map);
  }
  markov_truncate_tokens(batch.rows, batch.steps, batch.draft_tokens, stream);
}

}  // namespace sparkdraft::cuda
