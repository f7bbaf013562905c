// The fused Markov step kernel's parameters (one struct, by value) and its launch
// shape. Plain C++: the host fills both.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/markov/markov.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/packet.h"
#include "sparkdraft/ops/markov.h"

namespace sparkdraft::cuda::markov_detail {

// The kernel's own argument block, passed by value: the request rows' arrays are copied in
// from the batch's ops::MarkovRows (fused/launch.cu common_params), the one per-request view
// above the launch.
struct FusedStepParams {
  const bf16* w2;    // [width, K] this shard's rows
  const bf16* base;  // step j's plane: row r at base + r * base_row_stride
  int64_t base_row_stride;
  const bf16* embeds_in;  // [rows, K] step j's embeddings
  bf16* embeds_out;       // [rows, K] step j+1's (TP 1)
  const bf16* w1;         // [V, K]
  const float* temperatures;
  const int64_t* seeds;
  const int64_t* anchor_positions;
  const int64_t* cache_slots;
  const int32_t* lengths;  // n_r or null (contract.md 9.5): past it the row stores no cache
  bf16* cache;             // step j's plane: row index i at cache + i * cache_row_stride
  int64_t cache_row_stride;
  int cache_by_row;              // shard caches are indexed by row, the full cache by slot
  int64_t* tokens;               // TP 1: draft_tokens + j, row stride `steps`
  MarkovPacket* packets;         // vocab shard: [rows]; null at TP 1
  unsigned long long* row_best;  // [rows] this step's best (value, id) of each row so far,
                                 // packed by pack_candidate (0 by the anchor kernel)
  uint32_t* arrivals;            // [rows] this step's counters (zeroed by the anchor kernel)
  int* known;                    // [rows] this step's grid-wide lower bounds of the rows' best
                                 // z as order keys (-inf by the anchor kernel)
  const float* noise_bound;      // [kNoiseBuckets] noise_bound_table()
  ops::LogitTransform transform;
  int rows, width, steps, step, id_offset;
  int stages, reverse;
  int vec_io;  // base and cache rows allow 16-byte accesses at 8-entry steps
};

using StepKernel = void (*)(FusedStepParams);

// Per-step launch values shared by the TP 1 and the shard launches (the block is
// always kFusedThreads threads).
struct StepLaunch {
  StepKernel kernel;
  dim3 grid;
  int smem;
  int stages;
  bool pdl;
};

}  // namespace sparkdraft::cuda::markov_detail
