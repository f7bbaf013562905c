// The Markov loop benchmark (bench_markov.h): inputs, the bit-for-bit check of
// fused against eager, graph capture and timing, the measured copy bandwidth and
// the floor, the printed report and its JSON.
#include "markov/bench_markov.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <iomanip>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda/common/graph.h"
#include "cuda/markov/detail.h"
#include "cuda/markov/markov.h"
#include "runtime/markov_loop.h"
#include "sparkdraft/config.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {
namespace {

using markov_detail::require;

// Throws naming the first difference between the loop under test (`what`: "fused", "top-k")
// and its reference (`ref`: "eager", "cpu").
void check_equal(const std::vector<int64_t>& tok_f, const std::vector<int64_t>& tok_e,
                 const std::vector<bf16>& cache_f, const std::vector<bf16>& cache_e,
                 const MarkovBenchOptions& o, const char* what = "fused",
                 const char* ref = "eager") {
  const int64_t n = o.steps, v = o.vocab;
  for (size_t i = 0; i < tok_e.size(); ++i)
    if (tok_f[i] != tok_e[i]) {
      std::ostringstream os;
      os << "bench_markov: " << what << " != " << ref << ": token of row "
         << static_cast<int64_t>(i) / n << " step " << static_cast<int64_t>(i) % n << ": found "
         << tok_f[i] << ", expected " << tok_e[i] << " (seed " << o.seed << ")";
      throw Error(os.str());
    }
  for (size_t i = 0; i < cache_e.size(); ++i)
    if (cache_f[i].bits != cache_e[i].bits) {
      const int64_t idx = static_cast<int64_t>(i);
      std::ostringstream os;
      os << "bench_markov: " << what << " != " << ref << ": cache[slot " << idx / (n * v)
         << "][step " << idx / v % n << "][" << idx % v << "]: found 0x" << std::hex
         << cache_f[i].bits << ", expected 0x" << cache_e[i].bits << std::dec << " (seed " << o.seed
         << ")";
      throw Error(os.str());
    }
}

// The top-k loop on the dense run's inputs: the GPU eager loop against the CPU reference
// (runtime/markov_loop.h), bit for bit, then its graph timed like the full loops.
void bench_topk(const MarkovBenchOptions& o, const MarkovHead& dense_head,
                const MarkovBatch& dense_batch, const DeviceBuffer<bf16>& w1,
                const DeviceBuffer<bf16>& w2, const DeviceBuffer<bf16>& base,
                const DeviceBuffer<int64_t>& anchors, GraphTimer& timer, double bandwidth_gbs,
                MarkovBenchResult& r, cudaStream_t s) {
  const size_t v = o.vocab, k = o.markov_rank, n = o.steps, rows = o.rows;
  MarkovHead head = dense_head;
  head.topk = o.topk;
  MarkovLoop loop(head, o.rows, o.steps);
  require(!loop.fused(), "bench_markov", "the top-k loop is expected to run eager");
  DeviceBuffer<int64_t> tokens(rows * n);
  DeviceBuffer<bf16> cache(rows * n * v);
  MarkovBatch batch = dense_batch;
  batch.draft_tokens = tokens.data();
  batch.cache = cache.data();
  loop.run(batch, s);
  SD_CUDA_CHECK(cudaStreamSynchronize(s));

  // The CPU reference on the same inputs.
  const std::vector<bf16> h_w1 = w1.download(s), h_w2 = w2.download(s), h_base = base.download(s);
  const std::vector<int64_t> h_anchors = anchors.download(s);
  std::vector<int64_t> positions(rows), seeds(rows), slots(rows);
  std::vector<float> temps(rows, o.temperature);
  SD_CUDA_CHECK(cudaMemcpy(positions.data(), dense_batch.rows.anchor_positions,
                           rows * sizeof(int64_t), cudaMemcpyDeviceToHost));
  SD_CUDA_CHECK(cudaMemcpy(seeds.data(), dense_batch.rows.seeds, rows * sizeof(int64_t),
                           cudaMemcpyDeviceToHost));
  SD_CUDA_CHECK(cudaMemcpy(slots.data(), dense_batch.rows.cache_slots, rows * sizeof(int64_t),
                           cudaMemcpyDeviceToHost));
  ModelConfig c;
  c.vocab_size = o.vocab;
  c.block_size = o.steps;
  c.markov_rank = o.markov_rank;
  c.markov_topk = o.topk;
  DraftWeights w;
  w.markov_w1 = h_w1.data();
  w.markov_w2 = h_w2.data();
  const ops::MarkovRows host_rows{o.rows,       h_anchors.data(), positions.data(),
                                  seeds.data(), temps.data(),     slots.data()};
  std::vector<int64_t> want_tokens(rows * n);
  std::vector<bf16> want_cache(rows * n * v);
  const MarkovInputs in{
      &c,         &w,     &dense_head.transform,
      &host_rows, o.rows, static_cast<int>(std::max(1u, std::thread::hardware_concurrency()))};
  markov_loop_from_base(in, 1, h_base.data(),
                        ProposeOutputs{want_tokens.data(), want_cache.data()});
  check_equal(tokens.download(s), want_tokens, cache.download(s), want_cache, o, "top-k gpu",
              "top-k cpu");

  const GraphExec graph(s, [&](cudaStream_t st) { loop.run(batch, st); });
  r.topk_us = timer.median_us(graph, o.warmup, o.repeats);
  // Per row and step: the base logits read (the candidate pass), k rows of w2 and one of w1
  // gathered, the cache row written.
  r.topk_bytes = 2.0 * static_cast<double>(rows) * n *
                 (2.0 * static_cast<double>(v) + (static_cast<double>(o.topk) + 1.0) * k);
  r.topk_floor_us = r.topk_bytes / (bandwidth_gbs * 1e3);
  r.topk_ratio = r.topk_us / r.topk_floor_us;
}

}  // namespace

std::vector<bf16> trained_logits(size_t count, int vocab, uint64_t seed) {
  std::vector<bf16> out(count);
  std::mt19937_64 gen(seed);
  std::normal_distribution<float> bulk(0.0f, 1.0f);
  std::uniform_int_distribution<int64_t> pick(0, vocab - 1);
  std::uniform_real_distribution<float> head(0.0f, 1.0f);
  for (size_t v0 = 0; v0 + static_cast<size_t>(vocab) <= count; v0 += static_cast<size_t>(vocab)) {
    for (int i = 0; i < vocab; ++i) out[v0 + i] = to_bf16(-2.0f + 2.5f * bulk(gen));
    for (int h = 0; h < 8; ++h) {
      const int64_t id = pick(gen);
      out[v0 + static_cast<size_t>(id)] = to_bf16(18.0f + 8.0f * head(gen));
    }
  }
  return out;
}

MarkovBenchResult bench_markov(const MarkovBenchOptions& o, std::ostream& out) {
  require(o.vocab >= 1 && o.markov_rank >= 1 && o.steps >= 1 && o.rows >= 1 && o.repeats >= 1 &&
              o.warmup >= 0,
          "bench_markov", "vocab, rank, steps, rows and repeats must be >= 1, warmup >= 0");
  require(o.logits == "uniform" || o.logits == "trained", "bench_markov",
          "logits must be uniform or trained");
  require(o.temperature >= 0.0f && std::isfinite(o.temperature), "bench_markov",
          "temperature must be finite and >= 0");
  require(o.topk >= 0 && o.topk <= o.vocab, "bench_markov", "topk must be in [0, vocab]");
  MarkovBenchResult r;
  r.options = o;
  r.gpu = query_gpu();

  MarkovHead head;
  head.vocab = o.vocab;
  head.markov_rank = o.markov_rank;
  if (o.transform) {
    head.transform.enabled = true;
    head.transform.multiplier = 0.5f;
    head.transform.has_cap = true;
    head.transform.cap = 30.0f;
    head.transform.inv_cap = 1.0f / 30.0f;
  }
  MarkovPlanInput plan;
  plan.vocab = o.vocab;
  plan.markov_rank = o.markov_rank;
  plan.max_rows = o.rows;
  const std::string refusal = fused_markov_refusal(plan);
  if (!refusal.empty())
    throw InvalidArgument("bench_markov: the fused loop cannot run: " + refusal);

  DeviceStream stream;
  const cudaStream_t s = stream.get();
  const size_t v = o.vocab, k = o.markov_rank, n = o.steps, rows = o.rows;
  DeviceBuffer<bf16> w1(v * k), w2(v * k), base(rows * n * v);
  fill_uniform_bf16(w1.data(), w1.size(), o.seed + 1, -0.5f, 0.5f, s);
  fill_uniform_bf16(w2.data(), w2.size(), o.seed + 2, -0.5f, 0.5f, s);
  if (o.logits == "trained")
    base.upload(trained_logits(base.size(), o.vocab, o.seed + 3), s);
  else
    fill_uniform_bf16(base.data(), base.size(), o.seed + 3, -8.0f, 8.0f, s);
  DeviceBuffer<int64_t> anchors(rows);
  fill_uniform_ids(anchors.data(), rows, o.seed + 4, 0, o.vocab, s);
  std::vector<int64_t> positions(rows), seeds(rows), slots(rows);
  for (size_t i = 0; i < rows; ++i) {
    positions[i] = 1000 + 37 * static_cast<int64_t>(i);
    seeds[i] = static_cast<int64_t>(o.seed) * 7919 + static_cast<int64_t>(i);
    slots[i] = static_cast<int64_t>(i);
  }
  DeviceBuffer<int64_t> d_positions(positions, s), d_seeds(seeds, s), d_slots(slots, s);
  DeviceBuffer<float> d_temps(std::vector<float>(rows, o.temperature), s);
  DeviceBuffer<int64_t> tok_e(rows * n), tok_f(rows * n);
  DeviceBuffer<bf16> cache_e(rows * n * v), cache_f(rows * n * v);
  head.w1 = w1.data();
  head.w2 = w2.data();

  MarkovWorkspace ws(o.rows, o.steps, o.vocab, o.markov_rank, 1);
  r.pdl = ws.pdl();
  const FusedStepLaunch launch = fused_step_launch(ws, o.rows, o.vocab);
  r.fused_grid = launch.grid;
  r.fused_blocks_per_sm = launch.blocks_per_sm;
  r.fused_stages = launch.shape.stages;
  r.fused_smem = launch.shape.smem_bytes;

  MarkovBatch batch;
  batch.rows = ops::MarkovRows{o.rows,         anchors.data(), d_positions.data(),
                               d_seeds.data(), d_temps.data(), d_slots.data()};
  batch.steps = o.steps;
  batch.base_logits = base.data();
  MarkovBatch eager_batch = batch, fused_batch = batch;
  eager_batch.draft_tokens = tok_e.data();
  eager_batch.cache = cache_e.data();
  fused_batch.draft_tokens = tok_f.data();
  fused_batch.cache = cache_f.data();

  // Fused == eager, bit for bit, before anything is timed.
  eager_markov_loop(head, eager_batch, ws, s);
  fused_markov_loop(head, fused_batch, ws, s);
  stream.synchronize();
  check_equal(tok_f.download(s), tok_e.download(s), cache_f.download(s), cache_e.download(s), o);

  const GraphExec eager_graph(
      s, [&](cudaStream_t st) { eager_markov_loop(head, eager_batch, ws, st); });
  const GraphExec fused_graph(
      s, [&](cudaStream_t st) { fused_markov_loop(head, fused_batch, ws, st); });
  // Each timed repeat starts with a cold L2, as after the draft's backbone.
  GraphTimer timer(s, r.gpu);
  r.gpu.sm_clock_seen_mhz = measure_sm_clock_mhz(2000000);
  FloorTiming& t = r.timing;
  t.fused_us = timer.median_us(fused_graph, o.warmup, o.repeats);
  t.eager_us = timer.median_us(eager_graph, o.warmup, o.repeats);

  // Per step: w2 once, the step's base logits, the cache rows, the w1 rows read.
  const double step_bytes = 2.0 * (static_cast<double>(v) * k + 2.0 * rows * v + rows * k);
  t.set_floor(step_bytes * static_cast<double>(n), copy_bandwidth_gbs(s));

  out << std::fixed << std::setprecision(1);
  out << "markov bench on " << gpu_line(r.gpu) << "\n";
  out << "  V " << o.vocab << ", rank " << o.markov_rank << ", N " << o.steps << ", rows " << o.rows
      << ", T " << o.temperature << ", logits " << o.logits << ", transform "
      << (o.transform ? "on" : "off") << ", median of " << o.repeats << "\n";
  out << "  copy bandwidth " << t.copy_bandwidth_gbs << " GB/s, floor " << t.bytes / 1e6
      << " MB -> " << t.floor_us << " us\n";
  out << std::setprecision(2);
  out << "  fused " << t.fused_us << " us (" << t.fused_ratio << "x floor; grid " << r.fused_grid
      << ", " << r.fused_blocks_per_sm << " blocks/SM, " << r.fused_stages << " stages, "
      << r.fused_smem << " B smem, PDL " << (r.pdl ? "on" : "off") << ")\n";
  out << "  eager " << t.eager_us << " us (" << t.eager_ratio << "x floor)\n";
  if (o.topk > 0) {
    bench_topk(o, head, batch, w1, w2, base, anchors, timer, t.copy_bandwidth_gbs, r, s);
    out << "  top-k " << o.topk << ": " << r.topk_us << " us (" << r.topk_ratio << "x its floor of "
        << r.topk_floor_us << " us; the full loop fused / top-k = " << t.fused_us / r.topk_us
        << "x)\n";
  }
  out << std::defaultfloat;

  if (!o.json_path.empty()) write_json_file(o.json_path, markov_bench_json(r));
  return r;
}

nlohmann::json markov_bench_json(const MarkovBenchResult& r) {
  const MarkovBenchOptions& o = r.options;
  nlohmann::json j{
      {"bench", "markov_loop"},
      {"vocab", o.vocab},
      {"rank", o.markov_rank},
      {"steps", o.steps},
      {"rows", o.rows},
      {"temperature", o.temperature},
      {"logits", o.logits},
      {"transform", o.transform},
      {"repeats", o.repeats},
      {"seed", o.seed},
      {"fused_launch",
       {{"grid", r.fused_grid},
        {"blocks_per_sm", r.fused_blocks_per_sm},
        {"stages", r.fused_stages},
        {"smem_bytes", r.fused_smem},
        {"pdl", r.pdl}}},
  };
  add_gpu_json(j, r.gpu);
  add_timing_json(j, r.timing);
  if (o.topk > 0)
    j["topk"] = {{"k", o.topk},
                 {"checked_against", "cpu"},
                 {"us", r.topk_us},
                 {"bytes", r.topk_bytes},
                 {"floor_us", r.topk_floor_us},
                 {"ratio", r.topk_ratio},
                 {"full_fused_over_topk", r.timing.fused_us / r.topk_us}};
  return j;
}

}  // namespace sparkdraft::cuda
