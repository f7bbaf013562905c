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
// Launch: one block per row; thread t owns the row's 8-element chunks t, t + T, ...
// (kChunks of them, 1 to 8, T <= kMaxThreads threads). Every load the row needs
// (branch, residual, both gain weights, alpha, beta) is issued at once at the
// start, 16 bytes at a time where the row is whole and aligned, so the memory
// latency is paid once (the previous kernel walked the row in 2-byte steps: 14.5
// us a boundary at H 4096, L2 flushed). The two canonical sums of squares are each
// one warp's walk over the values staged in shared memory as fp32 (core/reduce.h's
// 32 lane chains and the butterfly, as every norm); the elementwise steps run on
// the registers of the thread that owns the chunk.
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/kernels.h"

#include "cuda/common/vec.cuh"
#include "cuda/eager/common.cuh"

namespace sparkdraft::cuda {
namespace {

constexpr int kMaxThreads = 512;
constexpr int kChunk = 8;

// A chunk of the residual (bf16 or fp32) as fp32, and back.
__device__ __forceinline__ void load_residual(const float* p, int n, bool vec, float (&v)[8]) {
  load_f32x8(p, n, vec, v);
}
__device__ __forceinline__ void load_residual(const bf16* p, int n, bool vec, float (&v)[8]) {
  const Chunk c = load_chunk(p, n, vec);
#pragma unroll
  for (int j = 0; j < kChunk; ++j) v[j] = to_f32(c.h[j]);
}
__device__ __forceinline__ void store_residual(float* p, const float (&v)[8], int n, bool vec) {
  store_f32x8(p, v, n, vec);
}
__device__ __forceinline__ void store_residual(bf16* p, const float (&v)[8], int n, bool vec) {
  Chunk c;
#pragma unroll
  for (int j = 0; j < kChunk; ++j) c.h[j] = to_bf16(v[j]);
  store_chunk(p, c, n, vec);
}

// kChunks chunks a thread (blockDim.x * kChunks >= ceil(H / 8)); `vec`: H % 8 == 0
// and every row pointer 16-byte aligned. Dynamic shared memory: H floats.
template <class S, int kChunks>
__global__ void __launch_bounds__(kMaxThreads)
    residual_boundary_kernel(ops::BoundaryParams p, const bf16* branch, S* residual, bf16* next,
                             bool vec) {
  extern __shared__ float staged[];
  __shared__ float r_shared;
  const int tid = threadIdx.x, lane = tid % detail::kWarpSize, warp = tid / detail::kWarpSize;
  const int64_t row = blockIdx.x;
  const int h = p.hidden;
  const bf16* br = branch + row * h;
  S* sr = residual + row * h;
  bf16* nr = next + row * h;
  const bool weights = p.gain != NormGain::none, alpha_beta = p.alpha != nullptr;

  // Every load first: chunk j of this thread starts at element i0(j), n(j) long.
  float b[kChunks][kChunk] = {}, s[kChunks][kChunk] = {};
  Chunk post_w[kChunks] = {}, pre_w[kChunks] = {};
  float alpha[kChunks][kChunk] = {}, beta[kChunks][kChunk] = {};
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int i0 = (tid + j * static_cast<int>(blockDim.x)) * kChunk, n = min(kChunk, h - i0);
    if (n <= 0) continue;
    const Chunk bc = load_chunk(br + i0, n, vec);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) b[j][k] = to_f32(bc.h[k]);
    load_residual(sr + i0, n, vec, s[j]);
    if (weights) {
      if (p.post_norm) post_w[j] = load_chunk(p.post_weight + i0, n, vec);
      pre_w[j] = load_chunk(p.pre_weight + i0, n, vec);
    }
    if (alpha_beta) {
      load_f32x8(p.alpha + i0, n, vec, alpha[j]);
      load_f32x8(p.beta + i0, n, vec, beta[j]);
    }
  }
  // Stages this thread's values v[j][k] at their element index, then one warp takes
  // the canonical sum of squares of the row and every thread gets rms_scale of it.
  auto row_scale = [&](const float(&v)[kChunks][kChunk]) {
#pragma unroll
    for (int j = 0; j < kChunks; ++j) {
      const int i0 = (tid + j * static_cast<int>(blockDim.x)) * kChunk;
#pragma unroll
      for (int k = 0; k < kChunk; ++k)
        if (i0 + k < h) staged[i0 + k] = v[j][k];
    }
    __syncthreads();
    if (warp == 0) {
      const float ss = detail::warp_sum_squares(lane, h, [&](int i) { return staged[i]; });
      if (lane == 0) r_shared = detail::rms_scale(ss, h, p.eps);
    }
    __syncthreads();
    const float r = r_shared;
    __syncthreads();  // staged and r_shared may be written again
    return r;
  };

  if (p.post_norm) {
    const float r_branch = row_scale(b);
#pragma unroll
    for (int j = 0; j < kChunks; ++j)
#pragma unroll
      for (int k = 0; k < kChunk; ++k)
        b[j][k] = round_bf16(detail::apply_norm_value(
            b[j][k], r_branch, weights ? to_f32(post_w[j].h[k]) : 0.0f, p.gain));
  }
  // s' (stored to the residual), then bf16(s') in s: what the next pre-norm reads.
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int i0 = (tid + j * static_cast<int>(blockDim.x)) * kChunk, n = min(kChunk, h - i0);
#pragma unroll
    for (int k = 0; k < kChunk; ++k)
      s[j][k] = alpha_beta
                    ? __fadd_rn(__fmul_rn(alpha[j][k], s[j][k]), __fmul_rn(beta[j][k], b[j][k]))
                    : __fadd_rn(s[j][k], b[j][k]);
    if (n > 0) store_residual(sr + i0, s[j], n, vec);
#pragma unroll
    for (int k = 0; k < kChunk; ++k) s[j][k] = round_bf16(s[j][k]);
  }
  const float r_next = row_scale(s);
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int i0 = (tid + j * static_cast<int>(blockDim.x)) * kChunk, n = min(kChunk, h - i0);
    if (n <= 0) continue;
    Chunk out;
#pragma unroll
    for (int k = 0; k < kChunk; ++k)
      out.h[k] = to_bf16(detail::apply_norm_value(s[j][k], r_next,
                                                  weights ? to_f32(pre_w[j].h[k]) : 0.0f, p.gain));
    store_chunk(nr + i0, out, n, vec);
  }
}

bool aligned16(const void* q) { return q == nullptr || reinterpret_cast<uintptr_t>(q) % 16 == 0; }

template <class S, int kChunks>
void launch_chunks(const ops::BoundaryParams& p, const bf16* branch, S* residual, bf16* next,
                   int threads, bool vec, cudaStream_t stream) {
  const size_t smem = static_cast<size_t>(p.hidden) * sizeof(float);
  const auto kernel = residual_boundary_kernel<S, kChunks>;
  if (smem > 48 * 1024)
    SD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem)));
  kernel<<<static_cast<unsigned>(p.rows), static_cast<unsigned>(threads), smem, stream>>>(
      p, branch, residual, next, vec);
  SD_CHECK_LAUNCH();
}

// The fewest chunks a thread (1, 2, 4 or 8) that cover the row with kMaxThreads
// threads; the threads rounded up to whole warps.
template <class S>
void launch_boundary(const ops::BoundaryParams& p, const bf16* branch, S* residual, bf16* next,
                     cudaStream_t stream) {
  const int chunks = (p.hidden + kChunk - 1) / kChunk;
  const bool vec = p.hidden % kChunk == 0 && aligned16(branch) && aligned16(residual) &&
                   aligned16(next) && aligned16(p.post_weight) && aligned16(p.pre_weight) &&
                   aligned16(p.alpha) && aligned16(p.beta);
  int per_thread = 1;
  while (per_thread < 8 && per_thread * kMaxThreads < chunks) per_thread *= 2;
  const int threads = ((chunks + per_thread - 1) / per_thread + 31) / 32 * 32;
  switch (per_thread) {
    case 1: launch_chunks<S, 1>(p, branch, residual, next, threads, vec, stream); break;
    case 2: launch_chunks<S, 2>(p, branch, residual, next, threads, vec, stream); break;
    case 4: launch_chunks<S, 4>(p, branch, residual, next, threads, vec, stream); break;
    default: launch_chunks<S, 8>(p, branch, residual, next, threads, vec, stream); break;
  }
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
  constexpr int kMaxHidden = 8 * kChunk * kMaxThreads;
  detail::require(p.hidden <= kMaxHidden &&
                      static_cast<size_t>(p.hidden) * sizeof(float) <= static_cast<size_t>(optin),
                  "residual_boundary",
                  "hidden " + std::to_string(p.hidden) + " is more than this kernel takes (" +
                      std::to_string(kMaxHidden) + ", and " + std::to_string(optin / 4) +
                      " fp32 values of shared memory on this device)");
  if (p.residual_dtype == StreamDType::f32)
    launch_boundary(p, branch, static_cast<float*>(residual), next, stream);
  else
    launch_boundary(p, branch, static_cast<bf16*>(residual), next, stream);
}

}  // namespace sparkdraft::cuda
