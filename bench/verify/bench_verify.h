// The verifier benchmark (contract.md section 8; `sparkdraft bench verify`), as a
// library function the CLI calls: seeded inputs (target logits uniform in [-8, 8],
// the draft's cache the target plus uniform noise in [-1, 1] rounded to bf16, the
// draft tokens the cache rows' greedy picks, so that drafts are often accepted),
// the GPU checked against the CPU reference bit for bit first (nothing is timed on
// a difference), then the call captured in a CUDA graph and timed (median of
// repeats, cudaEvents, L2 flushed before each repeat) against the floor: the bytes
// of target logits and cache it must read (verify/verify_floor.h) over the device
// copy bandwidth measured in the same run.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "common/harness.h"
#include "cuda/verify/verify.h"
#include "sparkdraft/verify.h"

namespace sparkdraft::cuda {

struct VerifyBenchOptions {
  int vocab = 151936;
  int n = 7;
  int rows = 1;
  int repeats = 50;
  int warmup = 5;
  float temperature = 1.0f;
  LogitsDType dtype = LogitsDType::bf16;
  VerifyMethod method = VerifyMethod::standard;
  VerifyForm form = VerifyForm::automatic;  // the vocabulary passes' form (verify.h)
  // Overrides of the launcher's shape for sweeps (0: the pick's): threads per CTA, ids a
  // slice, and (the resident form only) requests in flight. The launcher refuses a shape
  // it cannot run (InvalidArgument).
  int threads = 0, slice = 0, resident_rows = 0;
  // Target logits: "uniform" (uniform in [-8, 8]) or "trained" (bench_markov.h's
  // trained_logits: the spread of a trained LM's logits, a few ids far above the bulk).
  std::string logits = "uniform";
  uint64_t seed = 20240601;
};

struct VerifyBenchResult {
  VerifyBenchOptions options;
  GpuInfo gpu;
  std::string difference;  // empty: the GPU equals the CPU reference bit for bit
  // The launch: list_capacity 0 and resident_rows 0 is the rows form.
  int threads = 0, slice = 0, slices = 0, list_capacity = 0, resident_rows = 0;
  double mean_accepted = 0;  // drafts accepted per row on the bench's inputs
  double bytes = 0, copy_bandwidth_gbs = 0, floor_us = 0, verify_us = 0, ratio = 0;
  bool ok() const { return difference.empty(); }
};

// Runs the benchmark on the current device and prints a short report to `out`.
// A GPU/CPU difference is returned in `difference` (row, field, both values, seed),
// with nothing timed.
VerifyBenchResult bench_verify(const VerifyBenchOptions& options, std::ostream& out);

nlohmann::json verify_bench_json(const VerifyBenchResult& r);

}  // namespace sparkdraft::cuda
