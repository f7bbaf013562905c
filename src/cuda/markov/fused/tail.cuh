// The tail of the fused step: each block folds its best per row into the row's best
// with one 64-bit atomicMax (pack_candidate orders candidates as the sampling rule
// does), fences, and counts itself in on the row's arrival counter; the block that
// arrives last reads the row's best and writes the token and w1[token] as the next
// step's embedding, or, in a vocab shard, the row's packet.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/markov/fused/epilogue.cuh"
#include "cuda/markov/fused/params.h"
#include "cuda/markov/tile.h"
#include "sparkdraft/core/packet.h"

namespace sparkdraft::cuda::markov_detail {

// Copies w1[id] (rank bf16, rank % 8 == 0) to dst with one warp.
__device__ __forceinline__ void copy_embedding(const bf16* w1, int32_t id, int rank, bf16* dst,
                                               int lane) {
  const uint4* src = reinterpret_cast<const uint4*>(w1 + static_cast<int64_t>(id) * rank);
  uint4* out = reinterpret_cast<uint4*>(dst);
  for (int x = lane; x < rank / 8; x += kWarp) out[x] = src[x];
}

// After the block's vocab walk (its bests in `best`, every thread past a
// __syncthreads): the fold, the arrival count and, in the last block of a row, the
// row's token (or packet) and next embedding.
template <int K>
__device__ __forceinline__ void step_tail(const FusedStepParams& p, const unsigned long long* best,
                                          int* last, int tid, int warp, int lane) {
  // Block best per row folded into the row's best (one 64-bit atomicMax), then the
  // arrival count: the block that arrives last reads the rows' final bests.
  for (int r = tid; r < p.rows; r += kFusedThreads) {
    atomicMax(p.row_best + r, best[r]);
    __threadfence();
    const uint32_t arrived = atomicAdd(&p.arrivals[r], 1u);
    last[r] = arrived == gridDim.x - 1;
  }
  __syncthreads();

  // Rows this block arrived last at: the token (or the shard's packet) and the next
  // step's embedding, one warp per row.
  __threadfence();
  for (int r = warp; r < p.rows; r += kFusedWarps) {
    if (!last[r]) continue;
    const MarkovCandidate c = unpack_candidate(ld_volatile(p.row_best + r));
    if (p.packets != nullptr) {
      if (lane == 0) p.packets[r] = make_packet(c.value, c.id);
    } else {
      if (lane == 0) p.tokens[static_cast<int64_t>(r) * p.steps] = c.id;
      copy_embedding(p.w1, c.id, K, p.embeds_out + static_cast<int64_t>(r) * K, lane);
    }
  }
}

}  // namespace sparkdraft::cuda::markov_detail
