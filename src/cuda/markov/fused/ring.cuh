// The load ring (mainloop) of the fused step: block b walks a contiguous run of
// vocab tiles (fused_tile_vocab(K) entries, all K columns of w2), streamed into a
// shared-memory ring of p.stages stages with 16-byte cp.async, so w2 is read once
// per step for all rows. The ring stores each row's 16-byte chunks XOR-swizzled by
// the row (fused_ring_chunk: conflict-free ldmatrix in compute.cuh). Odd steps
// (p.reverse) walk the tiles backwards, so the first tiles a block reads are the
// ones it read last (in L2).
//
// Per iteration `it`: ring_wait (this thread's copies of tile `it` landed, then
// everyone's, and stage it - 1 is free again), then ring_issue(it + stages - 1).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/markov/fused/params.h"
#include "cuda/markov/tile.h"
#include "sparkdraft/core/bf16.h"

namespace sparkdraft::cuda::markov_detail {

// This block's run of vocab tiles: [begin, end), `count` of them.
struct TileWalk {
  int begin, end, count;
};

template <int K>
__device__ __forceinline__ TileWalk tile_walk(const FusedStepParams& p) {
  constexpr int kTileV = fused_tile_vocab(K);
  const int total_tiles = (p.width + kTileV - 1) / kTileV;
  const int t_begin = static_cast<int>(static_cast<int64_t>(blockIdx.x) * total_tiles / gridDim.x);
  const int t_end =
      static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * total_tiles / gridDim.x);
  return TileWalk{t_begin, t_end, t_end - t_begin};
}

// The tile of iteration `it`.
__device__ __forceinline__ int tile_at(const FusedStepParams& p, const TileWalk& w, int it) {
  return p.reverse ? w.end - 1 - it : w.begin + it;
}

// Ring stage `stage` (iteration it uses stage it % p.stages; the kernel counts the
// stages with next_stage instead of dividing).
template <int K>
__device__ __forceinline__ const bf16* ring_stage(const bf16* ring, int stage) {
  return ring + stage * (fused_tile_vocab(K) * K);
}
__device__ __forceinline__ int next_stage(const FusedStepParams& p, int stage) {
  return stage + 1 == p.stages ? 0 : stage + 1;
}

// Queues tile `it` into ring stage `stage` (it % p.stages; chunk c of row v at
// fused_ring_chunk(v, c));
// always commits (maybe an empty group) so every thread counts the same groups. Thread
// tid copies chunk tid % kChunks of rows tid / kChunks + j kRows (kRows = 256 / kChunks
// rows a pass): its source and destination advance by constants, and only the swizzle
// of rows past the first pass's eight may change with j. Rows past the vocabulary are
// zero-filled (a source of 0 bytes).
template <int K>
__device__ __forceinline__ void ring_issue(const FusedStepParams& p, const TileWalk& w, bf16* ring,
                                           int it, int stage, int tid) {
  constexpr int kTileV = fused_tile_vocab(K);
  constexpr int kChunks = K / 8;
  constexpr int kTileElems = kTileV * K;
  constexpr int kTileChunks = kTileElems / 8;
  static_assert(kFusedThreads % kChunks == 0, "a pass covers whole rows");
  constexpr int kRows = kFusedThreads / kChunks;
  constexpr int kPasses = (kTileChunks + kFusedThreads - 1) / kFusedThreads;
  if (it < w.count) {
    const int t = tile_at(p, w, it);
    const int v0 = tid / kChunks, c = tid % kChunks;
    const uint32_t dst = smem_u32(ring + stage * kTileElems + v0 * K);
    const bf16* src = p.w2 + static_cast<int64_t>(t) * kTileElems + tid * 8;
    const int rows_left = p.width - t * kTileV - v0;  // pass j copies a row iff j kRows < this
#pragma unroll
    for (int j = 0; j < kPasses; ++j) {
      if (kTileChunks % kFusedThreads != 0 && tid + j * kFusedThreads >= kTileChunks) break;
      const bool ok = j * kRows < rows_left;
      const int chunk = fused_ring_chunk<K>(v0 + j * kRows, c);
      cp_async_16(dst + (j * kRows * K + chunk * 8) * 2, ok ? src + j * kFusedThreads * 8 : p.w2,
                  ok ? 16 : 0);
    }
  }
  cp_async_commit();
}

// The ring's first stages - 1 tiles (only static data: may run before
// grid_dependency_wait, overlapping the previous kernel).
template <int K>
__device__ __forceinline__ void ring_prologue(const FusedStepParams& p, const TileWalk& w,
                                              bf16* ring, int tid) {
  for (int s = 0; s < p.stages - 1; ++s) ring_issue<K>(p, w, ring, s, s, tid);
}

// This thread's copies of the oldest pending tile landed, then everyone's; the stage
// read in the previous iteration is free again.
__device__ __forceinline__ void ring_wait(const FusedStepParams& p) {
  cp_async_wait(p.stages - 2);
  __syncthreads();
}

}  // namespace sparkdraft::cuda::markov_detail
