// Shared pieces of the eager kernels: the row-norm steps every normed kernel uses
// (so rms_norm, residual_boundary and o_norm_gate round at exactly the same points
// as cpu::rms_norm), and the launchers' argument checks.
//
// A normed row is owned by one warp and walked in the canonical order of
// core/reduce.h: lane l takes chunks l, l+32, ... of 8 elements, in increasing
// index, one fma per term; warp_canonical_combine is the butterfly.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/common/launch.h"
#include "sparkdraft/config.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/core/reduce.h"
#include "sparkdraft/error.h"
#include "sparkdraft/ops/require.h"

namespace sparkdraft::cuda::detail {

inline constexpr int kWarpSize = 32;
inline constexpr int kRowWarps = 4;  // warps (rows) per block of the warp-per-row kernels
inline constexpr int kRowThreads = kRowWarps * kWarpSize;

// Calls f(i) for the elements lane `lane` owns, in the canonical lane order.
template <class F>
__device__ __forceinline__ void for_lane_elements(int lane, int n, F f) {
  for (int c = lane; c * kReduceChunk < n; c += kReduceLanes) {
    const int begin = c * kReduceChunk;
    const int end = begin + kReduceChunk < n ? begin + kReduceChunk : n;
    for (int i = begin; i < end; ++i) f(i);
  }
}

// Canonical sum of load(i)^2 over i < n; every lane of the warp gets the sum.
template <class Load>
__device__ __forceinline__ float warp_sum_squares(int lane, int n, Load load) {
  const float partial = canonical_lane_partial(lane, n, [&](int i, float& a, float& b) {
    a = load(i);
    b = a;
  });
  return warp_canonical_combine(partial);
}

// acc + the squares of one whole chunk (8 values as two float4), in increasing index,
// one fma a term.
__device__ __forceinline__ float fma_chunk_squares(const float4 (&v)[2], float acc) {
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    acc = fma_f32(v[h].x, v[h].x, acc);
    acc = fma_f32(v[h].y, v[h].y, acc);
    acc = fma_f32(v[h].z, v[h].z, acc);
    acc = fma_f32(v[h].w, v[h].w, acc);
  }
  return acc;
}

// warp_sum_squares over n fp32 values in shared memory (`staged`, 16-byte aligned):
// the same terms in the same order (lane l: chunks l, l + 32, ..., each in increasing
// index, one fma a term; then the butterfly), so the same bits. Whole chunks are read
// 16 bytes at a time and kAhead chunks' loads are issued before their fmas, so the
// lane's chain of fmas does not wait on a load each term.
__device__ __forceinline__ float warp_sum_squares_shared(int lane, int n, const float* staged) {
  constexpr int kAhead = 4;
  const int whole = n / kReduceChunk;
  auto load = [&](int c, float4(&v)[2]) {
    const float4* q = reinterpret_cast<const float4*>(staged + c * kReduceChunk);
    v[0] = q[0];
    v[1] = q[1];
  };
  float acc = 0.0f;
  int c = lane;
  for (; c + kReduceLanes * (kAhead - 1) < whole; c += kReduceLanes * kAhead) {
    float4 v[kAhead][2];
#pragma unroll
    for (int u = 0; u < kAhead; ++u) load(c + kReduceLanes * u, v[u]);
#pragma unroll
    for (int u = 0; u < kAhead; ++u) acc = fma_chunk_squares(v[u], acc);
  }
  for (; c < whole; c += kReduceLanes) {
    float4 v[2];
    load(c, v);
    acc = fma_chunk_squares(v, acc);
  }
  // The last, partial chunk (n % 8 != 0) is this lane's when c stopped on it.
  if (c == whole)
    for (int i = whole * kReduceChunk; i < n; ++i) acc = fma_f32(staged[i], staged[i], acc);
  return warp_canonical_combine(acc);
}

// r = 1 / sqrt(ss / n + eps): IEEE division, add, then rsqrt_f32 (core/math.h:
// IEEE sqrt and division), no fma.
__device__ __forceinline__ float rms_scale(float ss, int n, float eps) {
  return rsqrt_f32(__fadd_rn(__fdiv_rn(ss, static_cast<float>(n)), eps));
}

// (x * r) * g with g = w, 1 + w, or no multiply (w the gain weight's element as
// fp32; unused with gain none); the caller rounds to bf16.
__device__ __forceinline__ float apply_norm_value(float x, float r, float w, NormGain gain) {
  const float xr = __fmul_rn(x, r);
  switch (gain) {
    case NormGain::weight: return __fmul_rn(xr, w);
    case NormGain::one_plus_weight: return __fmul_rn(xr, __fadd_rn(1.0f, w));
    case NormGain::none: break;
  }
  return xr;
}

// The same with g_i read from the weight row w (not read with gain none).
__device__ __forceinline__ float apply_norm(float x, float r, const bf16* w, NormGain gain, int i) {
  return apply_norm_value(x, r, gain == NormGain::none ? 0.0f : to_f32(w[i]), gain);
}

// ---- host side ----------------------------------------------------------------------

using cuda::require;  // common/launch.h

// The norms' field checks, shared with the CPU ops (one message form).
using ops::require_eps;
using ops::require_gain_weight;

// Blocks of `threads` covering `total` items (total > 0), within the grid's x limit.
inline unsigned blocks_for(int64_t total, int threads, const char* op) {
  const int64_t blocks = (total + threads - 1) / threads;
  require(blocks <= 0x7fffffffLL, op, std::to_string(total) + " work items exceed one grid");
  return static_cast<unsigned>(blocks);
}

}  // namespace sparkdraft::cuda::detail
