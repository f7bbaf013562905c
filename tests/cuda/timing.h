// Device time of one call for the GPU speed tests (no assertion on speed): the L2
// flushed before every call (a 256 MB memset, more than an H200's 50 MB of L2),
// one untimed call first (it warms up and sets kernel attributes), then `repeats`
// calls between two events each; the median in microseconds.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <vector>

#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"

namespace sparkdraft::test {

class FlushedTimer {
 public:
  FlushedTimer() : flush_(size_t{256} << 20) {
    SD_CUDA_CHECK(cudaEventCreate(&e0_));
    SD_CUDA_CHECK(cudaEventCreate(&e1_));
  }
  ~FlushedTimer() {
    cudaEventDestroy(e0_);
    cudaEventDestroy(e1_);
  }
  FlushedTimer(const FlushedTimer&) = delete;
  FlushedTimer& operator=(const FlushedTimer&) = delete;

  template <class Call>
  double median_us(cudaStream_t s, int repeats, Call&& call) {
    std::vector<float> ms;
    for (int rep = 0; rep <= repeats; ++rep) {
      SD_CUDA_CHECK(cudaMemsetAsync(flush_.data(), rep & 0xff, flush_.bytes(), s));
      SD_CUDA_CHECK(cudaEventRecord(e0_, s));
      call();
      SD_CUDA_CHECK(cudaEventRecord(e1_, s));
      SD_CUDA_CHECK(cudaEventSynchronize(e1_));
      float t = 0.0f;
      SD_CUDA_CHECK(cudaEventElapsedTime(&t, e0_, e1_));
      if (rep > 0) ms.push_back(t);
    }
    std::sort(ms.begin(), ms.end());
    const size_t n = ms.size();
    return 1e3 * (n % 2 == 1 ? ms[n / 2] : 0.5 * (ms[n / 2 - 1] + ms[n / 2]));
  }

 private:
  cuda::DeviceBuffer<unsigned char> flush_;
  cudaEvent_t e0_ = nullptr, e1_ = nullptr;
};

}  // namespace sparkdraft::test
