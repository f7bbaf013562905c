// The contract of RoPE (contract.md section 3).
//
// The cos/sin table, computed once at load on the host (cpu::rope_table):
//   inv_freq_i  = float(1.0 / pow(theta, 2i / d))        (double math, rounded to fp32)
//   angle       = double(pos) * double(inv_freq_i)
//   cos[pos][i] = float(cos(angle)), sin[pos][i] = float(sin(angle))   i < d/2
// Layout: table[pos * d + i] = cos, table[pos * d + d/2 + i] = sin.
//
// rope rotates `heads` heads of head_dim values of each token in place:
//   (x1, x2) -> (x1*c - x2*s, x2*c + x1*s)   fp32 products, one subtract/add, no fma,
//   rounded to bf16. NeoX pairs (i, i + d/2); GPT-J pairs (2i, 2i + 1).
// x: [tokens, x_stride], head h at x + t*x_stride + h*head_dim; every positions[t]
// lies in the table.
#pragma once
