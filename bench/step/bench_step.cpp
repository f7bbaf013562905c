// The draft step benchmark (bench_step.h): two backends on one checkpoint, the
// same context stored in both, the step checked eager == fused bit for bit, then
// each backend's step timed in its own CUDA graph against the floor.
#include "step/bench_step.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <iomanip>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda/common/graph.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/draft.h"
#include "sparkdraft/error.h"
#if defined(SPARKDRAFT_HAVE_NCCL)
#include "sparkdraft/cuda/nccl_comm.h"
#endif

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

// The floor's parts, its total and the bandwidth it is taken over (one decimal).
void print_floor(std::ostream& out, const char* title, const bench::StepFloorBytes& f,
                 const FloorTiming& t) {
  out << "  " << title << ":";
  for (size_t i = 0; i < f.parts.size(); ++i)
    out << (i ? ", " : " ") << f.parts[i].label << " " << f.parts[i].bytes / 1e6;
  out << "; total " << t.bytes / 1e6 << "\n";
  out << "  copy bandwidth " << t.copy_bandwidth_gbs << " GB/s -> floor " << t.floor_us << " us\n";
}

// The step's products part by part, the measured tensor-core peak and the roofline floor.
void print_compute_floor(std::ostream& out, const StepBenchResult& r) {
  out << "  products (GFLOP):";
  for (size_t i = 0; i < r.flops.parts.size(); ++i)
    out << (i ? ", " : " ") << r.flops.parts[i].name << " " << r.flops.parts[i].flops / 1e9;
  out << "; total " << r.flops.total() / 1e9 << "\n";
  if (r.tensor_peak_tflops <= 0) {
    out << "  tensor-core peak not measured (" << r.peak_note << "): no roofline floor\n";
    return;
  }
  out << "  tensor-core peak " << r.tensor_peak_tflops
      << " TFLOP/s (wgmma m64n256k16, measured) -> products alone " << r.roofline.flops_us
      << " us; roofline floor (each part's bytes or products, the slower) " << r.roofline.floor_us
      << " us:";
  for (size_t i = 0; i < r.roofline.parts.size(); ++i)
    out << (i ? ", " : " ") << r.roofline.parts[i].first << " " << r.roofline.parts[i].second;
  out << "\n";
}

void check_options(const std::shared_ptr<const Checkpoint>& ckpt, const StepBenchOptions& o) {
  require(ckpt != nullptr, "no checkpoint");
  require(o.ctx >= 1 && o.rows >= 1 && o.rows <= kMaxReqs,
          "ctx must be >= 1 and rows in [1, " + std::to_string(kMaxReqs) + "]");
  require(o.repeats >= 1 && o.warmup >= 0, "repeats must be >= 1 and warmup >= 0");
  require(o.max_context_tokens >= 1 && o.max_context_tokens <= kMaxContextTokens,
          "max_context_tokens must be in [1, " + std::to_string(kMaxContextTokens) + "]");
}

// The backends' options: R requests of ctx + Q positions (Q: the query slots); request r owns pages
// r * pages_per_req + p.
DraftOptions draft_options(const ModelConfig& c, const StepBenchOptions& o) {
  DraftOptions d;
  d.page_size = 16;
  const int64_t pages_per_req = (o.ctx + c.query_slots() + d.page_size - 1) / d.page_size;
  require(pages_per_req * o.rows <= INT_MAX, "rows x pages per request exceeds the int range");
  d.max_reqs = o.rows;
  d.max_pages_per_req = static_cast<int>(pages_per_req);
  d.num_pages = static_cast<int>(pages_per_req * o.rows);
  d.cache_slots = o.rows;
  d.tp = 1;
  return d;
}

// The context, on the current device: token t is request t / ctx at position
// t % ctx, the same seeded hidden states stored in every draft, chunk by chunk.
void store_context(const ModelConfig& c, const StepBenchOptions& o, const DraftOptions& d,
                   const std::vector<CudaDraft*>& drafts, DeviceStream& stream) {
  const cudaStream_t s = stream.get();
  const int64_t width = static_cast<int64_t>(c.taps()) * c.target_hidden_size;
  const int64_t ctx = o.ctx, total = static_cast<int64_t>(o.rows) * ctx,
                chunk = std::min<int64_t>(o.max_context_tokens, total);
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
      h_slots[i] = req * d.max_pages_per_req * d.page_size + pos;
    }
    positions.upload(h_positions, s);
    slots.upload(h_slots, s);
    fill_uniform_bf16(hidden.data(), static_cast<size_t>(count * width),
                      o.seed * 1000003 + static_cast<uint64_t>(index), -2.0f, 2.0f, s);
    const ContextBatch batch{static_cast<int>(count), hidden.data(), positions.data(),
                             slots.data()};
    for (CudaDraft* draft : drafts) draft->store_context_device(batch, s);
  }
  stream.synchronize();
}

// The step's inputs on the current device: anchors at position ctx, seeded anchor
// tokens and seeds, temperature 1, cache slot r for row r.
struct StepInputs {
  DeviceBuffer<int64_t> anchors, positions, seeds, cache_slots;
  DeviceBuffer<float> temperatures;
  DeviceBuffer<int32_t> tables;
  ProposeBatch batch;
  StepInputs(const ModelConfig& c, const StepBenchOptions& o, const DraftOptions& d,
             cudaStream_t s) {
    const int64_t rows = o.rows;
    std::vector<int64_t> h_seeds(rows), h_slots(rows);
    for (int64_t i = 0; i < rows; ++i) {
      h_seeds[i] = static_cast<int64_t>(o.seed % (uint64_t{1} << 40)) * 7919 + i;
      h_slots[i] = i;
    }
    std::vector<int32_t> h_tables(static_cast<size_t>(rows * d.max_pages_per_req));
    for (size_t i = 0; i < h_tables.size(); ++i) h_tables[i] = static_cast<int32_t>(i);
    anchors = DeviceBuffer<int64_t>(static_cast<size_t>(rows));
    fill_uniform_ids(anchors.data(), anchors.size(), o.seed + 2, 0, c.vocab_size, s);
    positions = DeviceBuffer<int64_t>(std::vector<int64_t>(rows, o.ctx), s);
    seeds = DeviceBuffer<int64_t>(h_seeds, s);
    cache_slots = DeviceBuffer<int64_t>(h_slots, s);
    temperatures = DeviceBuffer<float>(std::vector<float>(rows, 1.0f), s);
    tables = DeviceBuffer<int32_t>(h_tables, s);
    batch = ProposeBatch{o.rows,       anchors.data(),      positions.data(),
                         seeds.data(), temperatures.data(), cache_slots.data(),
                         tables.data()};
  }
};

}  // namespace

StepBenchResult bench_step(std::shared_ptr<const Checkpoint> ckpt, const StepBenchOptions& o,
                           std::ostream& out) {
  check_options(ckpt, o);
  require(o.tp == 1, "bench_step runs TP 1 (bench_step_tp runs more ranks)");
  const ModelConfig& c = ckpt->config();
  const int64_t n = c.block_size, v = c.vocab_size, rows = o.rows, ctx = o.ctx;
  const std::string label = o.preset.empty() ? o.checkpoint : o.preset;

  StepBenchResult r;
  r.options = o;
  r.gpu = query_gpu();
  r.vocab = c.vocab_size;
  r.markov_rank = c.markov_rank;
  r.steps = c.block_size;

  const DraftOptions d = draft_options(c, o);
  CudaDraftOptions eager_options, fused_options;
  eager_options.fused_markov = false;
  eager_options.fused_backbone = false;
  eager_options.max_context_tokens = fused_options.max_context_tokens = o.max_context_tokens;
  eager_options.step_pdl = fused_options.step_pdl = o.step_pdl;
  out << "bench step: " << label << ", ctx " << ctx << ", rows " << rows
      << ": building the eager and the fused backend, storing the context" << std::endl;
  CudaDraft eager(ckpt, d, eager_options), fused(ckpt, d, fused_options);
  r.markov_fused = fused.markov_fused();

  DeviceStream stream;
  const cudaStream_t s = stream.get();
  store_context(c, o, d, {&eager, &fused}, stream);
  const StepInputs inputs(c, o, d, s);
  const ProposeBatch& batch = inputs.batch;
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
  r.flops = bench::step_floor_flops(c, o.rows, o.ctx);
  try {
    r.tensor_peak_tflops = tensor_peak_tflops(r.gpu, s);
    r.roofline = bench::step_roofline(r.floor, r.flops, t.copy_bandwidth_gbs, r.tensor_peak_tflops);
  } catch (const InvalidArgument& e) {
    r.peak_note = e.what();
  }

  const bench::StepFloorBytes& f = r.floor;
  out << std::fixed << std::setprecision(1);
  out << "draft step bench on " << gpu_line(r.gpu) << "\n";
  out << "  " << label << " (H " << c.hidden_size << ", L " << c.num_layers << ", V " << v
      << ", markov_rank " << c.markov_rank << ", N " << n << "), ctx " << ctx << ", rows " << rows
      << ", T 1, median of " << o.repeats << "; fused backend's Markov loop: "
      << (r.markov_fused ? "fused" : "eager (the fused loop refused this checkpoint)") << "\n";
  out << "  check: fused == eager bit for bit (draft tokens and draft-logits cache; warm-up call "
         "and graph launch)\n";
  print_floor(out, "floor bytes (MB)", f, t);
  print_compute_floor(out, r);
  out << std::setprecision(2);
  out << "  fused " << t.fused_us << " us (" << t.fused_ratio << "x floor";
  if (r.roofline.floor_us > 0)
    out << ", " << t.fused_us / r.roofline.floor_us << "x roofline floor";
  out << ")\n";
  out << "  eager " << t.eager_us << " us (" << t.eager_ratio << "x floor)\n";
  out << std::defaultfloat;
  if (o.timeline) {
    r.timeline = record_timeline([&] {
      fused_graph.launch(s);
      stream.synchronize();
    });
    print_timeline_summary(out, r.timeline);
  }
  return r;
}

StepBenchResult bench_step_tp(std::shared_ptr<const Checkpoint> ckpt, const StepBenchOptions& o,
                              std::ostream& out) {
  check_options(ckpt, o);
  require(o.tp >= 2, "bench_step_tp needs tp >= 2");
  const std::vector<int> devices = tp_devices(o.tp, o.devices);
  require(std::set<int>(devices.begin(), devices.end()).size() == devices.size(),
          "the TP step is timed with one GPU a rank: give " + std::to_string(o.tp) +
              " distinct devices (ranks sharing one GPU run eager, without a graph, and are no "
              "TP speed figure; `check --tp N --devices 0` runs them)");
#if !defined(SPARKDRAFT_HAVE_NCCL)
  throw Unavailable("bench step --tp needs NCCL, and this build has none");
#else
  const ModelConfig& c = ckpt->config();
  const int64_t n = c.block_size, v = c.vocab_size, rows = o.rows;
  const std::string label = o.preset.empty() ? o.checkpoint : o.preset;
  StepBenchResult r;
  r.options = o;
  r.options.devices = devices;
  SD_CUDA_CHECK(cudaSetDevice(devices[0]));
  r.gpu = query_gpu();
  r.vocab = c.vocab_size;
  r.markov_rank = c.markov_rank;
  r.steps = c.block_size;
  DraftOptions d = draft_options(c, o);
  CudaDraftOptions fused_options;
  fused_options.max_context_tokens = o.max_context_tokens;
  fused_options.step_pdl = o.step_pdl;
  CudaDraftOptions rank_options = fused_options;
  rank_options.tp_reduce = o.tp_reduce;
  const size_t n_tokens = static_cast<size_t>(rows * n), n_cache = n_tokens * v;

  // TP 1 on the first device: the bits every rank must give, and its time.
  StepOutputs expected(n_tokens, n_cache);
  {
    out << "bench step: " << label << ", ctx " << o.ctx << ", rows " << rows << ", tp " << o.tp
        << ": TP 1 on device " << devices[0] << " first" << std::endl;
    CudaDraft tp1(ckpt, d, fused_options);
    r.markov_fused = tp1.markov_fused();
    DeviceStream stream;
    const cudaStream_t s = stream.get();
    store_context(c, o, d, {&tp1}, stream);
    const StepInputs inputs(c, o, d, s);
    expected.zero(s);
    tp1.propose_device(inputs.batch, expected.device(), s);
    expected.download(s);
    const GraphExec graph(
        s, [&](cudaStream_t st) { tp1.propose_device(inputs.batch, expected.device(), st); });
    GraphTimer timer(s, r.gpu);
    r.tp1_us = timer.median_us(graph, o.warmup, o.repeats);
  }

  // Every rank: its shards, the same context and inputs on its GPU, the check, the
  // timing. Every rank makes the same launches whatever its check found (its
  // collectives wait for the others); a difference drops the timing after.
  d.tp = o.tp;
  out << "bench step: " << label << ", tp " << o.tp << ": building the ranks on devices";
  for (int dev : devices) out << " " << dev;
  out << ", storing the context" << std::endl;
  std::vector<std::vector<double>> us(devices.size());
  std::vector<std::string> differences(devices.size());
  run_nccl_group(devices, [&](NcclComm& comm) {
    const size_t k = static_cast<size_t>(comm.tp_rank());
    CudaDraft rank(ckpt, d, rank_options, &comm);
    if (k == 0) r.fused_all_reduce = rank.fused_all_reduce();
    DeviceStream stream;
    const cudaStream_t s = stream.get();
    store_context(c, o, d, {&rank}, stream);
    const StepInputs inputs(c, o, d, s);
    StepOutputs got(n_tokens, n_cache);
    const std::string who = "tp " + std::to_string(o.tp) + " rank " + std::to_string(k);
    got.zero(s);
    rank.propose_device(inputs.batch, got.device(), s);
    got.download(s);
    rank.check_peers();
    differences[k] = first_difference(who + " warm-up call != TP 1", got, expected, n, v);
    const GraphExec graph(
        s, [&](cudaStream_t st) { rank.propose_device(inputs.batch, got.device(), st); });
    got.zero(s);
    graph.launch(s);
    got.download(s);
    rank.check_peers();
    if (differences[k].empty())
      differences[k] = first_difference(who + " graph launch != TP 1", got, expected, n, v);
    const GpuInfo gpu = query_gpu();
    DeviceBuffer<unsigned char> flush(static_cast<size_t>(std::max(gpu.l2_bytes, 1 << 20)) * 2);
    EventPair ev;
    for (int i = 0; i < o.warmup; ++i) graph.launch(s);
    stream.synchronize();
    for (int i = 0; i < o.repeats; ++i) {
      flush.zero(s);
      stream.synchronize();
      comm.barrier();  // the ranks start together
      us[k].push_back(event_time_us(s, ev, [&] { graph.launch(s); }));
    }
    rank.check_peers();
  });
  for (const std::string& diff : differences)
    if (!diff.empty()) {
      r.difference = diff;
      return r;
    }
  std::vector<double> slowest(static_cast<size_t>(o.repeats), 0.0);
  for (const std::vector<double>& rank_us : us)
    for (size_t i = 0; i < rank_us.size(); ++i) slowest[i] = std::max(slowest[i], rank_us[i]);
  FloorTiming& t = r.timing;
  t.fused_us = median(slowest);
  SD_CUDA_CHECK(cudaSetDevice(devices[0]));
  r.gpu.sm_clock_seen_mhz = measure_sm_clock_mhz(2000000);
  r.floor = bench::step_floor_bytes(c, o.rows, o.ctx, o.tp);
  {
    DeviceStream stream;
    t.set_floor(r.floor.total(), copy_bandwidth_gbs(stream.get()));
  }
  t.eager_ratio = 0;

  const bench::StepFloorBytes& f = r.floor;
  out << std::fixed << std::setprecision(1);
  out << "draft step bench, TP " << o.tp << " (one GPU a rank, NCCL; o_proj and down "
      << (r.fused_all_reduce ? "through the fused peer boundary" : "through the eager all-reduce")
      << ") on " << gpu_line(r.gpu) << "\n";
  out << "  " << label << " (H " << c.hidden_size << ", L " << c.num_layers << ", V " << v
      << ", markov_rank " << c.markov_rank << ", N " << n << "), ctx " << o.ctx << ", rows " << rows
      << ", median of " << o.repeats << " (each repeat the slowest rank)\n";
  out << "  check: every rank == TP 1 bit for bit (draft tokens and draft-logits cache; warm-up "
         "call and graph launch)\n";
  print_floor(out, "floor bytes of one GPU (MB)", f, t);
  out << std::setprecision(2);
  out << "  tp " << o.tp << " " << t.fused_us << " us (" << t.fused_ratio << "x floor); tp 1 "
      << r.tp1_us << " us on device " << devices[0] << "\n";
  out << std::defaultfloat;
  return r;
#endif
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
      {"tp", o.tp},
      {"vocab", r.vocab},
      {"markov_rank", r.markov_rank},
      {"steps", r.steps},
      {"temperature", 1.0},
      {"repeats", o.repeats},
      {"seed", o.seed},
      {"markov_fused", r.markov_fused},
      {"step_pdl", o.step_pdl},
      {"check", r.ok() ? "fused == eager bit for bit" : r.difference},
  };
  if (o.tp > 1) {
    j["devices"] = o.devices;
    j["tp1_us"] = r.tp1_us;
    j["all_reduce"] = r.fused_all_reduce ? "fused" : "eager";
    j["check"] = r.ok() ? "every rank == tp 1 bit for bit" : r.difference;
    j["floor"] = "one GPU's share";
  }
  for (const bench::FloorPart& p : f.parts) j["bytes_parts"][p.name] = p.bytes;
  if (o.tp == 1) {
    for (const bench::FlopPart& p : r.flops.parts) j["flops_parts"][p.name] = p.flops;
    j["flops"] = r.flops.total();
    if (r.tensor_peak_tflops > 0) {
      j["tensor_peak_tflops"] = r.tensor_peak_tflops;
      j["compute_floor_us"] = r.roofline.flops_us;
      j["roofline_floor_us"] = r.roofline.floor_us;
      j["roofline_ratio"] = r.timing.fused_us / r.roofline.floor_us;
      for (const auto& [name, us] : r.roofline.parts) j["roofline_parts_us"][name] = us;
    } else {
      j["tensor_peak_note"] = r.peak_note;
    }
  }
  add_gpu_json(j, r.gpu);
  add_timing_json(j, r.timing);
  if (o.timeline) j["fused_timeline"] = timeline_json(r.timeline);
  return j;
}

}  // namespace sparkdraft::cuda
