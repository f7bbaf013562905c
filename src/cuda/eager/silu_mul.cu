// SwiGLU activation, bit for bit cpu::silu_mul.
//
// What it computes: gu is [rows, 2I] (gate in [0, I), up in [I, 2I));
//   y[r][i] = bf16(silu_f32(f32(g)) * f32(u))
// with silu_f32 of core/math.h (the same bits on host and device).
// Where it rounds: once, the product, to bf16.
// Launch: one thread per output element, 256 threads per block.
#include "cuda/kernels.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/cuda/check.h"

#include "cuda/common/common.cuh"
#include "cuda/common/ptx.cuh"

namespace sparkdraft::cuda {
namespace {

constexpr int kSiluThreads = 256;

__global__ void __launch_bounds__(kSiluThreads)
    silu_mul_kernel(const bf16* gu, int64_t total, int inter, bf16* y) {
  pdl_enter();
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kSiluThreads + threadIdx.x;
  if (idx >= total) return;
  const int64_t r = idx / inter;
  const int64_t i = idx - r * inter;
  const bf16* row = gu + r * 2 * inter;
  const float g = to_f32(row[i]);
  const float u = to_f32(row[inter + i]);
  y[idx] = to_bf16(__fmul_rn(silu_f32(g), u));
}

}  // namespace

void silu_mul(const ops::SiluMulParams& p, cudaStream_t stream) {
  p.check();
  if (p.rows == 0) return;
  const int64_t total = static_cast<int64_t>(p.rows) * p.inter;
  const unsigned blocks = detail::blocks_for(total, kSiluThreads, "silu_mul");
  launch_kernel("silu_mul_kernel", silu_mul_kernel,
                LaunchShape{dim3(blocks), dim3(kSiluThreads), 0, stream}, p.gu, total, p.inter,
                p.y);
}

}  // namespace sparkdraft::cuda
