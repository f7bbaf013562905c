// The fused embed_norm's row (ops/front.h embed_norm): one block of
// kEmbedNormThreads per row. Every thread copies 16-byte chunks of the table row to
// x (and its widening to residual_f32) and into shared memory; then one warp walks
// the staged row in the canonical order of core/reduce.h (lane l owns chunks l,
// l + 32, ...; hidden is a multiple of 8) for the sum of squares; then every thread
// writes its chunks of y. (A warp per row left 7 rows to 7 warps: 17 us at H 4096.)
//
// Bits: x is an exact copy of the table row (embed), residual_f32 its exact widening
// (widen), y = bf16(apply_norm(x_i, r)) with r = rms_scale of the canonical sum of
// x_i^2 (fma per term from +0 in the lane's increasing order, then the butterfly):
// what cuda::rms_norm computes from x.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/common.cuh"
#include "cuda/common/vec.cuh"
#include "cuda/fused/backbone/tile.h"
#include "sparkdraft/ops/front.h"

namespace sparkdraft::cuda::backbone_detail {

__device__ __forceinline__ void embed_norm_row(const ops::EmbedNormParams& p, int64_t row,
                                               bf16* staged) {
  __shared__ float r_shared;
  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int H = p.hidden, chunks = H / kChunk;
  const bf16* src = p.table + p.ids[row] * H;
  bf16* x = p.x + row * H;
  float* wide = p.residual_f32 != nullptr ? p.residual_f32 + row * H : nullptr;
  bf16* y = p.y + row * H;

  for (int c = tid; c < chunks; c += kEmbedNormThreads) {
    const Chunk in = load_chunk(src + c * kChunk);
    store_chunk(x + c * kChunk, in);
    store_chunk(staged + c * kChunk, in);
    if (wide != nullptr) {
      float f[kChunk];
#pragma unroll
      for (int j = 0; j < kChunk; ++j) f[j] = to_f32(in.h[j]);
      float4* w4 = reinterpret_cast<float4*>(wide + c * kChunk);
      w4[0] = make_float4(f[0], f[1], f[2], f[3]);
      w4[1] = make_float4(f[4], f[5], f[6], f[7]);
    }
  }
  __syncthreads();
  if (warp == 0) {
    float partial = 0.0f;
    for (int c = lane; c < chunks; c += kWarp) {
      const Chunk in = load_chunk(staged + c * kChunk);
#pragma unroll
      for (int j = 0; j < kChunk; ++j) {
        const float f = to_f32(in.h[j]);
        partial = fma_f32(f, f, partial);
      }
    }
    const float ss = warp_canonical_combine(partial);
    if (lane == 0) r_shared = detail::rms_scale(ss, H, p.eps);
  }
  __syncthreads();
  const float r = r_shared;
  for (int c = tid; c < chunks; c += kEmbedNormThreads) {
    const Chunk in = load_chunk(staged + c * kChunk);
    Chunk w{};
    if (p.gain != NormGain::none) w = load_chunk(p.weight + c * kChunk);
    Chunk out;
#pragma unroll
    for (int j = 0; j < kChunk; ++j)
      out.h[j] = to_bf16(detail::apply_norm(to_f32(in.h[j]), r, w.h, p.gain, j));
    store_chunk(y + c * kChunk, out);
  }
}

}  // namespace sparkdraft::cuda::backbone_detail
