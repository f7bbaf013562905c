// The gated and rnn Markov heads (contract.md section 13), the same on the CPU
// (cpu::markov_head) and the GPU (cuda::markov_head), bit for bit. Per request row r and
// step j, with e = w1[prev] (bf16 [R]) and h = the final normed hidden of position j of
// row r (bf16 [H], the vector lm_head reads):
//
//   gated (gate_proj: w [R, H + R], b [R]):
//     x     = [h ; e]                                  bf16 [H + R], in that order
//     a[i]  = bf16(chain(w[i], x) + f32(b[i]))         one chain over K = H + R from +0,
//                                                      one fp32 add, one rounding
//     g[i]  = bf16(sigmoid_f32(f32(a[i])))
//     u[i]  = bf16(f32(g[i]) * f32(e[i]))
//   rnn (joint_proj: w [3R, 2R + H], b [3R]; the state s starts at +0 for j = 0):
//     x     = [s ; e ; h]                              bf16 [2R + H], in that order
//     z[i]  = bf16(chain(w[i], x) + f32(b[i]))         i < 3R; gate = z[0, R),
//                                                      cand = z[R, 2R), out = z[2R, 3R)
//     sg    = bf16(sigmoid_f32(f32(gate[i])))
//     t1    = bf16(f32(sg) * f32(s[i]))
//     om    = bf16(1.0f - f32(sg))
//     tc    = bf16(tanh_f32(f32(cand[i])))
//     t2    = bf16(f32(om) * f32(tc))
//     s'[i] = bf16(f32(t1) + f32(t2))                  the next step's state
//     u[i]  = bf16(tanh_f32(f32(out[i])))              (from this step's out, not s')
//
// chain = core/mma.h's mma_chain (ops/gemm.h with k_slices 1, the fp32 output); sigmoid_f32
// and tanh_f32 are core/math.h's; every fp32 operation is one IEEE operation (no fma).
// u then replaces e as the input of the Markov bias (ops/markov.h: bias[v] =
// bf16(chain(w2[v], u))); the rest of the step is unchanged. NaN: every bf16 rounding
// gives the canonical bf16 NaN, so NaN payloads never differ between the backends.
#pragma once

#include <cstdint>
#include <string>

#include "sparkdraft/config.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/hd.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/ops/require.h"

namespace sparkdraft::ops {

// One step of the head for `rows` rows.
struct MarkovHeadParams {
  MarkovHeadType type = MarkovHeadType::gated;  // gated or rnn
  int rows = 0;
  int hidden = 0;           // H
  int rank = 0;             // R
  const bf16* h = nullptr;  // row r's h at h + r * h_stride (H values)
  int64_t h_stride = 0;
  const bf16* e = nullptr;  // [rows, R]: w1[prev]
  const bf16* w = nullptr;  // [P, K]: gate_proj or joint_proj weight
  const bf16* b = nullptr;  // [P]
  bf16* state = nullptr;    // rnn: [rows, R], s_{j-1} in, s_j out; gated: unused
  bf16* u = nullptr;        // [rows, R]: the bias chain's input (may be e itself)

  SD_HD int proj_rows() const { return type == MarkovHeadType::rnn ? 3 * rank : rank; }  // P
  SD_HD int proj_inputs() const {                                                        // K
    return type == MarkovHeadType::rnn ? 2 * rank + hidden : hidden + rank;
  }
  // Where e sits in the concatenated input x (H for gated, R for rnn).
  SD_HD int e_offset() const { return type == MarkovHeadType::rnn ? rank : hidden; }
  // Where h sits in x (0 for gated, 2R for rnn).
  SD_HD int h_offset() const { return type == MarkovHeadType::rnn ? 2 * rank : 0; }

  void check(const char* op = "markov_head") const {
    require(type == MarkovHeadType::gated || type == MarkovHeadType::rnn, op,
            "the head type must be gated or rnn");
    require(rows >= 0 && hidden >= 1 && rank >= 1, op,
            "needs rows >= 0, hidden >= 1 and rank >= 1, got rows " + std::to_string(rows) +
                ", hidden " + std::to_string(hidden) + ", rank " + std::to_string(rank));
    require(h_stride >= hidden, op, "needs h_stride >= hidden");
    require(rows == 0 || (h != nullptr && e != nullptr && w != nullptr && b != nullptr &&
                          u != nullptr && (type != MarkovHeadType::rnn || state != nullptr)),
            op, "null h, e, w, b, u or (rnn) state");
  }
};

// a = bf16(chain + f32(b)): the projection's output value.
SD_HD bf16 markov_proj_value(float chain, bf16 bias) { return to_bf16(chain + to_f32(bias)); }

// The gated head's unit: u = bf16(f32(bf16(sigmoid(a))) * f32(e)).
SD_HD bf16 markov_gated_unit(bf16 a, bf16 e) {
  const bf16 g = to_bf16(sigmoid_f32(to_f32(a)));
  return to_bf16(to_f32(g) * to_f32(e));
}

// The rnn head's unit: the next state *s and the output *u from (gate, cand, out) and s_prev.
SD_HD void markov_rnn_unit(bf16 gate, bf16 cand, bf16 out, bf16 s_prev, bf16* s, bf16* u) {
  const bf16 sg = to_bf16(sigmoid_f32(to_f32(gate)));
  const bf16 t1 = to_bf16(to_f32(sg) * to_f32(s_prev));
  const bf16 om = to_bf16(1.0f - to_f32(sg));
  const bf16 tc = to_bf16(tanh_f32(to_f32(cand)));
  const bf16 t2 = to_bf16(to_f32(om) * to_f32(tc));
  *s = to_bf16(to_f32(t1) + to_f32(t2));
  *u = to_bf16(tanh_f32(to_f32(out)));
}

// Row r's concatenated input x (K values) from h, e and (rnn) the state.
SD_HD bf16 markov_head_input(const MarkovHeadParams& p, int r, int k) {
  const int R = p.rank;
  if (p.type == MarkovHeadType::rnn) {
    if (k < R) return p.state[static_cast<int64_t>(r) * R + k];
    if (k < 2 * R) return p.e[static_cast<int64_t>(r) * R + (k - R)];
    return p.h[r * p.h_stride + (k - 2 * R)];
  }
  if (k < p.hidden) return p.h[r * p.h_stride + k];
  return p.e[static_cast<int64_t>(r) * R + (k - p.hidden)];
}

// Unit i of row r from the projection's fp32 chains acc [rows, P] (row stride P) and the
// assembled input x [rows, K]: writes u (and, rnn, the state).
SD_HD void markov_head_unit(const MarkovHeadParams& p, const bf16* x, const float* acc, int r,
                            int i) {
  const int R = p.rank, P = p.proj_rows(), K = p.proj_inputs();
  const float* a = acc + static_cast<int64_t>(r) * P;
  const bf16* xr = x + static_cast<int64_t>(r) * K;
  const int64_t at = static_cast<int64_t>(r) * R + i;
  if (p.type == MarkovHeadType::gated) {
    p.u[at] = markov_gated_unit(markov_proj_value(a[i], p.b[i]), xr[p.e_offset() + i]);
    return;
  }
  bf16 s, u;
  markov_rnn_unit(markov_proj_value(a[i], p.b[i]), markov_proj_value(a[R + i], p.b[R + i]),
                  markov_proj_value(a[2 * R + i], p.b[2 * R + i]), xr[i], &s, &u);
  p.state[at] = s;
  p.u[at] = u;
}

}  // namespace sparkdraft::ops
