// One family of check macros for CUDA and NCCL calls: a failing call throws
// DeviceError naming the call, the file:line and the library's message.
// The library launches every kernel through src/cuda/common/launch.h (which checks
// the launch); SD_CHECK_LAUNCH() checks a <<<>>> launch (tests, benchmarks). SD_NCCL_CHECK exists
// in builds with NCCL (SPARKDRAFT_HAVE_NCCL); it is for the calls that never return ncclInProgress
// (the NCCL communicator, cuda/nccl_comm.h, waits on a non-blocking communicator's calls itself,
// through the same throw_device_error).
#pragma once

#include <cuda_runtime.h>
#if defined(SPARKDRAFT_HAVE_NCCL)
#include <nccl.h>
#endif

#include <sstream>
#include <string>

#include "sparkdraft/error.h"

namespace sparkdraft::cuda {

[[noreturn]] inline void throw_device_error(const char* lib, const char* call, const char* file,
                                            int line, const std::string& what) {
  std::ostringstream os;
  os << lib << " call failed: " << call << " at " << file << ":" << line << ": " << what;
  throw DeviceError(os.str());
}

}  // namespace sparkdraft::cuda

#define SD_CUDA_CHECK(call)                                                     \
  do {                                                                          \
    cudaError_t sd_err_ = (call);                                               \
    if (sd_err_ != cudaSuccess)                                                 \
      ::sparkdraft::cuda::throw_device_error("CUDA", #call, __FILE__, __LINE__, \
                                             cudaGetErrorString(sd_err_));      \
  } while (0)

// After a kernel launch: launch-configuration errors surface here.
#define SD_CHECK_LAUNCH() SD_CUDA_CHECK(cudaGetLastError())

#if defined(SPARKDRAFT_HAVE_NCCL)
#define SD_NCCL_CHECK(call)                                                     \
  do {                                                                          \
    ncclResult_t sd_nccl_err_ = (call);                                         \
    if (sd_nccl_err_ != ncclSuccess)                                            \
      ::sparkdraft::cuda::throw_device_error("NCCL", #call, __FILE__, __LINE__, \
                                             ncclGetErrorString(sd_nccl_err_)); \
  } while (0)
#endif
