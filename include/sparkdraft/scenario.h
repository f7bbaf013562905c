// A deterministic multi-round drafting scenario against any backend: what the
// demo runs and what the invariance tests compare across backends, batch
// compositions and TP sizes.
//
// Each request id has its own prompt length, seed, temperature and synthetic
// target hidden states, all derived from (scenario seed, request id) alone, so a
// request drafts the same tokens whatever batch it is in. Each round: the new
// verified context of every request is stored, one propose call drafts all rows,
// then a verifier accepts k of the N drafts and emits one token: the anchor and
// the k accepted tokens become context, and the emitted token at a + k + 1 is the
// next anchor. The verifier is either a mock (k and the emitted token seeded:
// the default, what `check` and the invariance tests compare) or the real one
// (DraftBackend::verify, contract.md section 8) against a seeded stand-in for the
// target's logits: t_j = f32(c_j) + target_noise * n, with c_j the request's
// draft-logits cache row j (row N-1 for the bonus position N) and n a seeded
// value of mean 0 and variance 1 per (request, round, position, vocabulary id).
// The draft then agrees with its stand-in target about as well as target_noise
// lets it, so the acceptance is that of a real draft rather than a chosen rate.
// With `lengths`, every odd round gives propose and the verifier a seeded per-request length
// n in [0, N] (contract.md 9.5; the mock then accepts k <= n): the even rounds run the full
// block, so one run covers both forms.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "sparkdraft/draft.h"

namespace sparkdraft {

struct ScenarioOptions {
  std::vector<int> request_ids{0, 1, 2};  // the real requests, in row order
  std::vector<int> padding_before;        // row indices (into the final rows) that are padding
  int rounds = 3;
  uint64_t seed = 1;
  int min_prompt = 12;  // prompt length in [min_prompt, min_prompt + 16)
  int page_size = 16;
  bool real_verifier = false;  // the real verifier against the stand-in target (above)
  float target_noise = 1.0f;   // its noise scale (>= 0, finite)
  bool lengths = false;        // per-request lengths in the odd rounds (above)
};

struct RequestDraft {
  int request_id;
  int64_t anchor_token, anchor_position;
  float temperature;
  std::vector<int64_t> tokens;  // [N]
  std::vector<bf16> logits;     // [N, V] the request's draft-logits cache rows
  std::vector<float>
      confidences;      // [N] with the confidence head (contract.md section 9), else empty
  int length = 0;       // n: the steps drafted (N without lengths)
  int accepted = 0;     // k: drafts the verifier accepted
  int64_t emitted = 0;  // the token it emitted at a + k + 1 (the next anchor)
};

struct ScenarioRound {
  std::vector<RequestDraft> drafts;  // one per real request, in request_ids order
  StageTimings timings;
};

// Options a backend needs to run the scenario (rows, pages, slots).
DraftOptions scenario_draft_options(const ModelConfig& config, const ScenarioOptions& s);

// Runs the rounds; `on_round` (optional) sees each round as it completes.
std::vector<ScenarioRound> run_scenario(
    DraftBackend& backend, const ScenarioOptions& s,
    const std::function<void(int round, const ScenarioRound&)>& on_round = nullptr);

}  // namespace sparkdraft
