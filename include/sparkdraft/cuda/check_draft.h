// `sparkdraft check`: the exactness contract of SPEC section 3 on one
// checkpoint and scenario, with a readable report.
//
//   cpu             the CPU backend: every op its own, the matrix products on the
//                   tensor-core twin (nothing borrowed from the GPU);
//   gpu eager       the CUDA backend, eager Markov loop, no graph;
//   gpu fused       the CUDA backend, fused Markov loop, CUDA graph.
// CPU == GPU eager and GPU eager == GPU fused must hold bit for bit on draft
// tokens, the draft-logits cache and every layer's KV cache, every round.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sparkdraft/draft.h"
#include "sparkdraft/scenario.h"

namespace sparkdraft::cuda {

struct CheckLine {
  std::string what;  // "round 1 request 2 tokens: cpu vs gpu eager"
  bool equal = true;
  std::string detail;  // first mismatch: index, found, expected
};

struct CheckReport {
  std::vector<CheckLine> lines;
  bool markov_fused = false;
  bool ok() const;
  std::string text() const;  // one line per comparison, then a summary
};

CheckReport check_draft(std::shared_ptr<const Checkpoint> ckpt, const ScenarioOptions& s);

}  // namespace sparkdraft::cuda
