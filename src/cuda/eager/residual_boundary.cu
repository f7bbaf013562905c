// One residual boundary over rows of H, bit for bit cpu::residual_boundary.
//
// What it computes, per row:
//   b  = post_norm ? bf16((f32(branch_i) * r_b) * g_i) : f32(branch_i)
//   s' = alpha_i * s_i + beta_i * b_i  (two fp32 products, one add, no fma)
//        or s_i + b_i for the plain residual (alpha == beta == null)
//   stream_i = s' (fp32 stream) or bf16(s') (bf16 stream)
//   next_i = bf16((bf16(s')_i * r_n) * g_i), r_n from the canonical sum of bf16(s')^2
// Where it rounds: the normed branch (bf16), the bf16 stream, bf16(s') as the
// pre-norm's input, and next. Both norms are cpu::rms_norm's steps (common.cuh).
// Launch: one warp per row, 4 rows per block. Pass 1 sums the branch's squares,
// pass 2 updates the stream and sums bf16(s')^2 in the same canonical walk, pass 3
// writes next from the stream it just wrote. Each lane touches only its own
// elements, so the in-place stream update is safe.
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/kernels.h"

#include "cuda/eager/common.cuh"

namespace sparkdraft::cuda {
namespace {

__device__ __forceinline__ float load_stream(const float* p) { return *p; }
__device__ __forceinline__ float load_stream(const bf16* p) { return to_f32(*p); }
__device__ __forceinline__ void store_stream(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_stream(bf16* p, float v) { *p = to_bf16(v); }

template <class S>
__global__ void __launch_bounds__(detail::kRowThreads)
    residual_boundary_kernel(ops::BoundaryParams p, const bf16* branch, S* residual, bf16* next) {
  const int lane = threadIdx.x % detail::kWarpSize;
  const int row = blockIdx.x * detail::kRowWarps + threadIdx.x / detail::kWarpSize;
  if (row >= p.rows) return;
  const int h = p.hidden;
  const bf16* br = branch + static_cast<int64_t>(row) * h;
  S* sr = residual + static_cast<int64_t>(row) * h;
  bf16* nr = next + static_cast<int64_t>(row) * h;

  float r_branch = 0.0f;
  if (p.post_norm)
    r_branch = detail::rms_scale(
        detail::warp_sum_squares(lane, h, [&](int i) { return to_f32(br[i]); }), h, p.eps);

  // The term is called once per element, in this lane's canonical order.
  const float partial = canonical_lane_partial(lane, h, [&](int i, float& a, float& b) {
    float bi = to_f32(br[i]);
    if (p.post_norm) bi = round_bf16(detail::apply_norm(bi, r_branch, p.post_weight, p.gain, i));
    const float si = load_stream(sr + i);
    const float s_new = p.alpha != nullptr
                            ? __fadd_rn(__fmul_rn(p.alpha[i], si), __fmul_rn(p.beta[i], bi))
                            : __fadd_rn(si, bi);
    store_stream(sr + i, s_new);
    a = round_bf16(s_new);
    b = a;
  });
  const float r_next = detail::rms_scale(warp_canonical_combine(partial), h, p.eps);

  detail::for_lane_elements(lane, h, [&](int i) {
    const float v = round_bf16(load_stream(sr + i));
    nr[i] = to_bf16(detail::apply_norm(v, r_next, p.pre_weight, p.gain, i));
  });
}

}  // namespace

void residual_boundary(const ops::BoundaryParams& p, const bf16* branch, void* residual, bf16* next,
                       cudaStream_t stream) {
  p.check();
  if (p.rows == 0) return;
  detail::require(branch != nullptr && residual != nullptr && next != nullptr, "residual_boundary",
                  "branch, residual and next must not be null");
  const unsigned blocks = detail::blocks_for(p.rows, detail::kRowWarps, "residual_boundary");
  if (p.residual_dtype == StreamDType::f32)
    residual_boundary_kernel<float><<<blocks, detail::kRowThreads, 0, stream>>>(
        p, branch, static_cast<float*>(residual), next);
  else
    residual_boundary_kernel<bf16>
        <<<blocks, detail::kRowThreads, 0, stream>>>(p, branch, static_cast<bf16*>(residual), next);
  SD_CHECK_LAUNCH();
}

}  // namespace sparkdraft::cuda
