// The contract of RoPE (contract.md section 3).
//
// The cos/sin table, computed once at load on the host (cpu::rope_table):
//   inv_freq_i  = float(1.0 / pow(theta, 2i / d))        (double math, rounded to fp32)
//   angle       = double(pos) * double(inv_freq_i)
//   cos[pos][i] = float(cos(angle)), sin[pos][i] = float(sin(angle))   i < d/2
// Layout: table[pos * d + i] = cos, table[pos * d + d/2 + i] = sin.
//
// rope (RopeParams below) rotates `heads` heads of head_dim values of each token in place:
//   (x1, x2) -> (x1*c - x2*s, x2*c + x1*s)   fp32 products, one subtract/add, no fma,
//   rounded to bf16. NeoX pairs (i, i + d/2); GPT-J pairs (2i, 2i + 1).
// x: [tokens, x_stride], head h at x + t*x_stride + h*head_dim; every positions[t]
// lies in the table.
#pragma once

#include <cstdint>
#include <string>

#include "sparkdraft/ops/require.h"

namespace sparkdraft::ops {

struct RopeParams {
  bf16* x = nullptr;  // [tokens, x_stride], rotated in place
  int64_t x_stride = 0;
  int tokens = 0;
  int heads = 0;
  int head_dim = 0;
  const int64_t* positions = nullptr;  // [tokens], each a row of the table
  const float* table = nullptr;        // [max_positions, head_dim] (cpu::rope_table)
  RopeStyle style = RopeStyle::neox;

  // The field rules (InvalidArgument naming the first bad one). The positions behind
  // the pointer are the caller's (the CPU backend refuses a negative one).
  void check() const {
    const char* op = "rope";
    require(tokens >= 0, op, "tokens must be >= 0, got " + std::to_string(tokens));
    require(heads >= 1, op, "heads must be >= 1, got " + std::to_string(heads));
    require(head_dim >= 2 && head_dim % 2 == 0, op,
            "head_dim must be even and >= 2, got " + std::to_string(head_dim));
    require(x_stride >= static_cast<int64_t>(heads) * head_dim, op,
            "x_stride must be >= heads * head_dim");
    require(tokens == 0 || (x != nullptr && positions != nullptr && table != nullptr), op,
            "x, positions and table must not be null");
  }
};

inline RopeParams rope_heads(bf16* x, int64_t x_stride, int tokens, int heads, int head_dim,
                             const int64_t* positions, const float* table, RopeStyle style) {
  RopeParams p;
  p.x = x;
  p.x_stride = x_stride;
  p.tokens = tokens;
  p.heads = heads;
  p.head_dim = head_dim;
  p.positions = positions;
  p.table = table;
  p.style = style;
  return p;
}

}  // namespace sparkdraft::ops
