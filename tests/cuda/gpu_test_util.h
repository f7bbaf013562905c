// GPU tests skip, and say so, on a machine without a CUDA device (CI, laptops).
// Use SD_REQUIRE_GPU(); as the first statement of every GPU test, and
// SD_REQUIRE_GPUS(n); in a test that needs n GPUs (NCCL groups).
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

namespace sparkdraft::test {

inline bool gpu_available() {
  static const bool available = [] {
    int count = 0;
    const bool ok = cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
    (void)cudaGetLastError();  // clear the error a missing driver/device leaves behind
    return ok;
  }();
  return available;
}

// How many CUDA devices are usable (0 without a driver or a device).
inline int gpu_count() {
  static const int count = [] {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) n = 0;
    (void)cudaGetLastError();
    return n;
  }();
  return count;
}

}  // namespace sparkdraft::test

#define SD_REQUIRE_GPU()                        \
  do {                                          \
    if (!::sparkdraft::test::gpu_available()) { \
      GTEST_SKIP() << "no CUDA GPU: skipped";   \
    }                                           \
  } while (0)

#define SD_REQUIRE_GPUS(n)                                                                  \
  do {                                                                                      \
    if (::sparkdraft::test::gpu_count() < (n)) {                                            \
      GTEST_SKIP() << "needs " << (n) << " GPUs (found " << ::sparkdraft::test::gpu_count() \
                   << ")";                                                                  \
    }                                                                                       \
  } while (0)
