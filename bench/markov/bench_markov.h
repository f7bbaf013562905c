// The Markov loop benchmark (contract.md section 7), as a library function the CLI's
// `bench` calls: seeded non-zero inputs built on the GPU, fused == eager checked
// bit for bit first, each loop captured in a CUDA graph and timed (median of
// repeats, cudaEvents, L2 flushed before each repeat), the device copy bandwidth
// measured in the same run, and the floor = bytes the loop must move / that
// bandwidth. With `topk` > 0 the top-k loop (contract.md section 12, the eager loop: the
// fused loop refuses it) runs on the same inputs beside the full loop: checked bit for bit
// against the CPU reference loop (tokens and every cache entry), timed the same way, with
// its own floor (it reads the base logits and k rows of w2 a step, and writes the cache).
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/harness.h"
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
  // Base logits: "uniform" (uniform in [-8, 8]) or "trained" (trained_logits below).
  std::string logits = "uniform";
  int topk = 0;  // > 0: also the top-k loop with this k (1 <= topk <= vocab)
  uint64_t seed = 20240601;
  std::string json_path;  // write the result as JSON here when not empty
};

struct MarkovBenchResult {
  MarkovBenchOptions options;
  GpuInfo gpu;
  FloorTiming timing;  // bytes: w2 per step, base, cache, w1 rows
  int fused_grid = 0, fused_blocks_per_sm = 0, fused_stages = 0, fused_smem = 0;
  bool pdl = true;
  // The top-k loop (options.topk > 0): its graph's median time, its own floor (base logits read,
  // k gathered w2 rows and one w1 row a row and step, the cache written) and the ratio.
  double topk_us = 0, topk_bytes = 0, topk_floor_us = 0, topk_ratio = 0;
};

// The "trained" profile of base logits, with the spread of a trained LM's logits: most
// entries far below the maximum, a few near it. Per vector of `vocab` entries (one
// (row, step)), from std::mt19937_64(seed) in order: the bulk, every entry
// bf16(-2 + 2.5 z) with z from std::normal_distribution<float>(0, 1); then the head,
// 8 draws of an id (std::uniform_int_distribution<int64_t>(0, vocab - 1), repeats
// allowed) each set to bf16(18 + 8 u), u from std::uniform_real_distribution<float>(0, 1).
// `count` entries in all (a multiple of vocab), vectors back to back.
std::vector<bf16> trained_logits(size_t count, int vocab, uint64_t seed);

// Runs the benchmark on the current device and prints a short report to `out`.
// Throws Error when fused and eager differ (naming row, step, index, bits, seed)
// or when the fused loop cannot run the shape.
MarkovBenchResult bench_markov(const MarkovBenchOptions& options, std::ostream& out);

nlohmann::json markov_bench_json(const MarkovBenchResult& r);

}  // namespace sparkdraft::cuda
