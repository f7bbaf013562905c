// The one launch path of the hand-written kernels (the shape FlashInfer's launchers
// share): parameters by value, grid, block, dynamic shared memory, stream and the
// programmatic-dependent-launch flag. With `pdl` the launch carries the
// programmatic-stream-serialization attribute: the kernel may start while the
// previous kernel of the stream finishes, and must call grid_dependency_wait()
// (common/ptx.cuh) before it touches anything that kernel writes. A failed launch
// throws DeviceError naming the kernel.
//
// A plain C++ header (cudaLaunchKernelEx is a host template of cuda_runtime.h):
// host code that holds a kernel pointer may launch through it too.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>

#include "sparkdraft/error.h"

namespace sparkdraft::cuda {

// The launchers' refusal: throws InvalidArgument("cuda::<op>: <what>") when `ok`
// is false (the GPU side of ops/require.h's message form).
inline void require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw InvalidArgument(std::string("cuda::") + op + ": " + what);
}

struct LaunchShape {
  dim3 grid;
  dim3 block;
  size_t smem = 0;  // dynamic shared memory, bytes
  cudaStream_t stream = nullptr;
  bool pdl = false;  // programmatic dependent launch
};

[[noreturn]] inline void throw_launch_error(const char* kernel, cudaError_t err) {
  throw DeviceError(std::string("CUDA launch of ") + kernel +
                    " failed: " + cudaGetErrorString(err));
}

// Launches `kernel` (named `name` in errors) with `args`, converted to its parameter types.
template <typename... Params, typename... Args>
void launch_kernel(const char* name, void (*kernel)(Params...), const LaunchShape& shape,
                   Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = shape.grid;
  cfg.blockDim = shape.block;
  cfg.dynamicSmemBytes = shape.smem;
  cfg.stream = shape.stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = shape.pdl ? 1 : 0;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  if (err != cudaSuccess) throw_launch_error(name, err);
}

}  // namespace sparkdraft::cuda
