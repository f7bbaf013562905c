// StepPlan (sparkdraft/plan.h): lookup, text, and the CPU backend's plan.
#include "sparkdraft/plan.h"

#include <sstream>

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

StepPlan cpu_plan(int tp) {
  StepPlan plan;
  plan.backend = "cpu";
  plan.parts = {
      {"context chain", "eager", "the reference ops of cpu/ops.h"},
      {"backbone", "eager", "the reference ops; GEMMs as tensor-core chains on the CPU twin"},
      {"lm_head", "eager",
       tp > 1 ? "vocab-parallel over " + std::to_string(tp) + " thread ranks" : "one rank"},
      {"markov loop", "eager",
       "bias as tensor-core chains on the CPU twin (core/mma.h)" +
           std::string(tp > 1 ? ", one packet all-gather per step over the thread ranks" : "")},
  };
  return plan;
}

}  // namespace sparkdraft
