// The contract of the layer matrix products (contract.md sections 3 and 6), the same on
// the CPU (cpu::gemm) and the GPU (cuda::gemm), bit for bit:
//
//   y[m][n] = bf16( chain(x[m], w[n]) )
//
// x: [M, x_stride] bf16 (x_stride >= K), w: [N, K] bf16 (a Linear weight, row
// stride K), y: [M, y_stride] bf16 (y_stride >= N); M, N >= 0, K >= 1.
//
// chain = core/mma.h's mma_chain: ceil(K/16) steps of Hopper's
// mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32 in increasing k from +0.0, step i
// adding the 16 products of k = 16i .. 16i+15, the last step zero-padded when
// K % 16 != 0. A step's 16 products are symmetric in the two operands, so which
// one is A is free, and inside a step the 16 k values may sit in any lanes as long
// as both operands use the same map; the 16-k groups themselves are fixed.
//
// Canonical K slices (k_slices = S in {1, 2, 4, 8}): slice s covers
// k in [s*K/S, (s+1)*K/S), each slice its own chain from +0; the S fp32 partials
// are added by core/reduce.h canonical_tree_sum (S = 8:
// ((p0+p1)+(p2+p3))+((p4+p5)+(p6+p7))) and y = bf16(that sum). S > 1 needs
// K % (16*S) == 0, so every slice is whole steps. o_proj and down_proj run with
// canonical_k_slices(K) at every TP size (a rank of TP t holds slices
// [8r/t, 8(r+1)/t)); every other projection, lm_head included, runs S = 1.
//
// Rounding points: the fp32 chain results (truncating steps, core/mma.h), the
// fp32 tree additions (round to nearest even), one bf16 rounding at the end
// (core/bf16.h to_bf16; any NaN -> the canonical bf16 NaN).
#pragma once

#include <cstdint>

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/ops/require.h"

namespace sparkdraft::ops {

inline constexpr int kGemmMaxKSlices = 8;

// The largest S in {8, 4, 2, 1} with K % (16*S) == 0 (S = 1 always).
inline int canonical_k_slices(int K) {
  for (int s = kGemmMaxKSlices; s > 1; s /= 2)
    if (K > 0 && K % (16 * s) == 0) return s;
  return 1;
}

// The argument rules of a product (InvalidArgument naming `op`); GemmParams::check
// and the fused GEMM epilogues (gate_up + SwiGLU) apply them.
inline void check_gemm_args(const char* op, const void* x, int64_t x_stride, const void* w, int M,
                            int N, int K, const void* y, int64_t y_stride, int k_slices) {
  require(M >= 0 && N >= 0 && K >= 1, op, "needs M >= 0, N >= 0 and K >= 1");
  require(x_stride >= K && y_stride >= N, op, "needs x_stride >= K and y_stride >= N");
  require(k_slices == 1 || k_slices == 2 || k_slices == 4 || k_slices == 8, op,
          "k_slices must be 1, 2, 4 or 8");
  require(k_slices == 1 || K % (16 * k_slices) == 0, op,
          "k_slices > 1 needs K to be a multiple of 16 * k_slices");
  require(M == 0 || N == 0 || (x != nullptr && w != nullptr && y != nullptr), op, "null x, w or y");
}

// One product of the contract above, what cpu::gemm, cuda::gemm and StepOps::gemm
// take. y_dtype bf16: y = bf16(the tree), what every projection stores; f32: the
// unrounded tree (a TP rank's subtree of its K slices, completed by an all-reduce
// and rounded once after it).
struct GemmParams {
  const bf16* x = nullptr;  // [M, x_stride]
  int64_t x_stride = 0;
  const bf16* w = nullptr;  // [N, w_stride]: a Linear weight's rows (w_stride 0 means K)
  int64_t w_stride = 0;
  int M = 0, N = 0, K = 0;
  int k_slices = 1;   // canonical K slices (1 but for o_proj and down_proj)
  void* y = nullptr;  // [M, y_stride] of y_dtype
  int64_t y_stride = 0;
  StreamDType y_dtype = StreamDType::bf16;

  int64_t w_row_stride() const { return w_stride == 0 ? K : w_stride; }
  bf16* y_bf16() const { return static_cast<bf16*>(y); }
  float* y_f32() const { return static_cast<float*>(y); }
  void check(const char* op = "gemm") const {
    check_gemm_args(op, x, x_stride, w, M, N, K, y, y_stride, k_slices);
    require(w_row_stride() >= K, op, "needs w_stride >= K");
  }
};

// y [M, y_stride] = x [M, x_stride] times the packed w [N, K] (row stride K), rounded
// to bf16: the form of every projection of the step.
inline GemmParams gemm_of(const bf16* x, int64_t x_stride, const bf16* w, int M, int N, int K,
                          bf16* y, int64_t y_stride, int k_slices = 1) {
  GemmParams p;
  p.x = x;
  p.x_stride = x_stride;
  p.w = w;
  p.M = M;
  p.N = N;
  p.K = K;
  p.k_slices = k_slices;
  p.y = y;
  p.y_stride = y_stride;
  return p;
}

// The same product with the fp32 tree stored unrounded into y.
inline GemmParams gemm_f32_of(const bf16* x, int64_t x_stride, const bf16* w, int64_t w_stride,
                              int M, int N, int K, float* y, int64_t y_stride, int k_slices) {
  GemmParams p = gemm_of(x, x_stride, w, M, N, K, nullptr, y_stride, k_slices);
  p.w_stride = w_stride;
  p.y = y;
  p.y_dtype = StreamDType::f32;
  return p;
}

}  // namespace sparkdraft::ops
