// The contract of the norms (contract.md section 3). Both backends implement it bit for bit:
// cpu::rms_norm / cpu::head_rms_norm (cpu/ops.h) and the eager CUDA kernels
// (cuda/kernels.h). Shapes are [rows, cols], row-major; a `*_stride` is the distance
// in elements between consecutive rows.
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
