// One family of check macros for CUDA calls (NCCL's joins them with
// the NCCL communicator, which does not exist yet): a failing call
// throws DeviceError naming the call, the file:line and the library's message.
// Every kernel launch is followed by SD_CHECK_LAUNCH().
#pragma once

#include <cuda_runtime.h>

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
