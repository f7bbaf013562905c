// 16-byte I/O: a chunk of 8 bf16 values in registers, the unit the backbone kernels
// (the fused fronts and embed_norm) load, convert and store.
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

}  // namespace sparkdraft::cuda
