// The contract of the confidence head (contract.md section 9). Per request row r
// (cache slot -1: a padding row, every value +0 and nothing read) and step j = 0..N-1
// (with lengths, j < n_r, contract.md 9.5; the steps past it +0, nothing read):
//   prev = x_0 (the anchor token) for j = 0, else draft_tokens[r][j-1]
//   h    = hidden[r * N + j] (the final-normed hidden row lm_head reads; bf16, H)
//   e    = w1[prev] (bf16, rank values; none for a head without the Markov part)
//   c    = sigmoid_f32(canonical_dot([h ; e], w) + b)  (fp32; core/confidence.h
//          gives the rounding points: fp32 widening (exact), one fma per term in the
//          canonical order of core/reduce.h, one fp32 add of the bias, our sigmoid)
//   out[r][j] = c; with per-position calibration (STS, contract.md 9.1) the sigmoid reads
//   z / T_j (one fp32 division) instead of z
// ConfidenceParams below is what cpu:: and cuda:: take.
#pragma once

#include <cmath>
#include <cstdint>
#include <string>

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/hd.h"
#include "sparkdraft/ops/markov.h"
#include "sparkdraft/ops/require.h"

namespace sparkdraft::ops {

struct ConfidenceParams {
  int rows = 0;                            // R request rows
  int steps = 0;                           // N
  int hidden = 0;                          // H
  int rank = 0;                            // the Markov rank in the input (0: h alone)
  const bf16* hidden_states = nullptr;     // [rows * N, hidden]
  const int64_t* anchor_tokens = nullptr;  // [rows] x_0 (ids in [0, vocab) for non-padding rows)
  const int64_t* draft_tokens = nullptr;   // [rows, N] (the Markov loop's tokens)
  const int64_t* cache_slots = nullptr;    // [rows], -1 = padding
  const bf16* w1 = nullptr;                // [vocab, rank] markov_w1 (rank > 0)
  const bf16* weight = nullptr;            // [hidden + rank]
  const bf16* bias = nullptr;              // [1]
  float* out = nullptr;                    // [rows, N]
  const int32_t* lengths = nullptr;        // [rows] n_r or null (N): ops::step_runs
  // Per-position temperature calibration (STS, contract.md 9.1): with `calibrated`, step j's
  // value is sigmoid(z / temperatures[j]); each finite and > 0. N <= kMaxSteps (the config's
  // block_size bound), passed by value so that a kernel needs no extra buffer.
  static constexpr int kMaxSteps = 64;
  bool calibrated = false;
  float temperatures[kMaxSteps] = {};

  // The only validation of these fields (InvalidArgument naming the first bad one);
  // the token ids are the caller's (validate_propose and the Markov loop).
  void check() const {
    const char* op = "confidence";
    require(rows >= 0, op, "rows must be >= 0, got " + std::to_string(rows));
    require(steps >= 1, op, "steps must be >= 1, got " + std::to_string(steps));
    require(hidden >= 1, op, "hidden must be >= 1, got " + std::to_string(hidden));
    require(rank >= 0, op, "rank must be >= 0, got " + std::to_string(rank));
    require(static_cast<int64_t>(hidden) + rank <= 0x7fffffff, op,
            "hidden + rank must fit a 32-bit int");
    if (rows == 0) return;
    require(hidden_states && anchor_tokens && draft_tokens && cache_slots && weight && bias, op,
            "an input array is null");
    require(rank == 0 || w1 != nullptr, op, "w1 is null but rank is " + std::to_string(rank));
    require(out != nullptr, op, "out is null");
    if (calibrated) {
      require(steps <= kMaxSteps, op,
              "calibrated steps must be <= " + std::to_string(kMaxSteps) + ", got " +
                  std::to_string(steps));
      for (int j = 0; j < steps; ++j)
        require(std::isfinite(temperatures[j]) && temperatures[j] > 0.0f, op,
                "temperatures[" + std::to_string(j) + "] must be finite and > 0, got " +
                    std::to_string(temperatures[j]));
    }
  }
  // Whether (r, j) has a value: not a padding row, and j below the row's length.
  SD_HD bool runs(int64_t r, int64_t j) const {
    return cache_slots[r] >= 0 && step_runs(lengths, static_cast<int>(r), static_cast<int>(j));
  }
  // Step j's calibration temperature, or 0 for none (confidence_finish's convention).
  SD_HD float temperature(int j) const { return calibrated ? temperatures[j] : 0.0f; }
  int inputs() const { return hidden + rank; }
};

}  // namespace sparkdraft::ops
