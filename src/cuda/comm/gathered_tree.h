// The second half of the NCCL communicator's all_reduce_sum (cuda/nccl_comm.h),
// on its own so that the tests check it at every rank count on one GPU: per
// element i, the partials of ranks 0..ranks-1 gathered rank after rank
// (gathered[k * count + i] is rank k's), added in canonical_tree_sum's order
// (core/reduce.h), written to out[i]. One kernel on `stream`; no allocation, no
// host synchronization. gathered and out must not overlap.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace sparkdraft::cuda {

// The most ranks gathered_tree_sum takes.
inline constexpr int kMaxGatheredRanks = 64;

// Throws InvalidArgument unless 1 <= ranks <= kMaxGatheredRanks.
void gathered_tree_sum(const float* gathered, float* out, int ranks, size_t count,
                       cudaStream_t stream);

}  // namespace sparkdraft::cuda
