// The CPU vs GPU vs fused comparison of `sparkdraft check` (see check_draft.h).
#include "sparkdraft/cuda/check_draft.h"

#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/draft.h"
#include "sparkdraft/cuda/kernels.h"

namespace sparkdraft::cuda {

CheckReport check_draft(std::shared_ptr<const Checkpoint> ckpt, const ScenarioOptions& s) {
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
  CheckSide eager_side, fused_side;
  {
    CudaDraft eager(ckpt, o, eager_opts);
    eager_side = run_check_side(eager, s);
  }
  {
    CudaDraft fused(ckpt, o, CudaDraftOptions{});
    report.mode = fused.markov_fused() ? "Markov loop fused" : "Markov loop eager, fused refused";
    fused_side = run_check_side(fused, s);
  }
  compare_check_sides(report, cpu_side, eager_side, "cpu vs gpu eager");
  compare_check_sides(report, eager_side, fused_side, "gpu eager vs gpu fused+graph");
  return report;
}

}  // namespace sparkdraft::cuda
