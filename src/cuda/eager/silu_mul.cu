// SwiGLU activation, bit for bit cpu::silu_mul.
//
// What it computes: gu is [rows, 2I] (gate in [0, I), up in [I, 2I));
//   y[r][i] = bf16(silu_f32(f32(g)) * f32(u))
// with silu_f32 of core/math.h (the same bits on host and device), computed by
// common/fast_math.cuh's silu_fast (silu_f32's bits on every float, about half its FP64
// work: the vector form was bound by the double exp and division).
// Where it rounds: once, the product, to bf16.
// Launch: 256 threads per block; where I is a multiple of 8, both arrays are 16-byte
// aligned and there are at least kSiluVecFrom groups of 8 outputs, eight outputs a thread
// (16-byte loads of gate and up, one 16-byte store; grid y over the rows), else one
// output a thread (few rows: a thread's 8 double-precision silu_f32 in a row are a long
// chain; gpu-log 2026-12-04d run 10: 19.6 us against 10.1 at 8 tokens, 71.2 against
// 92.8 at 256). Elementwise: the same bits either way.
#include "cuda/kernels.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/cuda/check.h"

#include "cuda/common/common.cuh"
#include "cuda/common/fast_math.cuh"
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
  y[idx] = to_bf16(__fmul_rn(silu_fast(g), u));
}

constexpr int kSiluVec = 8;                // bf16 outputs a thread in the vector form
constexpr int64_t kSiluVecFrom = 1 << 17;  // groups of 8 outputs from which it runs

// The eight outputs of a thread from its 16 bytes of gate and of up, silu by silu_fast's
// tries (fast_or_slow_n): the same bits (CudaFastMath).
__device__ __forceinline__ uint4 silu_mul8(const uint4& g4, const uint4& u4) {
  const uint32_t gw[4] = {g4.x, g4.y, g4.z, g4.w}, uw[4] = {u4.x, u4.y, u4.z, u4.w};
  float g[kSiluVec], s[kSiluVec];
#pragma unroll
  for (int e = 0; e < kSiluVec; ++e)
    g[e] = bits_f32(e % 2 == 0 ? gw[e / 2] << 16 : gw[e / 2] & 0xffff0000u);
  fast_or_slow_n<silu_fast_try, silu_slow>(g, s);
  uint32_t out[4];
#pragma unroll
  for (int w = 0; w < 4; ++w) {
    const float u0 = bits_f32(uw[w] << 16), u1 = bits_f32(uw[w] & 0xffff0000u);
    const uint32_t lo = to_bf16(__fmul_rn(s[2 * w], u0)).bits;
    const uint32_t hi = to_bf16(__fmul_rn(s[2 * w + 1], u1)).bits;
    out[w] = lo | hi << 16;
  }
  return make_uint4(out[0], out[1], out[2], out[3]);
}

__global__ void __launch_bounds__(kSiluThreads)
    silu_mul_vec_kernel(const bf16* gu, int rows, int inter, bf16* y) {
  pdl_enter();
  const int v = blockIdx.x * kSiluThreads + threadIdx.x;  // the thread's 8 outputs in a row
  if (v >= inter / kSiluVec) return;
  for (int r = blockIdx.y; r < rows; r += gridDim.y) {
    const bf16* row = gu + static_cast<int64_t>(r) * 2 * inter;
    const uint4 g = *reinterpret_cast<const uint4*>(row + v * kSiluVec);
    const uint4 u = *reinterpret_cast<const uint4*>(row + inter + v * kSiluVec);
    *reinterpret_cast<uint4*>(y + static_cast<int64_t>(r) * inter + v * kSiluVec) = silu_mul8(g, u);
  }
}

}  // namespace

void silu_mul(const ops::SiluMulParams& p, cudaStream_t stream) {
  p.check();
  if (p.rows == 0) return;
  const bool aligned =
      reinterpret_cast<uintptr_t>(p.gu) % 16 == 0 && reinterpret_cast<uintptr_t>(p.y) % 16 == 0;
  if (p.inter % kSiluVec == 0 && aligned &&
      static_cast<int64_t>(p.rows) * (p.inter / kSiluVec) >= kSiluVecFrom) {
    const unsigned bx =
        static_cast<unsigned>((p.inter / kSiluVec + kSiluThreads - 1) / kSiluThreads);
    const unsigned by = static_cast<unsigned>(p.rows < 65535 ? p.rows : 65535);
    launch_kernel("silu_mul_vec_kernel", silu_mul_vec_kernel,
                  LaunchShape{dim3(bx, by), dim3(kSiluThreads), 0, stream}, p.gu, p.rows, p.inter,
                  p.y);
    return;
  }
  const int64_t total = static_cast<int64_t>(p.rows) * p.inter;
  const unsigned blocks = detail::blocks_for(total, kSiluThreads, "silu_mul");
  launch_kernel("silu_mul_kernel", silu_mul_kernel,
                LaunchShape{dim3(blocks), dim3(kSiluThreads), 0, stream}, p.gu, total, p.inter,
                p.y);
}

}  // namespace sparkdraft::cuda
