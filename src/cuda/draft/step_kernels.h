// The plan's list of the kernels one captured step runs (issue: "the plan names every
// kernel that runs"). The step is captured under a LaunchLog (cuda/common/launch.h):
// the log's kernels must be the graph's kernel nodes, in the order the graph runs them;
// a graph kernel the log lacks was launched around the one launch path, and the capture
// refuses it. Plain C++ (the kernels are opaque pointers), tested without a GPU.
#pragma once

#include <string>
#include <vector>

#include "sparkdraft/error.h"
#include "sparkdraft/plan.h"

namespace sparkdraft::cuda {

// The plan part "kernels, <rows> rows": "<n> kernels", and their names in the order the
// graph runs them, a run of one kernel written once with its count ("name x5").
// `logged` are the LaunchLog's kernels (`names` theirs), `nodes` the graph's. Every
// logged kernel must be a node, in order; a node the log lacks is a collective's kernel
// (NCCL's, named "collective") when `collectives` (a communicator is in the step), and
// refused otherwise: DeviceError, as is a logged kernel the graph lacks.
inline PlanPart step_kernels_part(int rows, const std::vector<std::string>& names,
                                  const std::vector<const void*>& logged,
                                  const std::vector<const void*>& nodes, bool collectives) {
  const std::string where = "the step's graph at " + std::to_string(rows) + " rows: ";
  if (names.size() != logged.size())
    throw DeviceError(where + "the launch log holds " + std::to_string(names.size()) +
                      " names for " + std::to_string(logged.size()) + " kernels");
  std::vector<std::string> run;  // the names in graph order
  size_t j = 0;
  for (size_t i = 0; i < nodes.size(); ++i) {
    if (j < logged.size() && nodes[i] == logged[j]) {
      run.push_back(names[j++]);
    } else if (collectives) {
      run.push_back("collective");
    } else {
      throw DeviceError(where + "kernel node " + std::to_string(i) + " of " +
                        std::to_string(nodes.size()) +
                        " is not in the launch log (launched outside cuda/common/launch.h)" +
                        (j < logged.size() ? "; the log's next kernel is " + names[j] : ""));
    }
  }
  if (j != logged.size())
    throw DeviceError(where + "the graph lacks the launch log's kernel " + std::to_string(j) +
                      " (" + names[j] + ") and the " + std::to_string(logged.size() - j - 1) +
                      " after it");
  std::string list;
  for (size_t i = 0; i < run.size();) {
    size_t k = i + 1;
    while (k < run.size() && run[k] == run[i]) ++k;
    if (!list.empty()) list += ", ";
    list += run[i];
    if (k - i > 1) list += " x" + std::to_string(k - i);
    i = k;
  }
  return PlanPart{"kernels, " + std::to_string(rows) + " rows",
                  std::to_string(run.size()) + " kernels", list};
}

// Puts `part` into `plan`, replacing a part of the same name.
inline void put_part(StepPlan& plan, PlanPart part) {
  for (PlanPart& p : plan.parts)
    if (p.part == part.part) {
      p = std::move(part);
      return;
    }
  plan.parts.push_back(std::move(part));
}

}  // namespace sparkdraft::cuda
