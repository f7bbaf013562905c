// The single-GPU loopback communicator (cuda/comm/loopback.h): every TP rank's buffer
// is on this device, so the all-gather is a device copy per rank and the
// all-reduce one kernel that completes the tree of core/reduce.h per element.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/comm/loopback.h"
#include "cuda/common/launch.h"
#include "cuda/common/ptx.cuh"
#include "sparkdraft/core/reduce.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {
namespace {

struct RankBuffers {
  float* data[LoopbackComm::kMaxRanks];
};

// Grid-stride over the elements; each thread reads element i of every rank's
// partials, sums them in the canonical tree and writes the sum back to every rank
// (each element is read and written by one thread only, so in place is safe).
__global__ void tree_all_reduce_kernel(RankBuffers buffers, int ranks, int64_t count) {
  pdl_enter();
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < count;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    float p[LoopbackComm::kMaxRanks];
    for (int k = 0; k < ranks; ++k) p[k] = buffers.data[k][i];
    const float sum = canonical_tree_sum(p, ranks);
    for (int k = 0; k < ranks; ++k) buffers.data[k][i] = sum;
  }
}

}  // namespace

LoopbackComm::LoopbackComm(int tp_size) {
  if (tp_size < 1)
    throw InvalidArgument("LoopbackComm: tp_size must be >= 1, got " + std::to_string(tp_size));
  local_.resize(static_cast<size_t>(tp_size));
  for (int r = 0; r < tp_size; ++r) local_[static_cast<size_t>(r)] = r;
}

void LoopbackComm::all_gather(const void* const* send, void* recv, size_t bytes, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  for (int r = 0; r < tp_size(); ++r)
    SD_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(recv) + static_cast<size_t>(r) * bytes,
                                  send[r], bytes, cudaMemcpyDeviceToDevice, s));
}

void LoopbackComm::all_reduce_sum(float* const* data, size_t count, void* stream) {
  const int ranks = tp_size();
  if (ranks > kMaxRanks)
    throw InvalidArgument("LoopbackComm::all_reduce_sum: " + std::to_string(ranks) +
                          " ranks, at most " + std::to_string(kMaxRanks));
  if (count == 0) return;
  RankBuffers buffers{};
  for (int r = 0; r < ranks; ++r) buffers.data[r] = data[r];
  constexpr int kThreads = 256;
  const int64_t blocks = (static_cast<int64_t>(count) + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(blocks < 4096 ? blocks : 4096);
  launch_kernel("tree_all_reduce_kernel", tree_all_reduce_kernel,
                LaunchShape{dim3(grid), dim3(kThreads), 0, static_cast<cudaStream_t>(stream)},
                buffers, ranks, static_cast<int64_t>(count));
}

}  // namespace sparkdraft::cuda
