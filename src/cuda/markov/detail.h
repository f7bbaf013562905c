// Pieces shared by the Markov sources on both sides of the compiler: the fused
// step's constants and shared-memory layout (cuda/markov/tile.h), the noise
// table, the argument checks, and the entry points markov/fused/launch.cu gives plan.cpp.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/common/launch.h"
#include "cuda/markov/markov.h"
#include "cuda/markov/tile.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda::markov_detail {

// noise_bound[b] = gumbel_noise(lowest u of bucket b) (clamped to the smallest u
// the sampler draws), computed with core/sampling.h on the host.
std::vector<float> noise_bound_table();

using cuda::require;  // common/launch.h

// Device limits the fused launch is sized with.
struct DeviceLimits {
  int sm_count = 0;
  int max_smem_block = 0;  // opt-in dynamic shared memory per block
  int smem_per_sm = 0;
};
// The current device's limits; without a device, those of an H100/H200.
DeviceLimits device_limits();

// fused_markov_refusal with given shared-memory limits (a workspace's).
std::string fused_refusal(const MarkovPlanInput& in, int max_smem_block, int smem_per_sm);

// markov/fused/launch.cu: raises the dynamic shared-memory limit of the fused step kernel of
// `rank` to `max_smem` and returns how many 256-thread blocks fit on an SM by
// registers.
int prepare_fused_kernels(int rank, int max_smem);

}  // namespace sparkdraft::cuda::markov_detail
