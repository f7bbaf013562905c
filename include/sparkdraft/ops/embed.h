// The contract of the embedding and of the residual's widening.
//   embed: out[r] = table[ids[r]]              (exact bf16 copies of rows of H)
//   widen: out[i] = f32(x[i])                  (exact: the fp32 residual starts as the
//                                               embedding)
// EmbedParams and WidenParams below are what cpu:: and cuda:: take.
#pragma once

#include <cstdint>
#include <string>

#include "sparkdraft/ops/require.h"

namespace sparkdraft::ops {

struct EmbedParams {
  const int64_t* ids = nullptr;  // [rows], each in [0, vocab) (the caller's guarantee)
  int rows = 0;
  const bf16* table = nullptr;  // [vocab, hidden]
  int hidden = 0;
  bf16* out = nullptr;  // [rows, hidden]

  void check() const {
    const char* op = "embed";
    require(rows >= 0, op, "rows must be >= 0, got " + std::to_string(rows));
    require(hidden >= 1, op, "hidden must be >= 1, got " + std::to_string(hidden));
    require(rows == 0 || (ids != nullptr && table != nullptr && out != nullptr), op,
            "ids, table and out must not be null");
  }
};

struct WidenParams {
  const bf16* x = nullptr;  // [n]
  int64_t n = 0;
  float* out = nullptr;  // [n]

  void check() const {
    const char* op = "widen";
    require(n >= 0, op, "n must be >= 0, got " + std::to_string(n));
    require(n == 0 || (x != nullptr && out != nullptr), op, "x and out must not be null");
  }
};

inline EmbedParams embed_of(const int64_t* ids, int rows, const bf16* table, int hidden,
                            bf16* out) {
  EmbedParams p;
  p.ids = ids;
  p.rows = rows;
  p.table = table;
  p.hidden = hidden;
  p.out = out;
  return p;
}

inline WidenParams widen_of(const bf16* x, int64_t n, float* out) {
  WidenParams p;
  p.x = x;
  p.n = n;
  p.out = out;
  return p;
}

}  // namespace sparkdraft::ops
