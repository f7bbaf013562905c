// The contract of the Markov head and the sampler (contract.md sections 1.5, 3, 4). Per
// request row r and step j = 0..N-1:
//   prev    = the anchor (j = 0), else the token of step j-1
//   e       = w1[prev]                                               bf16 [R]
//   bias[v] = bf16( mma_chain(w2[v][0..R), e[0..R)) )
//             (core/mma.h: the tensor-core chain over the Markov rank R in increasing
//             k16 steps from +0; one rounding, to bf16, at the end)
//   s       = bf16(f32(base[r][j][v]) + f32(bias[v]))                (step logits)
//   l       = s, or with the transform bf16(t): t = f32(s) * multiplier,
//             cap: t = tanh_f32(t * inv_cap) * cap
//   cache[slot_r][j][v] = l          (slot -1: a padding row, nothing written)
//   z       = T > 0 ? f32(l) / T + gumbel(u) : f32(l)     (core/sampling.h noised_score,
//             u from Philox keyed by draft_step_seed(seed_r, a_r, j) and v)
//   token   = the lowest id whose z is NaN, else the lowest id of the maximum.
// The rule is associative and commutative: any split of the vocabulary (blocks,
// shards) folds to the same token in any order of equal-rank candidates.
#pragma once

#include <cstdint>

#include "sparkdraft/core/hd.h"

namespace sparkdraft {
struct ModelConfig;
}  // namespace sparkdraft

namespace sparkdraft::ops {

// One call's request rows as the Markov loop reads them: the one per-request view from the
// API boundary to the launchers (host pointers on the CPU, device pointers on the GPU; each
// array [num_rows]). The API's ProposeBatch carries the same arrays; a backend builds this
// view once, with the padding rows' anchors made safe to run (token and position 0).
struct MarkovRows {
  int num_rows = 0;
  const int64_t* anchor_tokens = nullptr;     // step 0's previous token
  const int64_t* anchor_positions = nullptr;  // a: keys the step seeds with the seed
  const int64_t* seeds = nullptr;
  const float* temperatures = nullptr;   // T >= 0, finite (0: greedy)
  const int64_t* cache_slots = nullptr;  // the row's draft-logits cache row; -1: padding
  // n_r (contract.md 9.5) or null (N): steps j >= n_r are not run for the row (step_slot -1:
  // no cache store; the loop sets their tokens to -1 at the end). Not clamped: j < n_r is
  // false for every j when n_r <= 0 and true for every step when n_r >= N.
  const int32_t* lengths = nullptr;
};

// Whether row r runs step j (contract.md 9.5), and the cache slot step j stores to: the
// row's slot while it runs, -1 (a padding row's: nothing stored) after its length.
SD_HD bool step_runs(const int32_t* lengths, int r, int j) {
  return lengths == nullptr || j < lengths[r];
}
SD_HD int64_t step_slot(const int64_t* cache_slots, const int32_t* lengths, int r, int j) {
  return step_runs(lengths, r, j) ? cache_slots[r] : -1;
}

// The output-logit transform, fixed at load: multiplier rounded to fp32,
// inv_cap = fp32(1) / fp32(cap).
struct LogitTransform {
  bool enabled = false;
  float multiplier = 1.0f;
  bool has_cap = false;
  float cap = 0.0f;
  float inv_cap = 0.0f;
  // ConfigError when the multiplier is not finite or the cap not finite and > 0.
  static LogitTransform from_config(const ModelConfig& c);
};

}  // namespace sparkdraft::ops
