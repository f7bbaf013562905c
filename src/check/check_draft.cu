// The CPU vs GPU vs fused comparison of `sparkdraft check` (see check_draft.h).
#include "check/check_draft.h"

#include "cuda/kernels.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/draft.h"
#include "sparkdraft/error.h"
#include "sparkdraft/plan.h"

namespace sparkdraft::cuda {

CheckReport check_draft(std::shared_ptr<const Checkpoint> ckpt, const ScenarioOptions& s,
                        const CudaDraftOptions& fused_opts) {
  CheckReport report;
  DraftOptions o = scenario_draft_options(ckpt->config(), s);
  o.threads = 0;
  auto cpu = make_cpu_backend(ckpt, o);
  const CheckSide cpu_side = run_check_side(*cpu, s);
  cpu.reset();
  CudaDraftOptions eager_opts;
  eager_opts.fused_markov = false;
  eager_opts.cuda_graph = false;
  eager_opts.fused_backbone = false;
  eager_opts.step_pdl = false;  // the GPU reference: each kernel after the last one completes
  CheckSide eager_side, fused_side;
  {
    CudaDraft eager(ckpt, o, eager_opts);
    eager_side = run_check_side(eager, s);
  }
  {
    CudaDraft fused(ckpt, o, fused_opts);
    report.mode = fused.markov_fused() ? "Markov loop fused" : "Markov loop eager, fused refused";
    fused_side = run_check_side(fused, s);
  }
  compare_check_sides(report, cpu_side, eager_side, "cpu vs gpu eager");
  compare_check_sides(report, eager_side, fused_side, "gpu eager vs gpu fused+graph");
  return report;
}

CheckReport check_tp(std::shared_ptr<const Checkpoint> ckpt, const ScenarioOptions& s, int tp_size,
                     const std::vector<int>& devices, TpReduce reduce) {
  if (tp_size < 2)
    throw InvalidArgument("check --tp: compares TP n >= 2 with TP 1, got tp " +
                          std::to_string(tp_size));
  DraftOptions o = scenario_draft_options(ckpt->config(), s);
  CheckSide one, many;
  std::vector<bf16> hidden_one;
  {
    CudaDraft tp1(ckpt, o, CudaDraftOptions{});
    one = run_check_side(tp1, s);
    hidden_one = tp1.last_hidden();
  }
  o.tp = tp_size;
  CheckReport report;
  const std::string names = "gpu tp 1 vs gpu tp " + std::to_string(tp_size);
  {
    CudaDraftOptions co;
    co.tp_reduce = reduce;
    auto tpn = make_cuda_backend(ckpt, o, co, devices);
    const StepPlan& plan = tpn->plan();
    const PlanPart& tp = plan.at("tensor parallel");
    const PlanPart& graph = plan.at("cuda graph");
    report.mode = "GPU TP " + std::to_string(tp_size) + " vs TP 1; " + tp.variant + ": " +
                  tp.reason + "; cuda graph " + graph.variant;
    many = run_check_side(*tpn, s);
    const auto* view = dynamic_cast<const CudaTpView*>(tpn.get());
    if (!view) throw std::logic_error("check_tp: the TP backend has no rank view");
    compare_check_sides(report, one, many, names);
    for (int r = 0; r < view->tp_size(); ++r)
      report.lines.push_back(
          compare_bf16("last round's hidden states, rank " + std::to_string(r) + ": " + names,
                       view->last_hidden(r), hidden_one));
  }
  return report;
}

}  // namespace sparkdraft::cuda
