// `sparkdraft check`: the exactness contract of SPEC section 3 on one
// checkpoint and scenario, with a readable report.
//
//   cpu             the CPU backend: every op its own, the matrix products on the
//                   tensor-core twin (nothing borrowed from the GPU);
//   gpu eager       the CUDA backend, eager Markov loop, no graph;
//   gpu fused       the CUDA backend, fused Markov loop, CUDA graph.
// CPU == GPU eager and GPU eager == GPU fused must hold bit for bit on draft
// tokens, the draft-logits cache and every layer's KV cache, every round (the
// comparisons and the report: sparkdraft/check.h).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sparkdraft/check.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/scenario.h"

namespace sparkdraft::cuda {

CheckReport check_draft(std::shared_ptr<const Checkpoint> ckpt, const ScenarioOptions& s);

}  // namespace sparkdraft::cuda
