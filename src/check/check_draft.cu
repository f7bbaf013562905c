// The CPU vs GPU vs fused comparison of `sparkdraft check` (see check_draft.h).
#include "sparkdraft/cuda/check_draft.h"

#include <cstring>
#include <sstream>

#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/draft.h"
#include "sparkdraft/cuda/kernels.h"

namespace sparkdraft::cuda {

bool CheckReport::ok() const {
  for (const auto& l : lines)
    if (!l.equal) return false;
  return !lines.empty();
}

std::string CheckReport::text() const {
  std::ostringstream os;
  int bad = 0;
  for (const auto& l : lines) {
    os << (l.equal ? "  equal     " : "  DIFFERENT ") << l.what;
    if (!l.equal) {
      os << "  (" << l.detail << ")";
      ++bad;
    }
    os << "\n";
  }
  os << (bad == 0 ? "check: all " : "check: ") << (lines.size() - bad) << " of " << lines.size()
     << " comparisons bit for bit equal (Markov loop "
     << (markov_fused ? "fused" : "eager, fused refused") << ")\n";
  return os.str();
}

namespace {

CheckLine compare_bf16(const std::string& what, const std::vector<bf16>& found,
                       const std::vector<bf16>& expected) {
  CheckLine line{what, true, ""};
  if (found.size() != expected.size()) {
    line.equal = false;
    line.detail =
        "sizes " + std::to_string(found.size()) + " vs " + std::to_string(expected.size());
    return line;
  }
  for (size_t i = 0; i < found.size(); ++i)
    if (found[i].bits != expected[i].bits) {
      std::ostringstream os;
      os << "index " << i << ": found 0x" << std::hex << found[i].bits << " expected 0x"
         << expected[i].bits;
      line.equal = false;
      line.detail = os.str();
      break;
    }
  return line;
}

CheckLine compare_tokens(const std::string& what, const std::vector<int64_t>& found,
                         const std::vector<int64_t>& expected) {
  CheckLine line{what, found == expected, ""};
  if (!line.equal)
    for (size_t i = 0; i < found.size() && i < expected.size(); ++i)
      if (found[i] != expected[i]) {
        line.detail = "step " + std::to_string(i) + ": found " + std::to_string(found[i]) +
                      " expected " + std::to_string(expected[i]);
        break;
      }
  return line;
}

struct Side {
  std::vector<ScenarioRound> rounds;
  std::vector<std::vector<bf16>> kv;
};

Side run_side(DraftBackend& backend, const ScenarioOptions& s) {
  Side side;
  side.rounds = run_scenario(backend, s);
  for (int l = 0; l < backend.config().num_layers; ++l) side.kv.push_back(backend.kv_cache(l));
  return side;
}

void compare_sides(CheckReport& report, const Side& a, const Side& b, const std::string& names) {
  for (size_t round = 0; round < a.rounds.size(); ++round)
    for (size_t i = 0; i < a.rounds[round].drafts.size(); ++i) {
      const RequestDraft& da = a.rounds[round].drafts[i];
      const RequestDraft& db = b.rounds[round].drafts[i];
      const std::string where =
          "round " + std::to_string(round) + " request " + std::to_string(da.request_id);
      report.lines.push_back(compare_tokens(where + " tokens: " + names, db.tokens, da.tokens));
      report.lines.push_back(compare_bf16(where + " draft logits: " + names, db.logits, da.logits));
    }
  for (size_t l = 0; l < a.kv.size(); ++l)
    report.lines.push_back(
        compare_bf16("KV cache layer " + std::to_string(l) + ": " + names, b.kv[l], a.kv[l]));
}

}  // namespace

CheckReport check_draft(std::shared_ptr<const Checkpoint> ckpt, const ScenarioOptions& s) {
  CheckReport report;
  DraftOptions o = scenario_draft_options(ckpt->config(), s);
  o.threads = 0;
  auto cpu = make_cpu_backend(ckpt, o);
  const Side cpu_side = run_side(*cpu, s);
  cpu.reset();
  CudaDraftOptions eager_opts;
  eager_opts.fused_markov = false;
  eager_opts.cuda_graph = false;
  eager_opts.fused_backbone = false;
  Side eager_side, fused_side;
  {
    CudaDraft eager(ckpt, o, eager_opts);
    eager_side = run_side(eager, s);
  }
  {
    CudaDraft fused(ckpt, o, CudaDraftOptions{});
    report.markov_fused = fused.markov_fused();
    fused_side = run_side(fused, s);
  }
  compare_sides(report, cpu_side, eager_side, "cpu (gpu attention) vs gpu eager");
  compare_sides(report, eager_side, fused_side, "gpu eager vs gpu fused+graph");
  return report;
}

}  // namespace sparkdraft::cuda
