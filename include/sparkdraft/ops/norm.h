// The contract of the norms (contract.md section 3). Both backends implement it bit for bit
// and take only these params: cpu::rms_norm / head_rms_norm / o_norm_gate (cpu/ops.h)
// and the eager CUDA kernels (cuda/kernels.h). Shapes are [rows, cols], row-major; a `*_stride` is
// the distance in elements between consecutive rows.
//
// rms_norm, each row of n values:
//   ss  = canonical_sum(x_i * x_i)          (fp32, core/reduce.h order, fma per term)
//   r   = 1.0f / sqrtf(ss / float(n) + eps) (IEEE div and sqrt, fp32, no fma)
//   y_i = bf16((x_i * r) * g_i)             g_i = w_i, 1 + w_i (fp32 add), or no multiply
// The only rounding to bf16 is the output, once. Input bf16 or fp32 (the fp32 residual
// stream). `weight` may be null only for NormGain::none. In place (y == x, same
// stride) is allowed for bf16 input. Needs rows >= 0, n >= 1, strides >= n.
//
// head_rms_norm (QK-norm, V-norm), in place: for every token t and head h, the
// head_dim values at x + t*token_stride + h*head_dim are one rms_norm row, with the
// same rounding points. `weight` (head_dim values, shared by all heads) may be null
// only for NormGain::none. Needs heads, head_dim >= 1 and
// token_stride >= heads * head_dim.
//
// o_norm_gate, per token and head, in place on o [tokens, heads*head_dim]:
//   o = o_norm ? rms_norm_row(o_head) (bf16, gain from `o_norm_weight`) : o
//   o = gate   ? bf16(f32(o) * sigmoid_f32(f32(g))) : o     g: [tokens, g_stride]
// (sigmoid_f32 from core/math.h). The gate applies when g is not null.
#pragma once

#include <cstdint>
#include <string>
#include <type_traits>

#include "sparkdraft/ops/require.h"

namespace sparkdraft::ops {

// rms_norm over `rows` rows of n values: x [rows, x_stride] of x_dtype (bf16, or the
// fp32 residual stream), y [rows, y_stride] bf16.
struct RmsNormParams {
  const void* x = nullptr;
  StreamDType x_dtype = StreamDType::bf16;
  int64_t x_stride = 0;
  int rows = 0;
  int n = 0;
  const bf16* weight = nullptr;  // [n]; null only with NormGain::none
  NormGain gain = NormGain::weight;
  float eps = 1e-6f;
  bf16* y = nullptr;
  int64_t y_stride = 0;

  // The only validation of these fields (InvalidArgument naming the first bad one).
  void check() const {
    const char* op = "rms_norm";
    require(rows >= 0, op, "rows must be >= 0, got " + std::to_string(rows));
    require(n >= 1, op, "n must be >= 1, got " + std::to_string(n));
    require(x_stride >= n, op,
            "x_stride " + std::to_string(x_stride) + " < n " + std::to_string(n));
    require(y_stride >= n, op,
            "y_stride " + std::to_string(y_stride) + " < n " + std::to_string(n));
    require_gain_weight(weight, gain, op, "weight");
    require_eps(eps, op);
    require(rows == 0 || (x != nullptr && y != nullptr), op, "x and y must not be null");
    require(
        x != static_cast<const void*>(y) || (x_dtype == StreamDType::bf16 && x_stride == y_stride),
        op, "in place (y == x) needs bf16 input and y_stride == x_stride");
  }
};

// Rows of bf16 or of the fp32 residual stream (x_dtype follows x's type).
template <class In>
inline RmsNormParams rms_norm_of(const In* x, int64_t x_stride, int rows, int n, const bf16* weight,
                                 NormGain gain, float eps, bf16* y, int64_t y_stride) {
  static_assert(std::is_same_v<In, bf16> || std::is_same_v<In, float>, "bf16 or fp32 rows");
  RmsNormParams p;
  p.x = x;
  p.x_dtype = std::is_same_v<In, float> ? StreamDType::f32 : StreamDType::bf16;
  p.x_stride = x_stride;
  p.rows = rows;
  p.n = n;
  p.weight = weight;
  p.gain = gain;
  p.eps = eps;
  p.y = y;
  p.y_stride = y_stride;
  return p;
}

// head_rms_norm, in place on `tokens` rows of x (row stride token_stride), each
// holding `heads` heads of head_dim values.
struct HeadNormParams {
  bf16* x = nullptr;
  int64_t token_stride = 0;
  int tokens = 0;
  int heads = 0;
  int head_dim = 0;
  const bf16* weight = nullptr;  // [head_dim]; null only with NormGain::none
  NormGain gain = NormGain::weight;
  float eps = 1e-6f;

  void check() const {
    const char* op = "head_rms_norm";
    require(tokens >= 0, op, "tokens must be >= 0, got " + std::to_string(tokens));
    require(heads >= 1 && head_dim >= 1, op, "heads and head_dim must be >= 1");
    require(token_stride >= static_cast<int64_t>(heads) * head_dim, op,
            "token_stride is smaller than heads * head_dim");
    require_gain_weight(weight, gain, op, "weight");
    require_eps(eps, op);
    require(tokens == 0 || x != nullptr, op, "x must not be null");
  }
};

inline HeadNormParams head_norm(bf16* x, int64_t token_stride, int tokens, int heads, int head_dim,
                                const bf16* weight, NormGain gain, float eps) {
  HeadNormParams p;
  p.x = x;
  p.token_stride = token_stride;
  p.tokens = tokens;
  p.heads = heads;
  p.head_dim = head_dim;
  p.weight = weight;
  p.gain = gain;
  p.eps = eps;
  return p;
}

// o_norm_gate, in place on o [tokens, heads * head_dim].
struct ONormGateParams {
  bf16* o = nullptr;
  int tokens = 0;
  int heads = 0;
  int head_dim = 0;
  bool o_norm = false;                  // apply the per-head norm
  const bf16* o_norm_weight = nullptr;  // [head_dim]; null only with NormGain::none
  NormGain gain = NormGain::weight;
  float eps = 1e-6f;
  const bf16* g = nullptr;  // [tokens, g_stride] the gate; null = no gate
  int64_t g_stride = 0;

  void check() const {
    const char* op = "o_norm_gate";
    require(tokens >= 0, op, "tokens must be >= 0, got " + std::to_string(tokens));
    require(heads >= 1, op, "heads must be >= 1, got " + std::to_string(heads));
    require(head_dim >= 1, op, "head_dim must be >= 1, got " + std::to_string(head_dim));
    if (o_norm) {
      require_gain_weight(o_norm_weight, gain, op, "o_norm_weight");
      require_eps(eps, op);
    }
    require(g == nullptr || g_stride >= static_cast<int64_t>(heads) * head_dim, op,
            "g_stride must be >= heads * head_dim");
    require(tokens == 0 || o != nullptr, op, "o must not be null");
  }
};

inline ONormGateParams o_norm_gate_of(bf16* o, int tokens, int heads, int head_dim, bool o_norm,
                                      const bf16* o_norm_weight, NormGain gain, float eps,
                                      const bf16* g, int64_t g_stride) {
  ONormGateParams p;
  p.o = o;
  p.tokens = tokens;
  p.heads = heads;
  p.head_dim = head_dim;
  p.o_norm = o_norm;
  p.o_norm_weight = o_norm_weight;
  p.gain = gain;
  p.eps = eps;
  p.g = g;
  p.g_stride = g_stride;
  return p;
}

}  // namespace sparkdraft::ops
