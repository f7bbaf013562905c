// The compute phase of the fused step (phase A, on the tensor cores): the bias of a
// ring tile's entries for every row. The tile's entries in 16-entry m-tiles times the
// rows in 8-row n-tiles; each warp takes (m-tile, n-tile) items (two at a time, their
// chains interleaved) and runs the chain of mma.sync.m16n8k16 over the rank
// (A = 16 w2 rows from the ring by ldmatrix, B = 8 embeddings from shared memory),
// so every bias is bf16(mma_chain(w2[v], e[r])) (core/mma.h), staged as bf16.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/mma.cuh"
#include "cuda/markov/fused/params.h"
#include "cuda/markov/tile.h"
#include "sparkdraft/core/bf16.h"

namespace sparkdraft::cuda::markov_detail {

// This step's embeddings to shared memory (bf16, rows padded to whole n-tiles with
// zeros, row stride fused_e_stride(K)); `e` is the layout's embedding region.
template <int K>
__device__ __forceinline__ void load_embeddings(const FusedStepParams& p, unsigned char* e,
                                                int n_tiles, int tid) {
  constexpr int kChunks = K / 8;
  constexpr int kEStride = fused_e_stride(K);
  for (int x = tid; x < n_tiles * 8 * kChunks; x += kFusedThreads) {
    const int r = x / kChunks, c = x % kChunks;
    const uint4 raw =
        r < p.rows ? reinterpret_cast<const uint4*>(p.embeds_in)[x] : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(e + (r * kEStride + c * 8) * 2) = raw;
  }
}

// The bias of the ring stage's entries for every row, staged at staged tile `slot`
// (row r's entries at staging[r * width + slot * tile_vocab ..]).
template <int K>
__device__ __forceinline__ void compute_bias(const FusedStepParams& p, const bf16* stage,
                                             const bf16* e_s, bf16* staging, int slot, int width,
                                             int n_tiles, int warp, int lane) {
  constexpr int kTileV = fused_tile_vocab(K);
  constexpr int kMTiles = kTileV / 16;
  constexpr int kEStride = fused_e_stride(K);
  const int g = lane / 4, t4 = lane % 4;
  const int lm_row = (lane / 8 % 2) * 8 + lane % 8, lm_chunk = lane / 16;  // ldmatrix roles
  // The accumulator of item (m-tile, n-tile) to the staging buffer as bf16: lane
  // (g, t4) holds entries g, g + 8 of the m-tile for rows 2 t4, 2 t4 + 1.
  auto stage_bias = [&](const float acc[4], int item) {
    const int r0 = (item / kMTiles) * 8 + 2 * t4, x0 = slot * kTileV + (item % kMTiles) * 16 + g;
    if (r0 < p.rows) {
      staging[r0 * width + x0] = to_bf16(acc[0]);
      staging[r0 * width + x0 + 8] = to_bf16(acc[2]);
    }
    if (r0 + 1 < p.rows) {
      staging[(r0 + 1) * width + x0] = to_bf16(acc[1]);
      staging[(r0 + 1) * width + x0 + 8] = to_bf16(acc[3]);
    }
  };
  // Two items per pass when there are enough: their chains interleave.
  const int n_items = kMTiles * n_tiles;
  for (int item0 = warp; item0 < n_items; item0 += 2 * kFusedWarps) {
    const int item1 = item0 + kFusedWarps;
    const bool two = item1 < n_items;  // warp-uniform
    const int v0 = (item0 % kMTiles) * 16 + lm_row, v1 = (item1 % kMTiles) * 16 + lm_row;
    const bf16* a0_row = stage + v0 * K;
    const bf16* a1_row = stage + v1 * K;
    const bf16* b0_row = e_s + ((item0 / kMTiles) * 8 + g) * kEStride + 2 * t4;
    const bf16* b1_row = e_s + ((item1 / kMTiles) * 8 + g) * kEStride + 2 * t4;
    float acc0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, acc1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 4
    for (int ks = 0; ks < K / 16; ++ks) {
      uint32_t a[4];
      ldmatrix_x4(a, a0_row + fused_ring_chunk<K>(v0, 2 * ks + lm_chunk) * 8);
      const uint32_t b[2] = {*reinterpret_cast<const uint32_t*>(b0_row + ks * 16),
                             *reinterpret_cast<const uint32_t*>(b0_row + ks * 16 + 8)};
      mma_bf16_16816(acc0, a, b, acc0);
      if (two) {
        uint32_t a1[4];
        ldmatrix_x4(a1, a1_row + fused_ring_chunk<K>(v1, 2 * ks + lm_chunk) * 8);
        const uint32_t b1[2] = {*reinterpret_cast<const uint32_t*>(b1_row + ks * 16),
                                *reinterpret_cast<const uint32_t*>(b1_row + ks * 16 + 8)};
        mma_bf16_16816(acc1, a1, b1, acc1);
      }
    }
    stage_bias(acc0, item0);
    if (two) stage_bias(acc1, item1);
  }
}

}  // namespace sparkdraft::cuda::markov_detail
