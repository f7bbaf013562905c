// The CPU vs GPU vs fused comparison of `sparkdraft check` (see check_draft.h).
#include "sparkdraft/cuda/check_draft.h"

#include <cstring>
#include <sstream>

#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/draft.h"
#include "sparkdraft/cuda/kernels.h"

namespace sparkdraft::cuda {

struct GpuMatmul::Impl {
  DeviceBuffer<bf16> q, cache, out;
  DeviceBuffer<int32_t> tables, token_request;
  DeviceBuffer<int64_t> positions, kv_lens;
  DeviceBuffer<unsigned char> ws;

  template <class T>
  static void fit(DeviceBuffer<T>& b, size_t n) {
    if (b.size() < n) b = DeviceBuffer<T>(n);
  }

  void run_attention(const ops::AttentionParams& p, const bf16* hq, const bf16* hcache,
                     bf16* hout) {
    int requests = 0;
    for (int t = 0; t < p.tokens; ++t) requests = std::max(requests, p.token_request[t] + 1);
    requests = std::max(requests, 1);
    int64_t max_kv = 0;
    for (int r = 0; r < requests; ++r) max_kv = std::max(max_kv, p.kv_lens[r]);
    // The cache extent: every page any block table entry names.
    int64_t slots = 0;
    for (int i = 0; i < requests * p.max_pages; ++i)
      slots = std::max<int64_t>(slots, (static_cast<int64_t>(p.block_tables[i]) + 1) * p.page_size);
    const size_t per_slot = static_cast<size_t>(p.kv_heads) * 2 * p.head_dim;
    const size_t qn = static_cast<size_t>(p.tokens - 1) * p.q_stride + p.heads * p.head_dim;
    fit(q, qn);
    q.upload(hq, qn);
    fit(cache, slots * per_slot);
    cache.upload(hcache, slots * per_slot);
    fit(tables, static_cast<size_t>(requests) * p.max_pages);
    tables.upload(p.block_tables, static_cast<size_t>(requests) * p.max_pages);
    fit(token_request, p.tokens);
    token_request.upload(p.token_request, p.tokens);
    fit(positions, p.tokens);
    positions.upload(p.positions, p.tokens);
    fit(kv_lens, requests);
    kv_lens.upload(p.kv_lens, requests);
    ops::AttentionParams ap = p;  // the same params on the device copies
    ap.block_tables = tables.data();
    ap.token_request = token_request.data();
    ap.positions = positions.data();
    ap.kv_lens = kv_lens.data();
    ap.max_kv_len = std::max<int64_t>(max_kv, 1);
    const size_t wsb = attention_workspace_bytes(ap);
    fit(ws, wsb);
    const size_t on = static_cast<size_t>(p.tokens) * p.heads * p.head_dim;
    fit(out, on);
    attention(ap, q.data(), cache.data(), out.data(), ws.data(), wsb, nullptr);
    out.download(hout, on);
  }
};

GpuMatmul::GpuMatmul() : impl_(std::make_unique<Impl>()) {}
GpuMatmul::~GpuMatmul() = default;

MatmulOps GpuMatmul::ops() {
  MatmulOps m;
  Impl* im = impl_.get();
  m.attention = [im](const ops::AttentionParams& p, const bf16* q, const bf16* cache, bf16* out) {
    im->run_attention(p, q, cache, out);
  };
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
