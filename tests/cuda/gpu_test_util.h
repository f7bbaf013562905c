// GPU tests skip, and say so, on a machine without a CUDA device (CI, laptops).
// Use SD_REQUIRE_GPU(); as the first statement of every GPU test.
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

}  // namespace sparkdraft::test

#define SD_REQUIRE_GPU()                        \
  do {                                          \
    if (!::sparkdraft::test::gpu_available()) { \
      GTEST_SKIP() << "no CUDA GPU: skipped";   \
    }                                           \
  } while (0)
