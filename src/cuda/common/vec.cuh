// 16-byte I/O: a chunk of 8 bf16 values in registers, the unit the backbone kernels
// (the fused fronts, embed_norm and the residual boundary) load, convert and store.
#pragma once

#include <cuda_runtime.h>

#include "sparkdraft/core/bf16.h"

namespace sparkdraft::cuda {

union Chunk {
  uint4 raw;
  bf16 h[8];
};

__device__ __forceinline__ Chunk load_chunk(const bf16* p) {
  Chunk c;
  c.raw = *reinterpret_cast<const uint4*>(p);
  return c;
}

__device__ __forceinline__ void store_chunk(bf16* p, const Chunk& c) {
  *reinterpret_cast<uint4*>(p) = c.raw;
}

// Elements [0, n) of a chunk at p (n <= 8; the rest +0): one 16-byte load when
// `vec` (p 16-byte aligned) and the chunk is whole, else element by element.
__device__ __forceinline__ Chunk load_chunk(const bf16* p, int n, bool vec) {
  if (vec && n == 8) return load_chunk(p);
  Chunk c;
#pragma unroll
  for (int j = 0; j < 8; ++j) c.h[j] = j < n ? p[j] : bf16{0};
  return c;
}

__device__ __forceinline__ void store_chunk(bf16* p, const Chunk& c, int n, bool vec) {
  if (vec && n == 8) {
    store_chunk(p, c);
    return;
  }
#pragma unroll
  for (int j = 0; j < 8; ++j)
    if (j < n) p[j] = c.h[j];
}

// The same for 8 fp32 values (two 16-byte accesses when whole and aligned).
__device__ __forceinline__ void load_f32x8(const float* p, int n, bool vec, float (&v)[8]) {
  if (vec && n == 8) {
    const float4 a = reinterpret_cast<const float4*>(p)[0],
                 b = reinterpret_cast<const float4*>(p)[1];
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    return;
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = j < n ? p[j] : 0.0f;
}

__device__ __forceinline__ void store_f32x8(float* p, const float (&v)[8], int n, bool vec) {
  if (vec && n == 8) {
    reinterpret_cast<float4*>(p)[0] = make_float4(v[0], v[1], v[2], v[3]);
    reinterpret_cast<float4*>(p)[1] = make_float4(v[4], v[5], v[6], v[7]);
    return;
  }
#pragma unroll
  for (int j = 0; j < 8; ++j)
    if (j < n) p[j] = v[j];
}

}  // namespace sparkdraft::cuda
