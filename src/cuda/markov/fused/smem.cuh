// The fused step kernel's view of its dynamic shared memory: the pointers of
// fused_smem_layout (tile.h), carved once at the start of the kernel.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/markov/tile.h"
#include "sparkdraft/core/bf16.h"

namespace sparkdraft::cuda::markov_detail {

// A survivor waiting in the epilogue's queue for its exact score: its row, id,
// logit and uniform.
struct Survivor {
  int row, id;
  float l, u;
};
static_assert(sizeof(Survivor) == kSurvivorBytes);

struct FusedSmem {
  bf16* ring;                // the w2 tiles (ring.cuh)
  unsigned char* e;          // this step's embeddings, bytes (compute.cuh)
  bf16* staging;             // staged bias
  unsigned long long* best;  // block's best per row, packed
  int64_t* cache_row;        // cache row index, -1 = no store
  float* temp;               // temperature
  uint32_t* seed;            // step seed
  int* last;                 // this block reduces the row
  int* known_s;              // ordered key of a lower bound of the row's best z
  // The noise of any u in bucket b lies in [noise_b[b + 1], noise_b[b]] (the entry
  // past the last bucket holds kNoiseFloor).
  float* noise_b;
  Survivor* queue;  // this warp's survivor queue
};

__device__ __forceinline__ FusedSmem carve_smem(unsigned char* smem, const FusedSmemLayout& lay) {
  FusedSmem s;
  s.ring = reinterpret_cast<bf16*>(smem + lay.ring);
  s.e = smem + lay.e;
  s.staging = reinterpret_cast<bf16*>(smem + lay.staging);
  s.best = reinterpret_cast<unsigned long long*>(smem + lay.best);
  s.cache_row = reinterpret_cast<int64_t*>(smem + lay.cache_row);
  s.temp = reinterpret_cast<float*>(smem + lay.temp);
  s.seed = reinterpret_cast<uint32_t*>(smem + lay.seed);
  s.last = reinterpret_cast<int*>(smem + lay.last);
  s.known_s = reinterpret_cast<int*>(smem + lay.known);
  s.noise_b = reinterpret_cast<float*>(smem + lay.noise);
  s.queue = reinterpret_cast<Survivor*>(smem + lay.queue) + (threadIdx.x / kWarp) * kQueue;
  return s;
}

}  // namespace sparkdraft::cuda::markov_detail
