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

// Two bf16 of `row` at k and k + 1 as an mma fragment register (zero past the
// rank or past the last row: both operands of a padded product are zero).
__device__ __forceinline__ uint32_t fragment_pair(const bf16* m, int row, int rows, int rank,
                                                  int k) {
  if (row >= rows) return 0u;
  const bf16* p = m + static_cast<int64_t>(row) * rank;
  const uint32_t lo = k < rank ? p[k].bits : 0u, hi = k + 1 < rank ? p[k + 1].bits : 0u;
  return lo | (hi << 16);
}

// One warp per 16 vocab entries x 8 rows: the chain of mma.sync.m16n8k16 over the
// rank (A = w2 rows v0..v0+15, B = embeddings n0..n0+7, fragments loaded straight
// from global memory, common/mma.cuh), so bias[n][v] = bf16(mma_chain(w2[v], e[n])).
// The row tiles run along blockIdx.y next to each other, so w2 comes from L2 for all
// but the first.
__global__ void bias_kernel(const bf16* e, int rows, const bf16* w2, int vocab, int rank,
                            bf16* bias) {
  pdl_enter();
  const int lane = threadIdx.x % kWarp, g = lane / 4, t = lane % 4;
  const int v0 = (blockIdx.x * kWarps + threadIdx.x / kWarp) * 16;
  const int n0 = blockIdx.y * 8;
  if (v0 >= vocab) return;  // whole warps leave together
  float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
  for (int k0 = 0; k0 < rank; k0 += 16) {
    const uint32_t a[4] = {fragment_pair(w2, v0 + g, vocab, rank, k0 + 2 * t),
                           fragment_pair(w2, v0 + g + 8, vocab, rank, k0 + 2 * t),
                           fragment_pair(w2, v0 + g, vocab, rank, k0 + 2 * t + 8),
                           fragment_pair(w2, v0 + g + 8, vocab, rank, k0 + 2 * t + 8)};
    const uint32_t b[2] = {fragment_pair(e, n0 + g, rows, rank, k0 + 2 * t),
                           fragment_pair(e, n0 + g, rows, rank, k0 + 2 * t + 8)};
    mma_bf16_16816(acc, a, b, acc);
  }
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
