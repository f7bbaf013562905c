// The layer GEMM of the CUDA backend: y[M, N] = bf16( x[M, K] * w[N, K]^T ),
// bf16 inputs, fp32 accumulation (CUBLAS_COMPUTE_32F), bf16 output, through
// cuBLASLt (the GPU side of cpu::gemm, within its bf16-ulp budget).
//
// Pinned (SPEC section 3): the first call of a GEMM family (N, K, x_stride, y_stride
// and the 16-byte alignment class of the pointers) asks the heuristic once (at
// 64 rows), keeps the first algorithm whose split-K count is 1 and reduction
// scheme is NONE (no atomics, no separate reduction pass), and every call of the
// family, whatever its M, runs exactly that algorithm with the runner's own
// workspace (checked per M with cublasLtMatmulAlgoCheck). So the same call on the
// same inputs gives the same bits, and a row's bits do not depend on how many
// rows share the call (batch invariance; tests/cuda/test_gemm.cu checks it).
//
// CUDA graphs: `run` is capturable once its shape has been run eagerly (the
// warm-up call chooses the algorithm and loads its kernels). A shape seen for the
// first time while `stream` is capturing is refused with InvalidArgument.
//
// One runner serves one stream at a time (its workspace is shared by its calls);
// it is not thread-safe.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "sparkdraft/core/bf16.h"

namespace sparkdraft::cuda {

class GemmRunner {
 public:
  static constexpr size_t kDefaultWorkspaceBytes = size_t{32} << 20;  // cuBLAS's Hopper advice

  // Creates the cuBLASLt handle and allocates the workspace on the current device.
  explicit GemmRunner(size_t workspace_bytes = kDefaultWorkspaceBytes);
  ~GemmRunner();
  GemmRunner(const GemmRunner&) = delete;
  GemmRunner& operator=(const GemmRunner&) = delete;

  // y[m][n] = bf16( sum_k f32(x[m][k]) * f32(w[n][k]) ) on `stream`.
  // x: [M, x_stride] (x_stride >= K), w: [N, K] contiguous, y: [M, y_stride]
  // (y_stride >= N). M == 0 does nothing. Throws InvalidArgument on bad sizes or
  // null pointers, DeviceError when cuBLASLt has no deterministic algorithm or fails.
  void run(const bf16* x, int64_t x_stride, const bf16* w, int M, int N, int K, bf16* y,
           int64_t y_stride, cudaStream_t stream);

  // Shapes with a pinned algorithm so far.
  size_t pinned_shapes() const;
  size_t workspace_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace sparkdraft::cuda
