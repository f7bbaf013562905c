// The contract of the SwiGLU activation.
//   gu is [rows, 2I] (gate in [0, I), up in [I, 2I));
//   y = bf16(silu_f32(f32(g)) * f32(u))      (silu_f32 from core/math.h, one rounding)
// SiluMulParams and GateUpParams below are what cpu:: and cuda:: take.
#pragma once

#include <cstdint>
#include <string>

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/ops/gemm.h"
#include "sparkdraft/ops/require.h"

namespace sparkdraft::ops {

struct SiluMulParams {
  const bf16* gu = nullptr;  // [rows, 2 * inter]
  int rows = 0;
  int inter = 0;
  bf16* y = nullptr;  // [rows, inter]

  void check() const {
    const char* op = "silu_mul";
    require(rows >= 0, op, "rows must be >= 0, got " + std::to_string(rows));
    require(inter >= 1, op, "inter must be >= 1, got " + std::to_string(inter));
    require(rows == 0 || (gu != nullptr && y != nullptr), op, "gu and y must not be null");
  }
};

inline SiluMulParams silu_mul_of(const bf16* gu, int rows, int inter, bf16* y) {
  SiluMulParams p;
  p.gu = gu;
  p.rows = rows;
  p.inter = inter;
  p.y = y;
  return p;
}

// gate_up and SwiGLU: y = silu_mul(gemm(x, w)), w [2 * inter, K] (ops/gemm.h with one
// K slice); gu [rows, 2 * inter] is the scratch of the eager composition (gemm into
// gu, then silu_mul), which a fused kernel need not write.
struct GateUpParams {
  const bf16* x = nullptr;  // [rows, x_stride]
  int64_t x_stride = 0;
  const bf16* w = nullptr;  // [2 * inter, K]
  int rows = 0;
  int inter = 0;
  int K = 0;
  bf16* gu = nullptr;
  bf16* y = nullptr;  // [rows, y_stride]
  int64_t y_stride = 0;

  void check(const char* op = "gate_up_swiglu") const {
    check_gemm_args(op, x, x_stride, w, rows, inter, K, y, y_stride, 1);
  }
  // The eager composition's two ops.
  GemmParams gate_up() const { return gemm_of(x, x_stride, w, rows, 2 * inter, K, gu, 2 * inter); }
  SiluMulParams silu() const { return silu_mul_of(gu, rows, inter, y); }
};

// y [rows, y_stride]; y_stride 0 (the step's form) means contiguous rows of inter.
inline GateUpParams gate_up_of(const bf16* x, int64_t x_stride, const bf16* w, int rows, int inter,
                               int K, bf16* gu, bf16* y, int64_t y_stride = 0) {
  GateUpParams p;
  p.x = x;
  p.x_stride = x_stride;
  p.w = w;
  p.rows = rows;
  p.inter = inter;
  p.K = K;
  p.gu = gu;
  p.y = y;
  p.y_stride = y_stride == 0 ? inter : y_stride;
  return p;
}

}  // namespace sparkdraft::ops
