// The compute phase of the fused step (phase A, on the tensor cores): the bias of a
// ring tile's entries for every row. The tile's entries in 16-entry m-tiles times the
// rows in 8-row n-tiles; each warp takes (m-tile, n-tile) items (two at a time, their
// chains interleaved) and runs the chain of mma.sync.m16n8k16 over the rank
// (A = 16 w2 rows from the ring, B = 8 embeddings from shared memory, both by ldmatrix),
// so every bias is bf16(mma_chain(w2[v], e[r])) (core/mma.h), staged as bf16.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/mma.cuh"
#include "cuda/common/ptx.cuh"
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
//
// Fragments by ldmatrix only, each loaded once: a warp's two items share their m-tile
// (items w and w + 8 with kFusedWarps a multiple of kMTiles), so one ldmatrix_x4 of w2
// a k step serves both chains, and each item's B (8 embeddings) comes two k steps at a
// time from one ldmatrix_x4 (lane l: row l % 8 of the n-tile, k chunk l / 8; register i
// holds b[i % 2] of k step ks + i / 2 of the pair, as the two 32-bit loads it replaces).
// The addresses are a lane's base plus constants: a k step's ring chunk is
// fused_ring_chunk(v, 2 ks + lm_chunk) = 8 (ks / 4) + ((2 (ks % 4) + lm_chunk) ^ (v & mask)).
// Same operands, same chain order: the same bits as the per-register loads.
template <int K>
__device__ __forceinline__ void compute_bias(const FusedStepParams& p, const bf16* stage,
                                             const bf16* e_s, bf16* staging, int slot, int width,
                                             int n_tiles, int warp, int lane) {
  constexpr int kTileV = fused_tile_vocab(K);
  constexpr int kMTiles = kTileV / 16;
  constexpr int kEStride = fused_e_stride(K);
  constexpr int kSteps = K / 16;                  // k steps of the chain
  constexpr int kQuad = kSteps < 4 ? kSteps : 4;  // k steps whose ring chunks differ
  static_assert(kFusedWarps % kMTiles == 0, "a warp's items share their m-tile");
  static_assert(kSteps % kQuad == 0);
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
  // Item i's B base: row (i / kMTiles) * 8 + lane % 8 of the embeddings, k chunk lane / 8.
  auto b_base = [&](int item) {
    return smem_u32(e_s + ((item / kMTiles) * 8 + lane % 8) * kEStride + (lane / 8) * 8);
  };
  // Two items per pass when there are enough: their chains interleave.
  const int n_items = kMTiles * n_tiles;
  for (int item0 = warp; item0 < n_items; item0 += 2 * kFusedWarps) {
    const int item1 = item0 + kFusedWarps;
    const bool two = item1 < n_items;  // warp-uniform
    const int v = (item0 % kMTiles) * 16 + lm_row;
    constexpr int kMask = K / 8 >= 8 ? 7 : K / 8 - 1;
    const uint32_t a_row = smem_u32(stage + v * K);
    uint32_t a_off[kQuad];  // bytes of k step r's chunk, r < kQuad
#pragma unroll
    for (int r = 0; r < kQuad; ++r) a_off[r] = a_row + (((2 * r + lm_chunk) ^ (v & kMask)) * 16);
    // Without a second item the second chain runs on the first's operands and is
    // dropped: no branch around the .sync.aligned instructions of the chain.
    const uint32_t b0 = b_base(item0), b1 = two ? b_base(item1) : b0;
    float acc0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, acc1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 2
    for (int kq = 0; kq < kSteps / kQuad; ++kq) {
#pragma unroll
      for (int r = 0; r < kQuad; r += 2) {
        const int ks = kq * kQuad + r;  // this pair's first k step
        uint32_t bb0[4], bb1[4];
        if (r + 1 < kQuad) {
          ldmatrix_x4(bb0, b0 + ks * 32);
          ldmatrix_x4(bb1, b1 + ks * 32);
        } else {  // one k step left (K = 16)
          ldmatrix_x2(bb0, b0 + ks * 32);
          ldmatrix_x2(bb1, b1 + ks * 32);
        }
#pragma unroll
        for (int h = 0; h < 2 && r + h < kQuad; ++h) {
          uint32_t a[4];
          ldmatrix_x4(a, a_off[r + h] + kq * 128);
          const uint32_t b[2] = {bb0[2 * h], bb0[2 * h + 1]};
          const uint32_t c[2] = {bb1[2 * h], bb1[2 * h + 1]};
          mma_bf16_16816(acc0, a, b, acc0);
          mma_bf16_16816(acc1, a, c, acc1);
        }
      }
    }
    stage_bias(acc0, item0);
    if (two) stage_bias(acc1, item1);
  }
}

}  // namespace sparkdraft::cuda::markov_detail
