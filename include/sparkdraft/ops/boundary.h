// The contract of the residual boundary (contract.md section 3): one op between a branch
// (attention or MLP output) and the next layer's input, over rows of H values.
//   b  = post_norm ? rms_norm(branch) with post_weight (bf16) : branch
//   s' = alpha_i * s_i + beta_i * b_i   (fp32: two products, one add, no fma)
//        plain residual (alpha == beta == null): s' = s_i + b_i
//   residual_out = s' (fp32 residual) or bf16(s') (bf16 residual)
//   next = rms_norm(bf16(s')) with pre_weight (the next input norm or the final norm)
// The residual is updated in place; it holds fp32 when residual_dtype is f32, else
// bf16. The norms round as ops/norm.h says. cpu::residual_boundary and
// cuda::residual_boundary take these params.
#pragma once

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/ops/kinds.h"
#include "sparkdraft/ops/require.h"

namespace sparkdraft::ops {

struct BoundaryParams {
  int rows = 0;
  int hidden = 0;  // H
  StreamDType residual_dtype = StreamDType::bf16;
  const bf16* post_weight = nullptr;  // [H] post-norm of the branch (sandwich layers)
  bool post_norm = false;             // apply the post-norm (weight may be null with gain none)
  const float* alpha = nullptr;       // [H] fp32, null = plain residual
  const float* beta = nullptr;        // [H] fp32
  const bf16* pre_weight = nullptr;   // [H] next input norm (or the final norm)
  NormGain gain = NormGain::weight;
  float eps = 1e-6f;

  // The only validation of these fields (InvalidArgument naming the first bad one).
  void check() const {
    const char* op = "residual_boundary";
    require(rows >= 0, op, "rows must be >= 0, got " + std::to_string(rows));
    require(hidden >= 1, op, "hidden must be >= 1, got " + std::to_string(hidden));
    require((alpha == nullptr) == (beta == nullptr), op,
            "alpha and beta must be both set (norm-preserving) or both null (plain)");
    if (post_norm) require_gain_weight(post_weight, gain, op, "post_weight");
    require_gain_weight(pre_weight, gain, op, "pre_weight");
    require_eps(eps, op);
  }
};

}  // namespace sparkdraft::ops
