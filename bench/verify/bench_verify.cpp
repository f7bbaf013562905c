// The verifier benchmark (bench_verify.h): inputs, the bit-for-bit check against
// the CPU reference, graph capture and timing, the floor, the report and its JSON.
#include "verify/bench_verify.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <iomanip>
#include <sstream>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "cuda/common/graph.h"
#include "cuda/verify/verify.h"
#include "markov/bench_markov.h"
#include "sparkdraft/core/sampling.h"
#include "sparkdraft/cpu/verify.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/error.h"
#include "verify/verify_floor.h"

namespace sparkdraft::cuda {
namespace {

// "" when the outputs agree, else the first difference.
std::string first_difference(const std::vector<int32_t>& k_cpu, const std::vector<int64_t>& t_cpu,
                             const std::vector<int32_t>& k_gpu, const std::vector<int64_t>& t_gpu,
                             int n, uint64_t seed) {
  std::ostringstream os;
  for (size_t r = 0; r < k_cpu.size(); ++r) {
    if (k_cpu[r] != k_gpu[r]) {
      os << "GPU != CPU: num_accepted of row " << r << ": gpu " << k_gpu[r] << ", cpu " << k_cpu[r]
         << " (seed " << seed << ")";
      return os.str();
    }
    for (int i = 0; i <= n; ++i) {
      const size_t at = r * (n + 1) + i;
      if (t_cpu[at] != t_gpu[at]) {
        os << "GPU != CPU: token " << i << " of row " << r << ": gpu " << t_gpu[at] << ", cpu "
           << t_cpu[at] << " (seed " << seed << ")";
        return os.str();
      }
    }
  }
  return "";
}

// The launch's form by name (the CLI's --form values).
const char* form_name(const VerifyBenchResult& r) {
  return r.resident_rows > 0 ? "resident" : (r.list_capacity > 0 ? "lists" : "rows");
}

}  // namespace

VerifyBenchResult bench_verify(const VerifyBenchOptions& o, std::ostream& out) {
  if (o.vocab < 1 || o.n < 1 || o.n > 64 || o.rows < 1 || o.repeats < 1 || o.warmup < 0 ||
      !(o.temperature >= 0.0f) || o.temperature > 1e30f || o.threads < 0 || o.slice < 0 ||
      o.resident_rows < 0)
    throw InvalidArgument(
        "bench_verify: vocab, rows and repeats must be >= 1, N in [1, 64], warmup, threads, "
        "slice and resident_rows >= 0, the temperature finite and >= 0");
  VerifyBenchResult r;
  r.options = o;
  r.gpu = query_gpu();
  DeviceStream stream;
  const cudaStream_t s = stream.get();
  const size_t V = o.vocab, N = o.n, R = o.rows;

  // Inputs: seeded fills on the GPU, brought to the host for the cache, the draft
  // tokens and the CPU reference.
  DeviceBuffer<bf16> d_target16(R * (N + 1) * V), d_noise(R * N * V);
  std::vector<bf16> trained;
  if (o.logits == "trained") {
    trained = trained_logits(d_target16.size(), o.vocab, o.seed + 1);
    d_target16.upload(trained, s);
  } else {
    fill_uniform_bf16(d_target16.data(), d_target16.size(), o.seed + 1, -8.0f, 8.0f, s);
  }
  fill_uniform_bf16(d_noise.data(), d_noise.size(), o.seed + 2, -1.0f, 1.0f, s);
  const std::vector<bf16> target16 = d_target16.download(s);
  const std::vector<bf16> noise = d_noise.download(s);
  std::vector<float> target32;
  if (o.dtype == LogitsDType::f32) {
    target32.resize(target16.size());
    for (size_t i = 0; i < target16.size(); ++i) target32[i] = to_f32(target16[i]);
  }
  std::vector<bf16> cache(R * N * V);
  std::vector<int64_t> tokens(R * N), anchors(R), seeds(R), slots(R);
  for (size_t row = 0; row < R; ++row) {
    anchors[row] = 1000 + 37 * static_cast<int64_t>(row);
    seeds[row] = static_cast<int64_t>(o.seed) * 7919 + static_cast<int64_t>(row);
    slots[row] = static_cast<int64_t>(row);
    for (size_t j = 0; j < N; ++j) {
      const bf16* t = target16.data() + (row * (N + 1) + j) * V;
      bf16* c = cache.data() + (row * N + j) * V;
      const bf16* z = noise.data() + (row * N + j) * V;
      int64_t best = 0;
      for (size_t v = 0; v < V; ++v) {
        c[v] = to_bf16(to_f32(t[v]) + to_f32(z[v]));
        if (better(to_f32(c[v]), static_cast<int64_t>(v), to_f32(c[best]), best))
          best = static_cast<int64_t>(v);
      }
      tokens[row * N + j] = best;
    }
  }
  const std::vector<float> temps(R, o.temperature);
  const void* host_target = o.dtype == LogitsDType::f32 ? static_cast<const void*>(target32.data())
                                                        : static_cast<const void*>(target16.data());
  const size_t target_bytes =
      R * (N + 1) * V * (o.dtype == LogitsDType::f32 ? sizeof(float) : sizeof(bf16));

  ops::VerifyParams p;
  p.rows = o.rows;
  p.n = o.n;
  p.vocab = o.vocab;
  p.cache_rows = o.rows;
  p.target_dtype = o.dtype;
  p.method = o.method;

  // The CPU reference.
  std::vector<int32_t> k_cpu(R);
  std::vector<int64_t> t_cpu(R * (N + 1));
  {
    ops::VerifyParams h = p;
    h.draft_tokens = tokens.data();
    h.anchor_positions = anchors.data();
    h.seeds = seeds.data();
    h.temperatures = temps.data();
    h.cache_slots = slots.data();
    h.draft_logits = cache.data();
    h.target_logits = host_target;
    h.num_accepted = k_cpu.data();
    h.tokens = t_cpu.data();
    cpu::verify(h, 0, static_cast<int>(std::max(1u, std::thread::hardware_concurrency())));
  }

  // The GPU, eager, then checked.
  DeviceBuffer<int64_t> d_tokens(tokens, s), d_anchors(anchors, s), d_seeds(seeds, s),
      d_slots(slots, s);
  DeviceBuffer<float> d_temps(temps, s);
  DeviceBuffer<bf16> d_cache(cache, s);
  DeviceBuffer<unsigned char> d_target(target_bytes);
  d_target.upload(static_cast<const unsigned char*>(host_target), target_bytes, 0, s);
  DeviceBuffer<int32_t> d_k(R);
  DeviceBuffer<int64_t> d_out(R * (N + 1));
  p.draft_tokens = d_tokens.data();
  p.anchor_positions = d_anchors.data();
  p.seeds = d_seeds.data();
  p.temperatures = d_temps.data();
  p.cache_slots = d_slots.data();
  p.draft_logits = d_cache.data();
  p.target_logits = d_target.data();
  p.num_accepted = d_k.data();
  p.tokens = d_out.data();
  VerifyWorkspace ws(o.rows, o.n, o.vocab);
  VerifyShape shape = ws.pick(o.rows, o.form, o.dtype, o.method);
  if (o.threads > 0) shape.threads = o.threads;
  if (o.slice > 0) shape.slice = o.slice;
  if (o.resident_rows > 0) {
    if (o.form != VerifyForm::resident)
      throw InvalidArgument("bench_verify: requests in flight are the resident form's");
    shape.resident_rows = o.resident_rows;
  }
  r.threads = shape.threads;
  r.slice = shape.slice;
  r.slices = (o.vocab + shape.slice - 1) / shape.slice;
  r.list_capacity = shape.list_capacity;
  r.resident_rows = shape.resident_rows;
  verify(p, ws, s, &shape);
  stream.synchronize();
  r.difference = first_difference(k_cpu, t_cpu, d_k.download(s), d_out.download(s), o.n, o.seed);
  if (!r.ok()) return r;
  double accepted = 0;
  for (int32_t k : k_cpu) accepted += k;
  r.mean_accepted = accepted / static_cast<double>(R);

  const GraphExec graph(s, [&](cudaStream_t st) { verify(p, ws, st, &shape); });
  GraphTimer timer(s, r.gpu);
  r.gpu.sm_clock_seen_mhz = measure_sm_clock_mhz(2000000);
  r.verify_us = timer.median_us(graph, o.warmup, o.repeats);
  r.bytes = bench::verify_floor_bytes(o.rows, o.n, o.vocab, o.dtype).total();
  r.copy_bandwidth_gbs = copy_bandwidth_gbs(s);
  r.floor_us = r.bytes / (r.copy_bandwidth_gbs * 1e9) * 1e6;
  r.ratio = r.verify_us / r.floor_us;

  out << std::fixed << std::setprecision(1);
  out << "verify bench on " << gpu_line(r.gpu) << "\n";
  out << "  V " << o.vocab << ", N " << o.n << ", rows " << o.rows << ", T " << o.temperature
      << ", target " << to_string(o.dtype) << " (" << o.logits << " logits), "
      << to_string(o.method) << ", median of " << o.repeats << "; GPU == CPU bit for bit; "
      << std::setprecision(2) << r.mean_accepted << " drafts accepted per row\n";
  out << std::setprecision(1) << "  copy bandwidth " << r.copy_bandwidth_gbs << " GB/s, floor "
      << r.bytes / 1e6 << " MB -> " << r.floor_us << " us\n";
  out << std::setprecision(2) << "  verify " << r.verify_us << " us (" << r.ratio << "x floor; "
      << r.threads << " threads, " << r.slices << " slices of " << r.slice << " ids, "
      << form_name(r) << " form";
  if (r.resident_rows > 0) out << ", " << r.resident_rows << " requests in flight";
  out << ")\n";
  out << std::defaultfloat;
  return r;
}

nlohmann::json verify_bench_json(const VerifyBenchResult& r) {
  const VerifyBenchOptions& o = r.options;
  nlohmann::json j{{"bench", "verify"},
                   {"vocab", o.vocab},
                   {"n", o.n},
                   {"rows", o.rows},
                   {"temperature", o.temperature},
                   {"target_dtype", to_string(o.dtype)},
                   {"method", to_string(o.method)},
                   {"logits", o.logits},
                   {"repeats", o.repeats},
                   {"seed", o.seed},
                   {"launch",
                    {{"threads", r.threads},
                     {"slice", r.slice},
                     {"slices", r.slices},
                     {"form", form_name(r)},
                     {"list_capacity", r.list_capacity},
                     {"resident_rows", r.resident_rows}}},
                   {"mean_accepted", r.mean_accepted},
                   {"bytes", r.bytes},
                   {"copy_bandwidth_gbs", r.copy_bandwidth_gbs},
                   {"floor_us", r.floor_us},
                   {"verify_us", r.verify_us},
                   {"ratio", r.ratio}};
  add_gpu_json(j, r.gpu);
  return j;
}

}  // namespace sparkdraft::cuda
