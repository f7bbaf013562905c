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
// Launch: one block of kThreads per row; the row's branch and stream are staged
// in shared memory as fp32 (exact) by all threads with coalesced loads, so the
// memory latency is paid once, in parallel. The two canonical sums of squares are
// each one warp's walk over shared memory (core/reduce.h's 32 lane chains and the
// butterfly, as every norm); the elementwise steps are spread over all threads.
// Each element is read and written by one thread per phase, with a barrier between
// phases, so the in-place stream update is safe.
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/kernels.h"

#include "cuda/eager/common.cuh"

namespace sparkdraft::cuda {
namespace {

__device__ __forceinline__ float load_stream(const float* p) { return *p; }
__device__ __forceinline__ float load_stream(const bf16* p) { return to_f32(*p); }
__device__ __forceinline__ void store_stream(float* p, float v) { *p = v; }
__device__ __forceinline__ void store_stream(bf16* p, float v) { *p = to_bf16(v); }

constexpr int kThreads = 256;
constexpr size_t kSmemPerElement = 2 * sizeof(float);  // the stream and the branch, fp32

template <class S>
__global__ void __launch_bounds__(kThreads)
    residual_boundary_kernel(ops::BoundaryParams p, const bf16* branch, S* residual, bf16* next) {
  extern __shared__ float staged[];
  __shared__ float r_branch_s, r_next_s;
  const int tid = threadIdx.x, lane = tid % detail::kWarpSize, warp = tid / detail::kWarpSize;
  const int row = blockIdx.x, h = p.hidden;
  const bf16* br = branch + static_cast<int64_t>(row) * h;
  S* sr = residual + static_cast<int64_t>(row) * h;
  bf16* nr = next + static_cast<int64_t>(row) * h;
  float* sv = staged;      // the stream; then bf16(s') as fp32
  float* bv = staged + h;  // the branch as fp32

  for (int i = tid; i < h; i += kThreads) {
    bv[i] = to_f32(br[i]);
    sv[i] = load_stream(sr + i);
  }
  __syncthreads();

  float r_branch = 0.0f;
  if (p.post_norm) {
    if (warp == 0) {
      const float ss = detail::warp_sum_squares(lane, h, [&](int i) { return bv[i]; });
      if (lane == 0) r_branch_s = detail::rms_scale(ss, h, p.eps);
    }
    __syncthreads();
    r_branch = r_branch_s;
  }

  for (int i = tid; i < h; i += kThreads) {
    float bi = bv[i];
    if (p.post_norm) bi = round_bf16(detail::apply_norm(bi, r_branch, p.post_weight, p.gain, i));
    const float si = sv[i];
    const float s_new = p.alpha != nullptr
                            ? __fadd_rn(__fmul_rn(p.alpha[i], si), __fmul_rn(p.beta[i], bi))
                            : __fadd_rn(si, bi);
    store_stream(sr + i, s_new);
    sv[i] = round_bf16(s_new);  // what the next pre-norm reads, either stream dtype
  }
  __syncthreads();

  if (warp == 0) {
    const float ss = detail::warp_sum_squares(lane, h, [&](int i) { return sv[i]; });
    if (lane == 0) r_next_s = detail::rms_scale(ss, h, p.eps);
  }
  __syncthreads();
  const float r_next = r_next_s;
  for (int i = tid; i < h; i += kThreads)
    nr[i] = to_bf16(detail::apply_norm(sv[i], r_next, p.pre_weight, p.gain, i));
}

template <class S>
void launch_boundary(const ops::BoundaryParams& p, const bf16* branch, S* residual, bf16* next,
                     cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(p.hidden) * kSmemPerElement;
  if (smem > 48 * 1024)
    SD_CUDA_CHECK(cudaFuncSetAttribute(residual_boundary_kernel<S>,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  residual_boundary_kernel<S>
      <<<static_cast<unsigned>(p.rows), kThreads, smem, stream>>>(p, branch, residual, next);
  SD_CHECK_LAUNCH();
}

}  // namespace

void residual_boundary(const ops::BoundaryParams& p, const bf16* branch, void* residual, bf16* next,
                       cudaStream_t stream) {
  p.check();
  if (p.rows == 0) return;
  detail::require(branch != nullptr && residual != nullptr && next != nullptr, "residual_boundary",
                  "branch, residual and next must not be null");
  int device = 0, optin = 0;
  SD_CUDA_CHECK(cudaGetDevice(&device));
  SD_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  detail::require(static_cast<size_t>(p.hidden) * kSmemPerElement <= static_cast<size_t>(optin),
                  "residual_boundary",
                  "hidden " + std::to_string(p.hidden) + " needs " +
                      std::to_string(static_cast<size_t>(p.hidden) * kSmemPerElement) +
                      " bytes of shared memory; this device allows " + std::to_string(optin));
  if (p.residual_dtype == StreamDType::f32)
    launch_boundary(p, branch, static_cast<float*>(residual), next, stream);
  else
    launch_boundary(p, branch, static_cast<bf16*>(residual), next, stream);
}

}  // namespace sparkdraft::cuda
