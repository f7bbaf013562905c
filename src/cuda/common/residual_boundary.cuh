// The residual boundary kernel (cuda/kernels.h residual_boundary; bit for bit
// cpu::residual_boundary), with the branch it reads as a policy, so that the fused
// all-reduce boundary (cuda/comm/peer_reduce.h) runs the very same kernel body over the
// tree of the ranks' fp32 partials instead of a bf16 branch in memory.
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
// (kChunks of them, 1 to 8, T <= kBoundaryMaxThreads threads). Every load the row
// needs (branch, residual, both gain weights, alpha, beta) is issued at once at the
// start, 16 bytes at a time where the row is whole and aligned, so the memory
// latency is paid once. The two canonical sums of squares are each one warp's walk
// over the values staged in shared memory as fp32 (core/reduce.h's 32 lane chains
// and the butterfly, as every norm; warp_sum_squares_shared reads 16 bytes at a time,
// several chunks' loads ahead of the chain); the elementwise steps run on the registers of
// the thread that owns the chunk.
//
// A branch policy B has
//   __device__ void begin(int64_t row, int h, const int (&i0)[kChunks])
//       before any load (the fused boundary pushes and waits there; every thread
//       of the block calls it, with the starts of its chunks, -1 for none);
//   __device__ void load(int64_t row, int h, int i0, int n, bool vec, float (&b)[8])
//       the chunk's branch values as fp32 (bf16 values: the branch rounds to bf16);
//   __device__ void end()
//       after the row's last store (every thread calls it).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/common/common.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/vec.cuh"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/ops/boundary.h"

namespace sparkdraft::cuda::detail {

inline constexpr int kBoundaryMaxThreads = 512;
inline constexpr int kBoundaryChunk = 8;
// The widest row the kernel takes (8 chunks of 8 a thread).
inline constexpr int kBoundaryMaxHidden = 8 * kBoundaryChunk * kBoundaryMaxThreads;

// The plain branch: bf16 [rows, H] in memory.
struct BranchBf16 {
  const bf16* branch;
  template <int kChunks>
  __device__ __forceinline__ void begin(int64_t, int, const int (&)[kChunks]) {}
  __device__ __forceinline__ void load(int64_t row, int h, int i0, int n, bool vec,
                                       float (&b)[8]) const {
    const Chunk c = load_chunk(branch + row * h + i0, n, vec);
#pragma unroll
    for (int k = 0; k < kBoundaryChunk; ++k) b[k] = to_f32(c.h[k]);
  }
  __device__ __forceinline__ void end() {}
};

// A chunk of the residual (bf16 or fp32) as fp32, and back.
__device__ __forceinline__ void load_residual(const float* p, int n, bool vec, float (&v)[8]) {
  load_f32x8(p, n, vec, v);
}
__device__ __forceinline__ void load_residual(const bf16* p, int n, bool vec, float (&v)[8]) {
  const Chunk c = load_chunk(p, n, vec);
#pragma unroll
  for (int j = 0; j < kBoundaryChunk; ++j) v[j] = to_f32(c.h[j]);
}
__device__ __forceinline__ void store_residual(float* p, const float (&v)[8], int n, bool vec) {
  store_f32x8(p, v, n, vec);
}
__device__ __forceinline__ void store_residual(bf16* p, const float (&v)[8], int n, bool vec) {
  Chunk c;
#pragma unroll
  for (int j = 0; j < kBoundaryChunk; ++j) c.h[j] = to_bf16(v[j]);
  store_chunk(p, c, n, vec);
}

// kChunks chunks a thread (blockDim.x * kChunks >= ceil(H / 8)); `vec`: H % 8 == 0
// and every row pointer 16-byte aligned. Dynamic shared memory: H floats.
template <class S, int kChunks, class B>
__global__ void __launch_bounds__(kBoundaryMaxThreads)
    residual_boundary_kernel(ops::BoundaryParams p, B branch, S* residual, bf16* next, bool vec) {
  pdl_enter();
  constexpr int kChunk = kBoundaryChunk;
  extern __shared__ __align__(16) float staged[];
  __shared__ float r_shared;
  const int tid = threadIdx.x, lane = tid % kWarpSize, warp = tid / kWarpSize;
  const int64_t row = blockIdx.x;
  const int h = p.hidden;
  S* sr = residual + row * h;
  bf16* nr = next + row * h;
  const bool weights = p.gain != NormGain::none, alpha_beta = p.alpha != nullptr;

  int starts[kChunks];
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int i0 = (tid + j * static_cast<int>(blockDim.x)) * kChunk;
    starts[j] = i0 < h ? i0 : -1;
  }
  branch.template begin<kChunks>(row, h, starts);

  // Every load first: chunk j of this thread starts at element i0(j), n(j) long.
  float b[kChunks][kChunk] = {}, s[kChunks][kChunk] = {};
  Chunk post_w[kChunks] = {}, pre_w[kChunks] = {};
  float alpha[kChunks][kChunk] = {}, beta[kChunks][kChunk] = {};
#pragma unroll
  for (int j = 0; j < kChunks; ++j) {
    const int i0 = (tid + j * static_cast<int>(blockDim.x)) * kChunk, n = min(kChunk, h - i0);
    if (n <= 0) continue;
    branch.load(row, h, i0, n, vec, b[j]);
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
      if (i0 + kChunk <= h) {
        float4* q = reinterpret_cast<float4*>(staged + i0);
        q[0] = make_float4(v[j][0], v[j][1], v[j][2], v[j][3]);
        q[1] = make_float4(v[j][4], v[j][5], v[j][6], v[j][7]);
      } else {
#pragma unroll
        for (int k = 0; k < kChunk; ++k)
          if (i0 + k < h) staged[i0 + k] = v[j][k];
      }
    }
    __syncthreads();
    if (warp == 0) {
      const float ss = warp_sum_squares_shared(lane, h, staged);
      if (lane == 0) r_shared = rms_scale(ss, h, p.eps);
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
        b[j][k] = round_bf16(
            apply_norm_value(b[j][k], r_branch, weights ? to_f32(post_w[j].h[k]) : 0.0f, p.gain));
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
      out.h[k] = to_bf16(
          apply_norm_value(s[j][k], r_next, weights ? to_f32(pre_w[j].h[k]) : 0.0f, p.gain));
    store_chunk(nr + i0, out, n, vec);
  }
  branch.end();
}

__host__ inline bool aligned16(const void* q) {
  return q == nullptr || reinterpret_cast<uintptr_t>(q) % 16 == 0;
}

// Whether the row pointers allow 16-byte accesses (the branch's own alignment is
// the caller's, in branch_vec).
__host__ inline bool boundary_vec(const ops::BoundaryParams& p, bool branch_vec,
                                  const void* residual, const void* next) {
  return p.hidden % kBoundaryChunk == 0 && branch_vec && aligned16(residual) && aligned16(next) &&
         aligned16(p.post_weight) && aligned16(p.pre_weight) && aligned16(p.alpha) &&
         aligned16(p.beta);
}

// Refuses a row wider than the kernel or the device's shared memory takes; `op`
// names the caller.
__host__ inline void check_boundary_hidden(int hidden, const char* op) {
  int device = 0, optin = 0;
  SD_CUDA_CHECK(cudaGetDevice(&device));
  SD_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  require(hidden <= kBoundaryMaxHidden &&
              static_cast<size_t>(hidden) * sizeof(float) <= static_cast<size_t>(optin),
          op,
          "hidden " + std::to_string(hidden) + " is more than this kernel takes (" +
              std::to_string(kBoundaryMaxHidden) + ", and " + std::to_string(optin / 4) +
              " fp32 values of shared memory on this device)");
}

// How a boundary launches: chunks a thread (1, 2, 4 or 8: the fewest that cover the
// row with kBoundaryMaxThreads threads), the threads (whole warps) and the dynamic
// shared memory.
struct BoundaryLaunch {
  int per_thread = 1, threads = 32;
  size_t smem = 0;
};
__host__ inline BoundaryLaunch boundary_launch(int hidden) {
  BoundaryLaunch l;
  const int chunks = (hidden + kBoundaryChunk - 1) / kBoundaryChunk;
  while (l.per_thread < 8 && l.per_thread * kBoundaryMaxThreads < chunks) l.per_thread *= 2;
  l.threads = ((chunks + l.per_thread - 1) / l.per_thread + 31) / 32 * 32;
  l.smem = static_cast<size_t>(hidden) * sizeof(float);
  return l;
}

// Calls f(kernel) with the kernel of kChunks = l.per_thread, its shared memory limit set.
// Only kChunks <= kMaxPerThread are instantiated (each kernel of 4 or 8 chunks takes
// the compiler tens of seconds): the caller sees to l.per_thread <= kMaxPerThread.
template <class S, class B, int kMaxPerThread = 8, class F>
void with_boundary_kernel(const BoundaryLaunch& l, F&& f) {
  auto run = [&](auto kernel) {
    if (l.smem > 48 * 1024)
      SD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(l.smem)));
    f(kernel);
  };
  if (l.per_thread == 1) return run(residual_boundary_kernel<S, 1, B>);
  if constexpr (kMaxPerThread >= 2)
    if (l.per_thread == 2) return run(residual_boundary_kernel<S, 2, B>);
  if constexpr (kMaxPerThread >= 4)
    if (l.per_thread == 4) return run(residual_boundary_kernel<S, 4, B>);
  if constexpr (kMaxPerThread >= 8) return run(residual_boundary_kernel<S, 8, B>);
  require(false, "with_boundary_kernel",
          std::to_string(l.per_thread) + " chunks a thread, this launcher has at most " +
              std::to_string(kMaxPerThread));
}

// p checked, p.rows > 0, the row width checked (check_boundary_hidden).
template <class S, class B, int kMaxPerThread = 8>
void launch_boundary(const ops::BoundaryParams& p, const B& branch, S* residual, bf16* next,
                     bool vec, cudaStream_t stream) {
  const BoundaryLaunch l = boundary_launch(p.hidden);
  with_boundary_kernel<S, B, kMaxPerThread>(l, [&](auto kernel) {
    launch_kernel(
        "residual_boundary_kernel", kernel,
        LaunchShape{dim3(static_cast<unsigned>(p.rows)), dim3(static_cast<unsigned>(l.threads)),
                    static_cast<size_t>(l.smem), stream},
        p, branch, residual, next, vec);
  });
}

// How many blocks (rows) of the boundary over rows of `hidden` one GPU runs at once.
template <class S, class B, int kMaxPerThread = 8>
int64_t boundary_resident_rows(int hidden) {
  const BoundaryLaunch l = boundary_launch(hidden);
  int per_sm = 0, device = 0, sms = 0;
  with_boundary_kernel<S, B, kMaxPerThread>(l, [&](auto kernel) {
    SD_CUDA_CHECK(
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, l.threads, l.smem));
  });
  SD_CUDA_CHECK(cudaGetDevice(&device));
  SD_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return static_cast<int64_t>(per_sm) * sms;
}

// The residual as the stream dtype says.
template <class B>
void launch_boundary(const ops::BoundaryParams& p, const B& branch, void* residual, bf16* next,
                     bool vec, cudaStream_t stream) {
  if (p.residual_dtype == StreamDType::f32)
    launch_boundary(p, branch, static_cast<float*>(residual), next, vec, stream);
  else
    launch_boundary(p, branch, static_cast<bf16*>(residual), next, vec, stream);
}

}  // namespace sparkdraft::cuda::detail
