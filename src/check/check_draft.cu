// The CPU vs GPU vs fused comparison of `sparkdraft check` (see check_draft.h).
#include "sparkdraft/cuda/check_draft.h"

#include <cstring>
#include <sstream>
#include <unordered_map>

#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/draft.h"
#include "sparkdraft/cuda/gemm.h"
#include "sparkdraft/cuda/kernels.h"

namespace sparkdraft::cuda {

struct GpuMatmul::Impl {
  GemmRunner gemm;
  std::unordered_map<const void*, DeviceBuffer<bf16>> weights;
  DeviceBuffer<bf16> x, y;

  template <class T>
  static void fit(DeviceBuffer<T>& b, size_t n) {
    if (b.size() < n) b = DeviceBuffer<T>(n);
  }

  void run_gemm(const bf16* hx, int64_t xs, const bf16* hw, int M, int N, int K, bf16* hy,
                int64_t ys) {
    // Weights are the backend's persistent host matrices (checkpoint mapping or
    // packed copies): uploaded once per pointer and shape.
    auto it = weights.find(hw);
    if (it == weights.end() || it->second.size() != static_cast<size_t>(N) * K) {
      DeviceBuffer<bf16> w(static_cast<size_t>(N) * K);
      w.upload(hw, w.size());
      it = weights.insert_or_assign(hw, std::move(w)).first;
    }
    const size_t xn = static_cast<size_t>(M - 1) * xs + K, yn = static_cast<size_t>(M - 1) * ys + N;
    fit(x, xn);
    fit(y, yn);
    x.upload(hx, xn);
    // Keep the columns between rows that the GEMM does not write.
    y.upload(hy, yn);
    gemm.run(x.data(), xs, it->second.data(), M, N, K, y.data(), ys, nullptr);
    y.download(hy, yn);
  }
};

GpuMatmul::GpuMatmul() : impl_(std::make_unique<Impl>()) {}
GpuMatmul::~GpuMatmul() = default;

MatmulOps GpuMatmul::ops() {
  MatmulOps m;
  Impl* im = impl_.get();
  m.gemm = [im](const bf16* x, int64_t xs, const bf16* w, int M, int N, int K, bf16* y,
                int64_t ys) { im->run_gemm(x, xs, w, M, N, K, y, ys); };
  return m;
}

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
  GpuMatmul matmul;
  const MatmulOps ops = matmul.ops();
  auto cpu = make_cpu_backend(ckpt, o, &ops);
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
  compare_sides(report, cpu_side, eager_side, "cpu (gpu matmuls) vs gpu eager");
  compare_sides(report, eager_side, fused_side, "gpu eager vs gpu fused+graph");
  return report;
}

}  // namespace sparkdraft::cuda
