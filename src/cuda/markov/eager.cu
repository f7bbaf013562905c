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
//                       each position's k candidates once, then per step the k bias
//                       chains (the dense kernel's chain code), the cache row and the token;
//                       the union form (12.5) adds per step the dense bias row's top-m
//                       (markov_bias, then the candidate kernel over the bias rows)
// eager_markov_loop runs them for N steps on a stream without host syncs. A reduced draft
// vocabulary (contract.md section 11) runs here: the entries are draft ids, each stored
// and scored as its target id, and (-inf, fill) joins each row's fold.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/common/launch.h"
#include "cuda/common/mma.cuh"
#include "cuda/common/ptx.cuh"
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
                                   bf16* cache, const int64_t* cache_slots,
                                   int64_t cache_slot_stride, const int32_t* ids) {
  pdl_enter();
  const int v = blockIdx.x * blockDim.x + threadIdx.x;
  const int r = blockIdx.y;
  if (v >= vocab) return;
  const bf16 l = markov_detail::step_logit(base[r * base_stride + v],
                                           bias[static_cast<int64_t>(r) * vocab + v], transform);
  logits[static_cast<int64_t>(r) * vocab + v] = l;
  if (cache != nullptr) {
    const int64_t slot = cache_slots[r];
    if (slot >= 0) cache[slot * cache_slot_stride + (ids ? ids[v] : v)] = l;
  }
}

// Row r's `steps` cache rows of width `vocab`, every column bf16 -inf.
__global__ void fill_cache_kernel(const int64_t* cache_slots, int64_t span, bf16* cache) {
  pdl_enter();
  const int64_t slot = cache_slots[blockIdx.y];
  if (slot < 0) return;
  bf16* row = cache + slot * span;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < span;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    row[i] = bf16{0xff80u};
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

inline constexpr int kTopkThreads = 1024;
inline constexpr int kTopkWarps = kTopkThreads / kWarp;

// Exclusive prefix over the block of one flag per thread (ids in thread order), and the
// block's total; warp ballots, then the warp totals in order (exact integer counts).
__device__ __forceinline__ int block_exclusive_count(bool flag, int* warp_counts, int* total) {
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const uint32_t ballot = __ballot_sync(0xffffffffu, flag);
  const int in_warp = __popc(ballot & ((1u << lane) - 1u));
  __syncthreads();  // warp_counts free from the previous round
  if (lane == 0) warp_counts[warp] = __popc(ballot);
  __syncthreads();
  int before = 0, sum = 0;
  for (int w = 0; w < kTopkWarps; ++w) {
    if (w < warp) before += warp_counts[w];
    sum += warp_counts[w];
  }
  *total = sum;
  return before + in_warp;
}

// One block per position p: the k candidates of base[p] (12.1) written to ids[p] in
// increasing id order (the set is what the step reads). A radix select on the 16-bit key
// (two 8-bit histograms) finds the key T of the k-th best: the candidates are every id with
// key > T and the lowest `need` ids with key == T; a block scan in id order compacts them.
__global__ void topk_candidates_kernel(const bf16* base, int vocab, int k, int32_t* ids) {
  pdl_enter();
  __shared__ int hist[256];
  __shared__ int warp_counts[kTopkWarps];
  __shared__ uint32_t sel_high, sel_low;
  __shared__ int above_high, need_shared;
  const bf16* row = base + static_cast<int64_t>(blockIdx.x) * vocab;
  int32_t* out = ids + static_cast<int64_t>(blockIdx.x) * k;
  // Pass 1: the high byte.
  for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
  __syncthreads();
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) atomicAdd(&hist[topk_key(row[v]) >> 8], 1);
  __syncthreads();
  if (threadIdx.x == 0) {
    int above = 0, h = 255;
    for (; h > 0; --h) {
      if (above + hist[h] >= k) break;
      above += hist[h];
    }
    sel_high = static_cast<uint32_t>(h);
    above_high = above;
  }
  __syncthreads();
  const uint32_t high = sel_high;
  // Pass 2: the low byte among the keys of that high byte.
  for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
  __syncthreads();
  for (int v = threadIdx.x; v < vocab; v += blockDim.x) {
    const uint32_t key = topk_key(row[v]);
    if ((key >> 8) == high) atomicAdd(&hist[key & 0xffu], 1);
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    int above = above_high, l = 255;
    for (; l > 0; --l) {
      if (above + hist[l] >= k) break;
      above += hist[l];
    }
    sel_low = static_cast<uint32_t>(l);
    need_shared = k - above;  // >= 1: ids with key == T taken, lowest first
  }
  __syncthreads();
  const uint32_t T = (high << 8) | sel_low;
  const int need = need_shared;
  // Pass 3: compaction in id order.
  int written = 0, ties = 0;
  for (int base_v = 0; base_v < vocab; base_v += blockDim.x) {
    const int v = base_v + static_cast<int>(threadIdx.x);
    const uint32_t key = v < vocab ? topk_key(row[v]) : 0u;
    const bool tie = v < vocab && key == T;
    int tie_total = 0;
    const int tie_before = ties + block_exclusive_count(tie, warp_counts, &tie_total);
    const bool take = v < vocab && (key > T || (tie && tie_before < need));
    int take_total = 0;
    const int pos = written + block_exclusive_count(take, warp_counts, &take_total);
    if (take && pos < k) out[pos] = v;
    ties += tie_total;
    written += take_total;
  }
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
                                 bf16* cache, const int64_t* cache_slots, int64_t cache_slot_stride,
                                 int64_t* tokens, int64_t token_stride) {
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
  const int64_t slot = cache_slots[r];
  bf16* crow = slot >= 0 ? cache + slot * cache_slot_stride : nullptr;
  if (crow != nullptr)
    for (int v = threadIdx.x; v < vocab; v += blockDim.x) crow[v] = bf16{0xff80u};
  __syncthreads();  // the -inf fill lands before the candidates' entries
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
                        const ops::MarkovRows& mrows, int vocab,
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
                transform, logits, cache, cache_slots, cache_slot_stride, map.ids);
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
  const int64_t blocks = (span + kThreads - 1) / kThreads;
  const dim3 grid(static_cast<unsigned>(blocks < 1024 ? blocks : 1024), rows);
  launch_kernel("markov_fill_cache_kernel", fill_cache_kernel,
                LaunchShape{grid, dim3(kThreads), 0, stream}, mrows.cache_slots, span, cache);
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

void markov_topk_candidates(const bf16* base, int positions, int vocab, int k, int32_t* ids,
                            cudaStream_t stream) {
  require(positions >= 0 && vocab >= 1 && k >= 1 && k <= vocab, "markov_topk_candidates",
          "positions must be >= 0, vocab >= 1 and k in [1, vocab], got positions " +
              std::to_string(positions) + ", vocab " + std::to_string(vocab) + ", k " +
              std::to_string(k));
  if (positions == 0) return;
  require(base != nullptr && ids != nullptr, "markov_topk_candidates",
          "base and ids must not be null");
  launch_kernel("markov_topk_candidates_kernel", topk_candidates_kernel,
                LaunchShape{dim3(positions), dim3(kTopkThreads), 0, stream}, base, vocab, k, ids);
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
                cache, mrows.cache_slots, cache_slot_stride, tokens, token_stride);
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
                           head.topk, ws.topk_ids.data(), stream);
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
                               ws.bias_topk_ids.data(), stream);
        more = TopkMoreIds{ws.bias_topk_ids.data(), head.bias_topk, head.bias_topk};
      }
      markov_topk_step(ws.e.data(), head.w2, head.markov_rank, batch.base_logits + j * v, n * v,
                       ws.topk_ids.data() + j * k, n * k, head.topk, batch.rows, head.vocab,
                       head.transform, j, batch.cache + j * v, n * v, batch.draft_tokens + j, n,
                       stream, more);
    }
    return;
  }
  const DraftIdMap map{head.draft_ids, head.reduced() ? head.fill : -1};
  if (head.reduced()) markov_fill_cache(batch.rows, batch.steps, head.vocab, batch.cache, stream);
  for (int j = 0; j < batch.steps; ++j) {
    if (j == 0)
      markov_embed(batch.rows.anchor_tokens, 1, batch.rows.num_rows, head.w1, head.markov_rank,
                   ws.e.data(), stream);
    else
      markov_embed(batch.draft_tokens + (j - 1), n, batch.rows.num_rows, head.w1, head.markov_rank,
                   ws.e.data(), stream);
    markov_bias(ws.e.data(), batch.rows.num_rows, head.w2, head.width(), head.markov_rank,
                ws.bias.data(), stream);
    markov_step_logits(batch.base_logits + j * w, n * w, ws.bias.data(), batch.rows, head.width(),
                       head.transform, ws.logits.data(), batch.cache + j * v, n * v, stream, map);
    markov_sample(ws.logits.data(), batch.rows, head.width(), 0, j, ws.sample_partials.data(),
                  ws.sample_best.data(), batch.draft_tokens + j, n, stream, map);
  }
}

}  // namespace sparkdraft::cuda
