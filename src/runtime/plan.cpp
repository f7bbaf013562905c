// StepPlan (sparkdraft/plan.h): lookup, text, and the CPU backend's plan.
#include "sparkdraft/plan.h"

#include <sstream>

#include "runtime/layer_shard.h"
#include "sparkdraft/error.h"

namespace sparkdraft {

const PlanPart& StepPlan::at(std::string_view part) const {
  for (const PlanPart& p : parts)
    if (p.part == part) return p;
  throw InvalidArgument("the " + backend + " plan has no part \"" + std::string(part) + "\"");
}

std::string StepPlan::text() const {
  std::ostringstream os;
  for (const PlanPart& p : parts) {
    os << p.part << ": " << p.variant;
    if (!p.reason.empty()) os << " (" << p.reason << ")";
    os << "\n";
  }
  return os.str();
}

StepPlan cpu_plan(const ModelConfig& c, int tp) {
  const std::string ranks = std::to_string(tp) + " thread ranks";
  const std::string why = layer_shard_refusal(c, tp);
  const bool sharded = tp > 1 && why.empty();
  PlanPart layers{"layers", sharded ? "sharded" : "replicated", ""};
  if (sharded)
    layers.reason = "over " + ranks +
                    ": QKV and the KV caches by heads, gate_up by columns, o_proj and down_proj "
                    "by canonical K slices with the slice tree completed by a tree all-reduce";
  else if (tp > 1)
    layers.reason = why + "; the vocabulary still shards";
  else
    layers.reason = "one rank";
  StepPlan plan;
  plan.backend = "cpu";
  plan.parts = {
      {"context chain", "eager",
       "the reference ops of cpu/ops.h" +
           std::string(sharded ? "; K/V by KV heads over " + ranks : "")},
      {"backbone", "eager", "the reference ops; GEMMs as tensor-core chains on the CPU twin"},
      layers,
      {"lm_head", "eager", tp > 1 ? "vocab-parallel over " + ranks : "one rank"},
      {"markov loop", "eager",
       "bias as tensor-core chains on the CPU twin (core/mma.h)" +
           std::string(tp > 1 ? ", one packet all-gather per step over the thread ranks" : "") +
           (c.reduced_vocab() ? "; reduced draft vocabulary (" + std::to_string(c.draft_vocab()) +
                                    " of " + std::to_string(c.vocab_size) +
                                    " ids): sampled as target ids through d2t, -inf cached "
                                    "outside it"
                              : std::string()) +
           (c.topk_markov()
                ? "; top-k loop (contract.md section 12): the bias on the " +
                      std::to_string(c.markov_topk) +
                      " base top-k candidates of each position, -inf elsewhere" +
                      (tp > 1 ? ", the ranks' top-k lists all-gathered and merged" : std::string())
                : std::string()) +
           (c.markov_head_proj() ? std::string("; ") + to_string(c.markov_head_type) +
                                       " Markov head (contract.md section 13): per step " +
                                       (c.markov_head_type == MarkovHeadType::gated
                                            ? "gate_proj over [h ; e] as tensor-core chains "
                                              "on the CPU twin, u = sigmoid(.) * e"
                                            : "joint_proj over [s ; e ; h] as tensor-core "
                                              "chains on the CPU twin, the state update, u = "
                                              "tanh(out)") +
                                       ", then the bias chains on u" +
                                       (tp > 1 ? "; the projection replicated on every rank" : "")
                                 : std::string())},
  };
  if (!c.sample_from_anchor)
    plan.parts.insert(plan.parts.begin() + 3,
                      {"layout", "fill-in",
                       "1 + N query slots per request (contract.md section 14): the backbone "
                       "and the KV insert over every slot, then slots 1 .. N copied out for "
                       "lm_head, the Markov loop and the cache"});
  if (c.confidence_head)
    plan.parts.push_back({"confidence head", "eager",
                          "after the Markov loop on rank 0, replicated (one canonical dot product "
                          "per drafted position)"});
  return plan;
}

}  // namespace sparkdraft
