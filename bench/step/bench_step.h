// The draft step benchmark (contract.md section 7, `sparkdraft bench step`), as a library
// function the CLI and the tests call. For one row count R on one checkpoint:
//   * two GPU backends, "eager" (CudaDraftOptions::fused_markov = false) and
//     "fused" (the defaults), sized for R requests of `ctx` context positions plus
//     the N-token block (page size 16, request r owns pages r * pages_per_req + p);
//   * the same context stored in both through store_context_device: seeded
//     synthetic target hidden states built on the GPU, positions 0 .. ctx-1, in
//     chunks of at most max_context_tokens tokens;
//   * the step: propose_device for R rows (anchors at position ctx, seeded anchor
//     tokens and seeds, temperature 1, cache slot r for row r), one warm-up call,
//     then captured in one CUDA graph per backend;
//   * the check before any timing: the two backends' draft tokens and draft-logits
//     cache bit for bit equal, after the warm-up call and after one graph launch
//     (which must also repeat the warm-up's bits); a difference is reported in
//     StepBenchResult::difference and nothing is timed;
//   * the timing: median of `repeats` graph launches (cudaEvents, L2 flushed before
//     each), and the floor: step_floor_bytes over the copy bandwidth measured in
//     the same run.
#pragma once

#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/harness.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/cuda/draft.h"
#include "step/step_floor.h"
#include "step/timeline.h"

namespace sparkdraft::cuda {

struct StepBenchOptions {
  std::string preset;      // the preset's name, printed and recorded ("" with a checkpoint)
  std::string checkpoint;  // the checkpoint directory, recorded
  int ctx = 4096;          // context positions per request before the step
  int rows = 1;            // requests drafted by the step (R)
  int repeats = 20;
  int warmup = 3;
  int max_context_tokens = 1024;  // tokens per store_context_device call
  uint64_t seed = 20240601;
  int tp = 1;                                // TP ranks (bench_step_tp: one GPU each)
  std::vector<int> devices;                  // bench_step_tp: the ranks' GPUs (empty: 0 .. tp-1)
  TpReduce tp_reduce = TpReduce::automatic;  // bench_step_tp: CudaDraftOptions::tp_reduce
  bool step_pdl = false;                     // CudaDraftOptions::step_pdl of every backend
  bool timeline = false;  // bench_step: also one replay of the fused graph on a CUPTI timeline
};

struct StepBenchResult {
  StepBenchOptions options;
  GpuInfo gpu;
  int vocab = 0, markov_rank = 0, steps = 0;  // V, markov_rank, N of the checkpoint
  bool markov_fused = false;                  // the fused backend's plan runs the fused Markov loop
  std::string difference;  // where eager and fused differ; empty when bit for bit equal
  bool ok() const { return difference.empty(); }
  bench::StepFloorBytes floor;
  FloorTiming timing;  // bytes = floor.total()
  // bench_step (TP 1): the step's matrix products, the tensor-core peak measured in the same
  // run (0 where it could not be: peak_note says why) and the roofline floor over both rates.
  bench::StepFloorFlops flops;
  double tensor_peak_tflops = 0;
  std::string peak_note;
  bench::StepRoofline roofline;
  GraphTimeline timeline;  // options.timeline: the fused graph's kernels, one replay
  // bench_step_tp: timing.fused_us is the TP step (per repeat the slowest rank),
  // timing.eager_us is 0 (the vocab-parallel Markov loop is fused only), the floor
  // is one GPU's; tp1_us is the same step at TP 1 on the first device.
  double tp1_us = 0;
  bool fused_all_reduce = false;  // bench_step_tp: the ranks ran the fused peer boundary
};

// Runs one row count on the current device and prints a short report to `out`.
// When the backends differ, returns at once with `difference` set (nothing timed).
// Throws InvalidArgument on options out of range.
StepBenchResult bench_step(std::shared_ptr<const Checkpoint> ckpt, const StepBenchOptions& options,
                           std::ostream& out);

// The draft step at TP o.tp >= 2 with one GPU a rank (o.devices, distinct; NCCL
// through run_nccl_group, a CUDA graph on every rank), after the TP 1 fused step on
// the first device: every rank's draft tokens and draft-logits cache must equal TP 1's
// bit for bit (warm-up call and graph launch; otherwise `difference` is set and the
// timing dropped). Each repeat: the L2 flushed on every GPU, the ranks met on the
// host (NcclComm::barrier), then each rank's graph timed with events; the step's time
// is the slowest rank's, the result the median. The floor is one GPU's
// (step_floor_bytes at o.tp) over the first GPU's copy bandwidth. InvalidArgument for
// options out of range, devices that are not o.tp distinct GPUs; Unavailable without
// NCCL.
StepBenchResult bench_step_tp(std::shared_ptr<const Checkpoint> ckpt,
                              const StepBenchOptions& options, std::ostream& out);

// One record of the JSON array `bench step --json` writes ("bench": "draft_step").
nlohmann::json step_bench_json(const StepBenchResult& r);

}  // namespace sparkdraft::cuda
