// The comparisons of `sparkdraft check` (contract.md section 3's equalities), backend
// against backend over one multi-round scenario, with a readable report.
//
// A side is what one backend produced: every round's draft tokens and
// draft-logits cache rows per request, then every layer's KV cache (in the TP 1
// layout whatever the backend's TP size). Two sides are compared bit for bit,
// each comparison one line of the report naming where the first mismatch is.
//
//   check_tp_invariance   the CPU backend at TP n against the CPU backend at TP 1
//                         (contract.md section 3.3: the TP size changes no bit): no GPU
//                         needed; the layers shard where the config splits
//                         (runtime/layer_shard.h), the vocabulary always.
//   cuda::check_draft     CPU vs GPU eager vs GPU fused (check/check_draft.h).
//   cuda::check_tp        the GPU backend at TP n against the GPU at TP 1, hidden
//                         states of every rank included (check/check_draft.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sparkdraft/checkpoint.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/scenario.h"

namespace sparkdraft {

struct CheckLine {
  std::string what;  // "round 1 request 2 tokens: cpu vs gpu eager"
  bool equal = true;
  std::string detail;  // first mismatch: index, found, expected
};

struct CheckReport {
  std::vector<CheckLine> lines;
  std::string mode;  // printed after the summary, e.g. "Markov loop fused"
  bool ok() const;   // at least one comparison, all equal
  // One line per comparison, then "check: all K of K comparisons bit for bit
  // equal (mode)" or "check: J of K ...".
  std::string text() const;
};

struct CheckSide {
  std::vector<ScenarioRound> rounds;
  std::vector<std::vector<bf16>> kv;  // [layer] the backend's kv_cache(layer)
};

// One comparison of two bf16 arrays, bit for bit (sizes first, then the first
// differing index with both bit patterns).
CheckLine compare_bf16(const std::string& what, const std::vector<bf16>& found,
                       const std::vector<bf16>& expected);

// Runs the scenario on `backend` (built with scenario_draft_options) and keeps
// its outputs and KV caches.
CheckSide run_check_side(DraftBackend& backend, const ScenarioOptions& s);

// Appends one line per round, request and output (tokens, draft logits) and one
// per layer's KV cache: `found` against `expected`, labelled ": names".
void compare_check_sides(CheckReport& report, const CheckSide& expected, const CheckSide& found,
                         const std::string& names);

// The CPU backend at tp_size (a power of two >= 2 dividing the vocabulary, as
// DraftOptions::tp) against the CPU backend at TP 1. The report's mode says
// whether the layers were sharded, and why not. InvalidArgument for tp_size < 2.
CheckReport check_tp_invariance(std::shared_ptr<const Checkpoint> ckpt, const ScenarioOptions& s,
                                int tp_size);

}  // namespace sparkdraft
