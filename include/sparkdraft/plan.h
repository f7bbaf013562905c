// What runs: one plan per backend instance, computed once from the config, the
// device and the options. Each part of the draft step names the variant that runs
// and why (the reason a faster variant does not run, or what the variant is).
// `sparkdraft plan` prints it; the runtime runs it (CudaDraft reads its parts, and
// refuses to start if an object it builds disagrees with the plan).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "sparkdraft/config.h"

namespace sparkdraft {

struct PlanPart {
  std::string part;     // "context chain", "backbone", "lm_head", "markov loop", "cuda graph"
  std::string variant;  // "eager", "fused", "on", "off", ...
  std::string reason;   // why this variant (empty: nothing to say)
};

struct StepPlan {
  std::string backend;  // "cpu" or "cuda"
  std::vector<PlanPart> parts;

  // The part named `part` (InvalidArgument when the plan has none).
  const PlanPart& at(std::string_view part) const;
  bool runs(std::string_view part, std::string_view variant) const {
    return at(part).variant == variant;
  }
  // One line per part: "<part>: <variant> (<reason>)".
  std::string text() const;
};

// The CPU backend's plan at `tp` thread ranks (DraftOptions::tp): every part
// eager, on the reference ops; the "layers" part says whether the layers shard
// over the ranks (contract.md section 6) or stay replicated, and why.
StepPlan cpu_plan(const ModelConfig& config, int tp);

}  // namespace sparkdraft
