// RMSNorm of rows, bit for bit cpu::rms_norm.
//
// What it computes: per row of n values, ss = sum x_i^2 in the canonical order
// (fp32, fma per term), r = 1 / sqrt(ss / n + eps), y_i = bf16((x_i * r) * g_i).
// Where it rounds: only the output, once, to bf16; x_i is f32(bf16) or the fp32
// stream value, r and the products stay fp32.
// Launch: one warp per row (the canonical order is a warp's natural walk), 4 rows
// per 128-thread block. Each lane reads and writes only its own elements, which
// makes y == x safe.
#include "cuda/kernels.h"
#include "sparkdraft/cuda/check.h"

#include "cuda/common/common.cuh"
#include "cuda/common/ptx.cuh"

namespace sparkdraft::cuda {
namespace {

__device__ __forceinline__ float load_f32(const bf16* p) { return to_f32(*p); }
__device__ __forceinline__ float load_f32(const float* p) { return *p; }

template <class In>
__global__ void __launch_bounds__(detail::kRowThreads)
    rms_norm_kernel(const In* x, int64_t x_stride, int rows, int n, const bf16* weight,
                    NormGain gain, float eps, bf16* y, int64_t y_stride) {
  pdl_enter();
  const int lane = threadIdx.x % detail::kWarpSize;
  const int row = blockIdx.x * detail::kRowWarps + threadIdx.x / detail::kWarpSize;
  if (row >= rows) return;  // whole warps leave together
  const In* xr = x + row * x_stride;
  bf16* yr = y + row * y_stride;
  const float ss = detail::warp_sum_squares(lane, n, [&](int i) { return load_f32(xr + i); });
  const float r = detail::rms_scale(ss, n, eps);
  detail::for_lane_elements(lane, n, [&](int i) {
    yr[i] = to_bf16(detail::apply_norm(load_f32(xr + i), r, weight, gain, i));
  });
}

template <class In>
void launch_rms_norm(const ops::RmsNormParams& p, cudaStream_t stream) {
  const unsigned blocks = detail::blocks_for(p.rows, detail::kRowWarps, "rms_norm");
  launch_kernel("rms_norm_kernel", rms_norm_kernel<In>,
                LaunchShape{dim3(blocks), dim3(detail::kRowThreads), 0, stream},
                static_cast<const In*>(p.x), p.x_stride, p.rows, p.n, p.weight, p.gain, p.eps, p.y,
                p.y_stride);
}

}  // namespace

void rms_norm(const ops::RmsNormParams& p, cudaStream_t stream) {
  p.check();
  if (p.rows == 0) return;
  if (p.x_dtype == StreamDType::f32) {
    launch_rms_norm<float>(p, stream);
  } else {
    launch_rms_norm<bf16>(p, stream);
  }
}

}  // namespace sparkdraft::cuda
