// The Markov loop benchmark (SPEC section 7), as a library function the CLI's
// `bench` calls: seeded non-zero inputs built on the GPU, fused == eager checked
// bit for bit first, each loop captured in a CUDA graph and timed (median of
// repeats, cudaEvents, L2 flushed before each repeat), the device copy bandwidth
// measured in the same run, and the floor = bytes the loop must move / that
// bandwidth.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <ostream>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "sparkdraft/core/bf16.h"

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
  std::string gpu;
  int sm_count = 0;
  int sm_clock_peak_mhz = 0;      // cudaDevAttrClockRate
  int mem_clock_peak_mhz = 0;     // cudaDevAttrMemoryClockRate
  int sm_clock_seen_mhz = 0;      // clock64 over globaltimer during a spin before timing
  double copy_bandwidth_gbs = 0;  // (read + write) bytes / s of a device-to-device copy
  double bytes = 0;               // what the loop must move: w2 per step, base, cache, w1 rows
  double floor_us = 0;
  double eager_us = 0;
  double fused_us = 0;
  double fused_ratio = 0;  // fused / floor
  double eager_ratio = 0;  // eager / floor
  int fused_grid = 0, fused_blocks_per_sm = 0, fused_stages = 0, fused_smem = 0;
  bool pdl = true;
};

// Runs the benchmark on the current device and prints a short report to `out`.
// Throws Error when fused and eager differ (naming row, step, index, bits, seed)
// or when the fused loop cannot run the shape.
MarkovBenchResult bench_markov(const MarkovBenchOptions& options, std::ostream& out);

nlohmann::json markov_bench_json(const MarkovBenchResult& r);

// Seeded device fills (also used by tests/cuda/test_markov.cu): element i gets
// lo + (hi - lo) * u_i, u_i = (philox_randint(seed, i) >> 8) * 2^-24, rounded to
// bf16 (ids: lo + randint % span).
void fill_uniform_bf16(bf16* dst, size_t n, uint64_t seed, float lo, float hi, cudaStream_t stream);
void fill_uniform_ids(int64_t* dst, size_t n, uint64_t seed, int64_t lo, int64_t span,
                      cudaStream_t stream);

// The SM clock seen by a kernel spinning for about `spin_ns` (MHz).
int measure_sm_clock_mhz(int64_t spin_ns);

}  // namespace sparkdraft::cuda
