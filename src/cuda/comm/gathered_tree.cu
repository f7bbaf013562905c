// The tree over gathered partials (gathered_tree.h): one thread per element, the
// ranks' partials read into registers (the rank counts 1, 2, 4 and 8 are
// compiled with a fixed count, so the tree unrolls), summed by canonical_tree_sum.
#include "cuda/comm/gathered_tree.h"

#include <algorithm>
#include <cstdint>
#include <string>

#include "cuda/common/launch.h"
#include "cuda/common/ptx.cuh"
#include "sparkdraft/core/reduce.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {
namespace {

// kRanks > 0 fixes the rank count; kRanks == 0 takes `ranks` at run time.
template <int kRanks>
__global__ void gathered_tree_kernel(const float* __restrict__ gathered, float* __restrict__ out,
                                     int ranks, int64_t count) {
  pdl_enter();
  constexpr int kSlots = kRanks > 0 ? kRanks : kMaxGatheredRanks;
  const int n = kRanks > 0 ? kRanks : ranks;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float p[kSlots];
#pragma unroll
    for (int k = 0; k < kSlots; ++k)
      if (k < n) p[k] = gathered[k * count + i];
    out[i] = canonical_tree_sum(p, n);
  }
}

}  // namespace

void gathered_tree_sum(const float* gathered, float* out, int ranks, size_t count,
                       cudaStream_t stream) {
  if (ranks < 1 || ranks > kMaxGatheredRanks)
    throw InvalidArgument("gathered_tree_sum: " + std::to_string(ranks) + " ranks, need 1 to " +
                          std::to_string(kMaxGatheredRanks));
  if (count == 0) return;
  constexpr int kThreads = 256;
  const int64_t n = static_cast<int64_t>(count);
  const int grid = static_cast<int>(std::min<int64_t>((n + kThreads - 1) / kThreads, 4096));
  // The unrolled trees for 1, 2, 4 and 8 ranks, the general one otherwise.
  const auto kernel = ranks == 1   ? gathered_tree_kernel<1>
                      : ranks == 2 ? gathered_tree_kernel<2>
                      : ranks == 4 ? gathered_tree_kernel<4>
                      : ranks == 8 ? gathered_tree_kernel<8>
                                   : gathered_tree_kernel<0>;
  launch_kernel("gathered_tree_kernel", kernel, LaunchShape{dim3(grid), dim3(kThreads), 0, stream},
                gathered, out, ranks, n);
}

}  // namespace sparkdraft::cuda
