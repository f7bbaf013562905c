// The one launch path of the hand-written kernels (the shape FlashInfer's launchers
// share): parameters by value, grid, block, dynamic shared memory, stream and the
// programmatic-dependent-launch flag. With `pdl` the launch carries the
// programmatic-stream-serialization attribute: the kernel may start while the
// previous kernel of the stream finishes, and must call grid_dependency_wait()
// (common/ptx.cuh) before it touches anything that kernel writes. A cooperative launch
// carries the cooperative attribute instead (and never PDL). A failed launch throws
// DeviceError naming the kernel.
//
// A plain C++ header (cudaLaunchKernelEx is a host template of cuda_runtime.h):
// host code that holds a kernel pointer may launch through it too.
//
// While a LaunchLog is open on the calling thread, every launch through here is also
// appended to it (name, kernel, shape): the step captures its graphs under one, so the
// plan names every kernel that runs, and the capture checks the log against the
// graph's kernel nodes (cuda/common/graph.h).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <string>
#include <utility>
#include <vector>

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
  // A cooperative launch: every CTA of the grid resident at once, or the launch fails
  // (kernels whose CTAs wait for each other; never with pdl).
  bool cooperative = false;
  // Thread block clusters (CTAs per cluster along each grid dimension; 1 x 1 x 1: none).
  dim3 cluster{1, 1, 1};
};

// One launch as the log records it.
struct LaunchRecord {
  std::string name;              // the launcher's name for the kernel
  const void* kernel = nullptr;  // the kernel (its host stub, as graph nodes hold it)
  LaunchShape shape;             // grid, block, dynamic shared memory, pdl (stream: as given)
};

// The launches of the calling thread while it is open (logs nest: the innermost one
// records).
class LaunchLog {
 public:
  LaunchLog() : outer_(current()) { current() = this; }
  ~LaunchLog() { current() = outer_; }
  LaunchLog(const LaunchLog&) = delete;
  LaunchLog& operator=(const LaunchLog&) = delete;

  std::vector<LaunchRecord> records;

  static LaunchLog*& current() {
    thread_local LaunchLog* log = nullptr;
    return log;
  }

 private:
  LaunchLog* outer_;
};

// While a PdlScope that is on is open on the calling thread, every launch through here
// carries programmatic dependent launch (the draft step opens one around its kernels with
// CudaDraftOptions::step_pdl:
// every library kernel begins with pdl_enter(), common/ptx.cuh, which tools/check_pdl.py
// holds them to).
class PdlScope {
 public:
  explicit PdlScope(bool on) : outer_(active()) { active() = outer_ || on; }
  ~PdlScope() { active() = outer_; }
  PdlScope(const PdlScope&) = delete;
  PdlScope& operator=(const PdlScope&) = delete;

  static bool& active() {
    thread_local bool on = false;
    return on;
  }

 private:
  bool outer_;
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
  cudaLaunchAttribute attr[2];
  unsigned n = 0;
  if (shape.cooperative) {
    attr[n].id = cudaLaunchAttributeCooperative;
    attr[n++].val.cooperative = 1;
  } else if (shape.pdl || PdlScope::active()) {
    attr[n].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    attr[n++].val.programmaticStreamSerializationAllowed = 1;
  }
  const bool pdl = !shape.cooperative && n == 1;
  if (shape.cluster.x * shape.cluster.y * shape.cluster.z > 1) {
    attr[n].id = cudaLaunchAttributeClusterDimension;
    attr[n].val.clusterDim.x = shape.cluster.x;
    attr[n].val.clusterDim.y = shape.cluster.y;
    attr[n++].val.clusterDim.z = shape.cluster.z;
  }
  cfg.attrs = attr;
  cfg.numAttrs = n;
  const cudaError_t err = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  if (err != cudaSuccess) throw_launch_error(name, err);
  if (LaunchLog* log = LaunchLog::current()) {
    LaunchShape recorded = shape;
    recorded.pdl = pdl;
    log->records.push_back({name, reinterpret_cast<const void*>(kernel), recorded});
  }
}

}  // namespace sparkdraft::cuda
