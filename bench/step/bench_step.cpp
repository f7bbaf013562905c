// The draft step benchmark (bench_step.h): two backends on one checkpoint, the
// same context stored in both, the step checked eager == fused bit for bit, then
// each backend's step timed in its own CUDA graph against the floor.
#include "step/bench_step.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <iomanip>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda/common/graph.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/draft.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw InvalidArgument("bench_step: " + what);
}

// One backend's outputs of the step: device buffers and their last host copy.
struct StepOutputs {
  DeviceBuffer<int64_t> tokens;
  DeviceBuffer<bf16> cache;
  std::vector<int64_t> host_tokens;
  std::vector<bf16> host_cache;
  StepOutputs(size_t n_tokens, size_t n_cache) : tokens(n_tokens), cache(n_cache) {}
  ProposeOutputs device() { return {tokens.data(), cache.data()}; }
  void zero(cudaStream_t s) {
    tokens.zero(s);
    cache.zero(s);
  }
  void download(cudaStream_t s) {
    host_tokens = tokens.download(s);
    host_cache = cache.download(s);
  }
};

// Where `found` differs from `expected` (tokens [rows, N], cache [slots, N, V]): the
// first differing element and how many differ; "" when bit for bit equal.
std::string first_difference(const std::string& what, const std::vector<int64_t>& found_tokens,
                             const std::vector<bf16>& found_cache,
                             const std::vector<int64_t>& tokens, const std::vector<bf16>& cache,
                             int64_t n, int64_t v) {
  std::ostringstream os;
  int64_t count = 0;
  for (size_t i = 0; i < tokens.size(); ++i)
    if (found_tokens[i] != tokens[i] && count++ == 0)
      os << what << ": draft token of row " << static_cast<int64_t>(i) / n << " step "
         << static_cast<int64_t>(i) % n << ": found " << found_tokens[i] << ", expected "
         << tokens[i];
  if (count > 0) {
    os << " (" << count << " of " << tokens.size() << " tokens differ)";
    return os.str();
  }
  for (size_t i = 0; i < cache.size(); ++i)
    if (found_cache[i].bits != cache[i].bits && count++ == 0) {
      const int64_t idx = static_cast<int64_t>(i);
      os << what << ": draft-logits cache[slot " << idx / (n * v) << "][step " << idx / v % n
         << "][" << idx % v << "]: found 0x" << std::hex << found_cache[i].bits << ", expected 0x"
         << cache[i].bits << std::dec;
    }
  if (count > 0) os << " (" << count << " of " << cache.size() << " entries differ)";
  return os.str();
}

std::string first_difference(const std::string& what, const StepOutputs& found,
                             const StepOutputs& expected, int64_t n, int64_t v) {
  return first_difference(what, found.host_tokens, found.host_cache, expected.host_tokens,
                          expected.host_cache, n, v);
}

}  // namespace

StepBenchResult bench_step(std::shared_ptr<const Checkpoint> ckpt, const StepBenchOptions& o,
                           std::ostream& out) {
  require(ckpt != nullptr, "no checkpoint");
  require(o.ctx >= 1 && o.rows >= 1 && o.rows <= kMaxReqs,
          "ctx must be >= 1 and rows in [1, " + std::to_string(kMaxReqs) + "]");
  require(o.repeats >= 1 && o.warmup >= 0, "repeats must be >= 1 and warmup >= 0");
  require(o.max_context_tokens >= 1 && o.max_context_tokens <= kMaxContextTokens,
          "max_context_tokens must be in [1, " + std::to_string(kMaxContextTokens) + "]");
  const ModelConfig& c = ckpt->config();
  const int64_t n = c.block_size, v = c.vocab_size, rows = o.rows, ctx = o.ctx;
  const std::string label = o.preset.empty() ? o.checkpoint : o.preset;

  StepBenchResult r;
  r.options = o;
  r.gpu = query_gpu();
  r.vocab = c.vocab_size;
  r.markov_rank = c.markov_rank;
  r.steps = c.block_size;

  // R requests of ctx + N positions; request r owns pages r * pages_per_req + p.
  DraftOptions d;
  d.page_size = 16;
  const int64_t pages_per_req = (ctx + n + d.page_size - 1) / d.page_size;
  require(pages_per_req * rows <= INT_MAX, "rows x pages per request exceeds the int range");
  d.max_reqs = o.rows;
  d.max_pages_per_req = static_cast<int>(pages_per_req);
  d.num_pages = static_cast<int>(pages_per_req * rows);
  d.cache_slots = o.rows;
  d.tp = 1;
  CudaDraftOptions eager_options, fused_options;
  eager_options.fused_markov = false;
  eager_options.fused_backbone = false;
  eager_options.max_context_tokens = fused_options.max_context_tokens = o.max_context_tokens;
  out << "bench step: " << label << ", ctx " << ctx << ", rows " << rows
      << ": building the eager and the fused backend, storing the context" << std::endl;
  CudaDraft eager(ckpt, d, eager_options), fused(ckpt, d, fused_options);
  r.markov_fused = fused.markov_fused();

  DeviceStream stream;
  const cudaStream_t s = stream.get();

  // The context: token t is request t / ctx at position t % ctx, the same seeded
  // hidden states stored in both backends, chunk by chunk.
  {
    const int64_t width = static_cast<int64_t>(c.taps()) * c.target_hidden_size;
    const int64_t total = rows * ctx, chunk = std::min<int64_t>(o.max_context_tokens, total);
    DeviceBuffer<bf16> hidden(static_cast<size_t>(chunk * width));
    DeviceBuffer<int64_t> positions(static_cast<size_t>(chunk)), slots(static_cast<size_t>(chunk));
    std::vector<int64_t> h_positions, h_slots;
    for (int64_t first = 0, index = 0; first < total; first += chunk, ++index) {
      const int64_t count = std::min(chunk, total - first);
      h_positions.resize(static_cast<size_t>(count));
      h_slots.resize(static_cast<size_t>(count));
      for (int64_t i = 0; i < count; ++i) {
        const int64_t t = first + i, req = t / ctx, pos = t % ctx;
        h_positions[i] = pos;
        h_slots[i] = req * pages_per_req * d.page_size + pos;
      }
      positions.upload(h_positions, s);
      slots.upload(h_slots, s);
      fill_uniform_bf16(hidden.data(), static_cast<size_t>(count * width),
                        o.seed * 1000003 + static_cast<uint64_t>(index), -2.0f, 2.0f, s);
      const ContextBatch batch{static_cast<int>(count), hidden.data(), positions.data(),
                               slots.data()};
      eager.store_context_device(batch, s);
      fused.store_context_device(batch, s);
    }
    stream.synchronize();
  }

  // The step's inputs: anchors at position ctx, cache slot r for row r.
  std::vector<int64_t> seeds(rows), cache_slots(rows);
  for (int64_t i = 0; i < rows; ++i) {
    seeds[i] = static_cast<int64_t>(o.seed % (uint64_t{1} << 40)) * 7919 + i;
    cache_slots[i] = i;
  }
  std::vector<int32_t> tables(static_cast<size_t>(rows * pages_per_req));
  for (size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<int32_t>(i);
  DeviceBuffer<int64_t> d_anchors(static_cast<size_t>(rows)),
      d_positions(std::vector<int64_t>(rows, ctx), s), d_seeds(seeds, s),
      d_cache_slots(cache_slots, s);
  fill_uniform_ids(d_anchors.data(), d_anchors.size(), o.seed + 2, 0, v, s);
  DeviceBuffer<float> d_temps(std::vector<float>(rows, 1.0f), s);
  DeviceBuffer<int32_t> d_tables(tables, s);
  const ProposeBatch batch{o.rows,         d_anchors.data(),     d_positions.data(), d_seeds.data(),
                           d_temps.data(), d_cache_slots.data(), d_tables.data()};
  const size_t n_tokens = static_cast<size_t>(rows * n), n_cache = n_tokens * v;
  StepOutputs eager_out(n_tokens, n_cache), fused_out(n_tokens, n_cache);

  // The check, before anything is timed: the warm-up call (which also pins every
  // GEMM before the capture), then one launch of each graph.
  eager_out.zero(s);
  fused_out.zero(s);
  eager.propose_device(batch, eager_out.device(), s);
  fused.propose_device(batch, fused_out.device(), s);
  eager_out.download(s);
  fused_out.download(s);
  r.difference = first_difference("warm-up call: fused != eager", fused_out, eager_out, n, v);
  if (!r.ok()) return r;
  const std::vector<int64_t> warm_tokens = fused_out.host_tokens;
  const std::vector<bf16> warm_cache = fused_out.host_cache;

  const GraphExec eager_graph(
      s, [&](cudaStream_t st) { eager.propose_device(batch, eager_out.device(), st); });
  const GraphExec fused_graph(
      s, [&](cudaStream_t st) { fused.propose_device(batch, fused_out.device(), st); });
  eager_out.zero(s);
  fused_out.zero(s);
  eager_graph.launch(s);
  fused_graph.launch(s);
  eager_out.download(s);
  fused_out.download(s);
  r.difference = first_difference("graph launch: fused != eager", fused_out, eager_out, n, v);
  if (!r.ok()) return r;
  r.difference = first_difference("fused graph launch != fused warm-up call", fused_out.host_tokens,
                                  fused_out.host_cache, warm_tokens, warm_cache, n, v);
  if (!r.ok()) return r;

  GraphTimer timer(s, r.gpu);
  r.gpu.sm_clock_seen_mhz = measure_sm_clock_mhz(2000000);
  FloorTiming& t = r.timing;
  t.fused_us = timer.median_us(fused_graph, o.warmup, o.repeats);
  t.eager_us = timer.median_us(eager_graph, o.warmup, o.repeats);
  r.floor = bench::step_floor_bytes(c, o.rows, o.ctx);
  t.set_floor(r.floor.total(), copy_bandwidth_gbs(s));

  const bench::StepFloorBytes& f = r.floor;
  out << std::fixed << std::setprecision(1);
  out << "draft step bench on " << gpu_line(r.gpu) << "\n";
  out << "  " << label << " (H " << c.hidden_size << ", L " << c.num_layers << ", V " << v
      << ", markov_rank " << c.markov_rank << ", N " << n << "), ctx " << ctx << ", rows " << rows
      << ", T 1, median of " << o.repeats << "; fused backend's Markov loop: "
      << (r.markov_fused ? "fused" : "eager (the fused loop refused this checkpoint)") << "\n";
  out << "  check: fused == eager bit for bit (draft tokens and draft-logits cache; warm-up call "
         "and graph launch)\n";
  out << "  floor bytes (MB):";
  for (size_t i = 0; i < f.parts.size(); ++i)
    out << (i ? ", " : " ") << f.parts[i].label << " " << f.parts[i].bytes / 1e6;
  out << "; total " << t.bytes / 1e6 << "\n";
  out << "  copy bandwidth " << t.copy_bandwidth_gbs << " GB/s -> floor " << t.floor_us << " us\n";
  out << std::setprecision(2);
  out << "  fused " << t.fused_us << " us (" << t.fused_ratio << "x floor)\n";
  out << "  eager " << t.eager_us << " us (" << t.eager_ratio << "x floor)\n";
  out << std::defaultfloat;
  return r;
}

nlohmann::json step_bench_json(const StepBenchResult& r) {
  const StepBenchOptions& o = r.options;
  const bench::StepFloorBytes& f = r.floor;
  nlohmann::json j{
      {"bench", "draft_step"},
      {"preset", o.preset.empty() ? nlohmann::json(nullptr) : nlohmann::json(o.preset)},
      {"checkpoint", o.checkpoint},
      {"ctx", o.ctx},
      {"rows", o.rows},
      {"tp", 1},
      {"vocab", r.vocab},
      {"markov_rank", r.markov_rank},
      {"steps", r.steps},
      {"temperature", 1.0},
      {"repeats", o.repeats},
      {"seed", o.seed},
      {"markov_fused", r.markov_fused},
      {"check", r.ok() ? "fused == eager bit for bit" : r.difference},
  };
  for (const bench::FloorPart& p : f.parts) j["bytes_parts"][p.name] = p.bytes;
  add_gpu_json(j, r.gpu);
  add_timing_json(j, r.timing);
  return j;
}

}  // namespace sparkdraft::cuda
