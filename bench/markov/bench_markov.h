// The Markov loop benchmark (contract.md section 7), as a library function the CLI's
// `bench` calls: seeded non-zero inputs built on the GPU, fused == eager checked
// bit for bit first, each loop captured in a CUDA graph and timed (median of
// repeats, cudaEvents, L2 flushed before each repeat), the device copy bandwidth
// measured in the same run, and the floor = bytes the loop must move / that
// bandwidth.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/harness.h"

namespace sparkdraft::cuda {

struct MarkovBenchOptions {
  int vocab = 151936;
  int markov_rank = 256;
  int steps = 7;
  int rows = 1;
  int repeats = 50;
  int warmup = 5;
  bool transform = false;  // multiplier 0.5 and soft cap 30 (the Muse-style transform)
  float temperature = 1.0f;
  uint64_t seed = 20240601;
  std::string json_path;  // write the result as JSON here when not empty
};

struct MarkovBenchResult {
  MarkovBenchOptions options;
  GpuInfo gpu;
  FloorTiming timing;  // bytes: w2 per step, base, cache, w1 rows
  int fused_grid = 0, fused_blocks_per_sm = 0, fused_stages = 0, fused_smem = 0;
  bool pdl = true;
};

// Runs the benchmark on the current device and prints a short report to `out`.
// Throws Error when fused and eager differ (naming row, step, index, bits, seed)
// or when the fused loop cannot run the shape.
MarkovBenchResult bench_markov(const MarkovBenchOptions& options, std::ostream& out);

nlohmann::json markov_bench_json(const MarkovBenchResult& r);

}  // namespace sparkdraft::cuda
