// `sparkdraft check`, `sparkdraft plan` and `sparkdraft bench`: the GPU side of
// the tool. In a build without the CUDA backend they exist and say so.
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/exit_status.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "cli/tiny_checkpoint.h"
#include "sparkdraft/check.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/error.h"
#include "sparkdraft/plan.h"
#include "sparkdraft/scenario.h"

#if defined(SPARKDRAFT_HAVE_CUDA)
#include <cuda_runtime.h>

#include "allreduce/bench_allreduce.h"
#include "check/check_draft.h"
#include "common/harness.h"
#include "cuda/common/mma_probe.h"
#include "cuda/markov/markov.h"
#include "markov/bench_markov.h"
#include "sparkdraft/cuda/draft.h"
#include "step/bench_step.h"
#include "verify/bench_verify.h"
#if defined(SPARKDRAFT_HAVE_NCCL)
#include "sparkdraft/cuda/nccl_comm.h"
#endif
#endif

namespace sparkdraft::cli {
namespace {

// The checkpoint of --checkpoint, or a tiny synthetic one in `tiny`'s directory.
[[maybe_unused]] std::shared_ptr<const Checkpoint> load_or_make_tiny(const std::string& dir,
                                                                     const std::string& style,
                                                                     const LoadFlags& flags,
                                                                     TinyCheckpoint& tiny,
                                                                     bool defer_scan = false) {
  LoadOptions lo = flags.options();
  lo.defer_nonfinite_scan = defer_scan;  // the backends built on it scan (the GPU on the device)
  return std::make_shared<const Checkpoint>(
      Checkpoint::load(dir.empty() ? tiny.make(style) : dir, lo));
}

[[maybe_unused]] [[noreturn]] void no_cuda(const char* what) {
  throw Unavailable(
      std::string(what) +
      " needs the CUDA backend, which this build does not have (no nvcc at configure time)");
}

void add_checkpoint_options(CLI::App* sub, std::string& checkpoint, std::string& style,
                            LoadFlags& load) {
  sub->add_option("--checkpoint", checkpoint, "Checkpoint directory; default: a tiny synthetic one")
      ->check(non_empty(" (leave --checkpoint out for a tiny synthetic checkpoint)"));
  sub->add_option("--style", style, "Style of the default tiny checkpoint: qwen3 or muse")
      ->check(CLI::IsMember({"qwen3", "muse"}));
  add_load_flags(sub, load);
}

// --tp-reduce: how the GPU's TP ranks complete o_proj's and down's all-reduce
// (cuda::TpReduce).
void add_tp_reduce(CLI::App* sub, std::string& reduce) {
  sub->add_option("--tp-reduce", reduce,
                  "how the TP ranks complete o_proj's and down's all-reduce: fused (the fused "
                  "peer boundary: partials pushed into the peers' mailboxes, the tree and the "
                  "residual boundary in one kernel), eager (an all-gather of the partials, then "
                  "the tree), auto (fused where every rank has a GPU of its own reaching its "
                  "peers). fused on ranks sharing one GPU needs CUDA_MODULE_LOADING=EAGER")
      ->check(CLI::IsMember({"auto", "eager", "fused"}))
      ->capture_default_str();
}

// --step-pdl: CudaDraftOptions::step_pdl of the fused step (default off, as the library's).
void add_step_pdl(CLI::App* sub, std::string& step_pdl) {
  sub->add_option("--step-pdl", step_pdl,
                  "Programmatic dependent launch on every kernel of the step (on: each kernel "
                  "may start while the one before it finishes, and the GEMMs stream their first "
                  "weights before they wait) or only in the fused Markov loop (off, the default "
                  "of CudaDraftOptions::step_pdl)")
      ->check(CLI::IsMember({"on", "off"}))
      ->capture_default_str();
}

// --devices: the GPU of each TP rank, comma- or space-separated.
void add_devices(CLI::App* sub, std::vector<int>& devices, const std::string& help) {
  sub->add_option("--devices", devices, help)->check(CLI::Range(0, 1023))->delimiter(',');
}

#if defined(SPARKDRAFT_HAVE_CUDA)
void require_gpu(const char* what) {
  if (!cuda::cuda_available())
    throw Unavailable(std::string(what) + " needs a CUDA GPU, and none is usable here");
}

// The end of a bench command: its results as a JSON array when --json was given.
int write_bench_json(const std::string& path, const nlohmann::json& all) {
  if (path.empty()) return 0;
  cuda::write_json_file(path, all);
  std::printf("wrote %s\n", path.c_str());
  return 0;
}
#endif

}  // namespace

Command add_check(CLI::App& app) {
  struct Opts {
    std::string checkpoint, style, backend = "cuda", tp_reduce = "auto", step_pdl = "off";
    int requests = 3, rounds = 3, tp = 1;
    std::vector<int> devices;
    uint64_t seed = 1;
    LoadFlags load;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "check",
      "Bit-for-bit check of the exactness contract over a multi-round scenario, on draft "
      "tokens, the draft-logits cache and every KV cache (the odd rounds draft seeded "
      "per-request lengths, contract.md 9.5). --backend cuda (the default, needs a "
      "GPU): the CPU backend (every matrix product, GEMMs, attention and the Markov bias, on its "
      "own tensor-core twin; nothing borrowed from the GPU) vs the GPU eager path vs the GPU "
      "fused path. --tp N (N >= 2) with --backend cuda: the GPU backend at N TP ranks (--devices: "
      "one GPU a rank over NCCL, or the ranks sharing one GPU) vs the GPU at TP 1, hidden states "
      "included. --backend cpu --tp N (no GPU needed): the CPU backend at N thread ranks (the "
      "layers sharded where the config splits, the vocabulary always) vs the CPU backend at TP "
      "1. Exit 1 on any difference, 4 without a GPU for --backend cuda.");
  add_checkpoint_options(sub, opts->checkpoint, opts->style, opts->load);
  add_bounded(sub, "--requests", opts->requests, "Requests", 1, 64);
  add_bounded(sub, "--rounds", opts->rounds, "Rounds", 1, 100);
  add_seed(sub, opts->seed, "Scenario seed");
  sub->add_option("--backend", opts->backend,
                  "cuda: CPU vs GPU eager vs GPU fused; cpu: the CPU at --tp N vs TP 1")
      ->check(CLI::IsMember({"cuda", "cpu"}))
      ->capture_default_str();
  sub->add_option("--tp", opts->tp,
                  "TP ranks: 1 (CPU vs GPU eager vs fused) or 2 or more (TP N vs TP 1) with "
                  "--backend cuda; 2 or more with --backend cpu")
      ->check(power_of_two(kMaxTp))
      ->capture_default_str();
  add_devices(sub, opts->devices,
              "GPU of each TP rank, e.g. --devices 0 1; one device for every rank (the ranks then "
              "share it as threads, eager and without a graph); default: ranks on devices 0 .. "
              "tp-1 (NCCL, one GPU a rank)");
  add_tp_reduce(sub, opts->tp_reduce);
  add_step_pdl(sub, opts->step_pdl);
  return {sub, [opts, sub]() -> int {
            ScenarioOptions s = scenario_of(opts->requests, opts->rounds, opts->seed);
            s.lengths = true;  // the odd rounds with per-request lengths (contract.md 9.5)
            if (opts->backend == "cpu") {
              if (sub->count("--step-pdl") > 0)
                throw InvalidArgument("check --step-pdl needs --backend cuda");
              if (opts->tp < 2)
                throw InvalidArgument(
                    "check --backend cpu compares the CPU backend at --tp N (2 or more) with TP "
                    "1; give --tp 2, 4, 8, ...");
              TinyCheckpoint tiny;
              auto ckpt = load_or_make_tiny(opts->checkpoint, opts->style, opts->load, tiny);
              const CheckReport report = check_tp_invariance(ckpt, s, opts->tp);
              std::fputs(report.text().c_str(), stdout);
              return report.ok() ? 0 : 1;
            }
            if (!opts->devices.empty() && opts->tp == 1)
              throw InvalidArgument("check --devices names the GPUs of --tp N ranks (N >= 2)");
            if (sub->count("--step-pdl") > 0 && opts->tp != 1)
              throw InvalidArgument("check --step-pdl applies to --tp 1");
#if defined(SPARKDRAFT_HAVE_CUDA)
            require_gpu("check");
            TinyCheckpoint tiny;
            auto ckpt = load_or_make_tiny(opts->checkpoint, opts->style, opts->load, tiny, true);
            cuda::CudaDraftOptions fused;
            fused.step_pdl = opts->step_pdl == "on";
            const CheckReport report = opts->tp == 1
                                           ? cuda::check_draft(ckpt, s, fused)
                                           : cuda::check_tp(ckpt, s, opts->tp, opts->devices,
                                                            cuda::parse_tp_reduce(opts->tp_reduce));
            std::fputs(report.text().c_str(), stdout);
            return report.ok() ? 0 : 1;
#else
            no_cuda("check");  // --backend cpu --tp N runs in this build
#endif
          }};
}

Command add_plan(CLI::App& app) {
  struct Opts {
    std::string checkpoint, style, backend = "cuda";
    int max_reqs = 8, tp = 1;
    LoadFlags load;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "plan",
      "Print the plan of a backend for a checkpoint: for each part of the draft step the variant "
      "that runs (eager, fused, ...) and why; the backend runs exactly this plan");
  add_checkpoint_options(sub, opts->checkpoint, opts->style, opts->load);
  sub->add_option("--backend", opts->backend, "cuda (the GPU plan, host logic only) or cpu")
      ->check(CLI::IsMember({"cuda", "cpu"}))
      ->capture_default_str();
  add_bounded(sub, "--max-reqs", opts->max_reqs, "Rows per call", 1, kMaxReqs);
  sub->add_option("--tp", opts->tp,
                  "TP ranks (cpu: thread ranks; cuda: one GPU a rank): the vocabulary, and the "
                  "layers where they split")
      ->check(power_of_two(kMaxTp))
      ->capture_default_str();
  return {sub, [opts]() -> int {
            TinyCheckpoint tiny;
            auto ckpt = load_or_make_tiny(opts->checkpoint, opts->style, opts->load, tiny);
            // The backend's own refusals first: a plan it would not run is not printed.
            DraftOptions o;
            o.max_reqs = opts->max_reqs;
            o.tp = opts->tp;
            if (opts->backend == "cpu") {
              validate_cpu_backend(ckpt->config(), o);
              std::printf("%s", cpu_plan(ckpt->config(), opts->tp).text().c_str());
              return 0;
            }
#if defined(SPARKDRAFT_HAVE_CUDA)
            cuda::validate_cuda_backend(ckpt->config(), o);  // what the CUDA backend refuses first
            cuda::PlanTp tp;
            tp.tp_size = opts->tp;
            std::printf(
                "%s", cuda::make_plan(ckpt->config(), cuda::CudaDraftOptions{}, opts->max_reqs, tp)
                          .text()
                          .c_str());
            int gpus = 0;
            if (cudaGetDeviceCount(&gpus) == cudaSuccess && gpus > 0) {
              const cuda::WgmmaStatus& wg = cuda::wgmma_self_test();
              std::printf("gemm: %s (%s)\n",
                          wg.usable ? "the wgmma tiles where cuda::gemm_pick measured them faster"
                                    : "the mma.sync tiles only",
                          wg.why.c_str());
            } else {
              std::printf(
                  "gemm: no GPU here, so the wgmma self-test did not run (it decides whether the "
                  "wgmma tiles may run)\n");
            }
#if defined(SPARKDRAFT_HAVE_NCCL)
            std::printf("nccl: %s (the runtime library; NVLink multicast off)\n",
                        cuda::nccl_version().c_str());
#else
        std::printf("nccl: not built (no NCCL library at configure time)\n");
#endif
            return 0;
#else
            no_cuda("plan (the cuda backend; --backend cpu prints the CPU plan)");
#endif
          }};
}

namespace {

Command add_bench_markov(CLI::App* bench) {
  struct Opts {
    std::string json, logits = "uniform";
    std::vector<int> rows{1};
    int vocab = 151936, markov_rank = 256, steps = 7, repeats = 50, topk = 0;
    float temperature = 1.0f;
    bool transform = false, spec_suite = false;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* sub = bench->add_subcommand(
      "markov",
      "The Markov loop: eager (in a CUDA graph) vs fused (in a CUDA graph) vs the floor, the bytes "
      "the loop must move over the copy bandwidth measured in the same run. Checks fused == eager "
      "bit for bit before timing; median of repeats; prints a table and writes JSON.");
  add_bounded(sub, "--vocab", opts->vocab, "Vocabulary V", 1, 1 << 24);
  add_bounded(sub, "--rank", opts->markov_rank, "Markov rank", 1, 4096);
  add_bounded(sub, "--steps", opts->steps, "Draft tokens N", 1, 64);
  add_bounded(sub, "--rows", opts->rows, "Row counts to run (several allowed)", 1, kMaxReqs);
  add_bounded(sub, "--repeats", opts->repeats, "Timed repeats (median)", 1, 100000);
  add_bounded(sub, "--temperature", opts->temperature, "Temperature of every row", 0.0f, 1e6f);
  sub->add_flag("--transform", opts->transform, "Apply the Muse-style output-logit transform");
  sub->add_option(
         "--logits", opts->logits,
         "Base logits: uniform (uniform in [-8, 8]) or trained (a trained LM's spread: "
         "bulk -2 + 2.5 N(0, 1), 8 ids per vector in [18, 26); bench/markov/bench_markov.h)")
      ->check(CLI::IsMember({"uniform", "trained"}))
      ->capture_default_str();
  add_bounded(sub, "--topk", opts->topk,
              "Also run the top-k Markov loop (contract.md section 12) with this k on the same "
              "inputs: checked bit for bit against the CPU reference loop, timed beside the full "
              "loop, with its own floor (0: not run)",
              0, 1 << 24);
  sub->add_flag(
      "--spec", opts->spec_suite,
      "Run the contract.md section 7 shapes: V 151936 rank 256 and V 202048 rank 512, N 7, at "
      "1, 8 and 32 rows");
  sub->add_option("--json", opts->json, "Write the results as a JSON array to this file");
  return {sub, [opts]() -> int {
#if defined(SPARKDRAFT_HAVE_CUDA)
            require_gpu("bench markov");
            std::vector<cuda::MarkovBenchOptions> runs;
            auto make = [&](int v, int k, int rows) {
              cuda::MarkovBenchOptions b;
              b.vocab = v;
              b.markov_rank = k;
              b.steps = opts->steps;
              b.rows = rows;
              b.repeats = opts->repeats;
              b.transform = opts->transform;
              b.temperature = opts->temperature;
              b.logits = opts->logits;
              b.topk = opts->topk;
              return b;
            };
            if (opts->spec_suite) {
              for (int rows : {1, 8, 32}) runs.push_back(make(151936, 256, rows));
              for (int rows : {1, 8, 32}) runs.push_back(make(202048, 512, rows));
            } else {
              for (int rows : opts->rows)
                runs.push_back(make(opts->vocab, opts->markov_rank, rows));
            }
            nlohmann::json all = nlohmann::json::array();
            std::vector<cuda::MarkovBenchResult> results;
            for (const auto& b : runs) {
              const cuda::MarkovBenchResult r = cuda::bench_markov(b, std::cout);
              all.push_back(cuda::markov_bench_json(r));
              results.push_back(r);
            }
            std::printf("\n%-8s %-5s %-3s %-5s %-8s %11s %11s %10s %11s %11s\n", "V", "rank", "N",
                        "rows", "logits", "eager us", "fused us", "floor us", "fused/floor",
                        "eager/floor");
            for (const auto& r : results)
              std::printf("%-8d %-5d %-3d %-5d %-8s %11.1f %11.1f %10.1f %11.3f %11.3f\n",
                          r.options.vocab, r.options.markov_rank, r.options.steps, r.options.rows,
                          r.options.logits.c_str(), r.timing.eager_us, r.timing.fused_us,
                          r.timing.floor_us, r.timing.fused_ratio, r.timing.eager_ratio);
            if (opts->topk > 0) {
              std::printf("\n%-8s %-5s %-5s %-5s %11s %10s %11s %11s\n", "V", "rank", "k", "rows",
                          "top-k us", "floor us", "top-k/floor", "full/top-k");
              for (const auto& r : results)
                std::printf("%-8d %-5d %-5d %-5d %11.1f %10.2f %11.2f %11.1f\n", r.options.vocab,
                            r.options.markov_rank, r.options.topk, r.options.rows, r.topk_us,
                            r.topk_floor_us, r.topk_ratio, r.timing.fused_us / r.topk_us);
            }
            return write_bench_json(opts->json, all);
#else
            (void)opts;
            no_cuda("bench markov");
#endif
          }};
}

// The synthetic checkpoint of `preset` in `root` (default the temp directory), as
// sparkdraft-bench-<preset>: reused when it is there; else written (with progress)
// to a scratch directory beside it and renamed into place once complete, so an
// interrupted write is never taken for a checkpoint.
[[maybe_unused]] std::string preset_checkpoint(const std::string& preset, const std::string& root) {
  namespace fs = std::filesystem;
  const fs::path base = root.empty() ? fs::temp_directory_path() : fs::path(root);
  const fs::path dir = base / ("sparkdraft-bench-" + preset);
  if (fs::exists(dir / "config.json")) {
    std::printf("bench step: using the %s checkpoint in %s\n", preset.c_str(), dir.c_str());
    return dir.string();
  }
  fs::create_directories(base);
  const fs::path partial = dir.string() + ".partial-" + std::to_string(::getpid());
  fs::remove_all(partial);
  std::printf("bench step: writing the %s checkpoint to %s\n", preset.c_str(), dir.c_str());
  std::fflush(stdout);
  SyntheticOptions so;
  so.seed = 1;
  so.progress = write_progress("bench step: " + preset);
  write_synthetic_checkpoint(preset_config(preset), partial.string(), so);
  fs::rename(partial, dir);
  return dir.string();
}

Command add_bench_step(CLI::App* bench) {
  struct Opts {
    std::string preset = "tiny", checkpoint, preset_dir, json, tp_reduce = "auto";
    std::vector<int> rows{1, 8, 32}, devices;
    int ctx = 4096, repeats = 20, tp = 1;
    uint64_t seed = 20240601;
    bool spec_suite = false, timeline = false;
    LoadFlags load;
    std::string step_pdl = "off";
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* sub = bench->add_subcommand(
      "step",
      "The whole draft step on the GPU (contract.md section 7): propose (query-block backbone, "
      "lm_head, "
      "Markov loop) for R requests after ctx context positions were stored, one CUDA graph per "
      "backend, timed for the eager backend (eager Markov loop) and the fused backend (fused "
      "Markov loop) against the floor: the bytes the step must move at least (every layer weight "
      "and norm once, lm_head once, the KV cache attention reads, w2 once per draft step, the "
      "base logits written and read, the draft-logits cache written; printed part by part) over "
      "the device copy bandwidth measured in the same run; beside it (TP 1) the step's matrix "
      "products (projections, lm_head, attention, the Markov bias) over the tensor-core peak "
      "measured in the same run (wgmma m64n256k16), and the roofline floor: per part the "
      "slower of its bytes and its products. Before timing, checks that both "
      "backends' draft tokens and draft-logits cache are bit for bit equal (exit 1 on a "
      "difference, nothing timed). Median of repeats with cudaEvents, L2 flushed before each. "
      "Prints the GPU, the clocks seen and a table; writes JSON. --tp N (N >= 2): the fused step "
      "at N TP ranks, one GPU each over NCCL (--devices), after the same step at TP 1: every "
      "rank checked bit for bit against TP 1 first, then timed per repeat as the slowest rank, "
      "against the floor of one GPU (its share of the weights and KV).");
  sub->add_option("--preset", opts->preset,
                  "Synthetic checkpoint shape: tiny (seconds), qwen3-8b (the published Qwen3-8B "
                  "draft, writes 4.7 GB once) or muse (the open Muse Spark draft shape, 13.9 GB)")
      ->check(CLI::IsMember(preset_names()))
      ->capture_default_str();
  CLI::Option* checkpoint = sub->add_option("--checkpoint", opts->checkpoint,
                                            "Benchmark this checkpoint instead of a preset")
                                ->check(non_empty(" (leave --checkpoint out to use --preset)"));
  sub->add_option("--preset-dir", opts->preset_dir,
                  "Where the presets' checkpoints are written as sparkdraft-bench-<preset> and "
                  "reused by later runs; default: the temp directory")
      ->check(non_empty(" (leave --preset-dir out for the temp directory)"));
  CLI::Option* ctx = add_bounded(
      sub, "--ctx", opts->ctx, "Context positions per request, stored before the step", 1, 1 << 20);
  CLI::Option* rows =
      add_bounded(sub, "--rows", opts->rows,
                  "Requests drafted by one step (several allowed: one run each)", 1, kMaxReqs);
  add_bounded(sub, "--repeats", opts->repeats, "Timed graph launches (the median is reported)", 1,
              100000);
  add_seed(sub, opts->seed, "Seed of the synthetic hidden states, anchors and sampling seeds");
  sub->add_flag(
         "--spec", opts->spec_suite,
         "Run the contract.md section 7 set: the qwen3-8b and muse presets at ctx 4096, rows 1, 8 "
         "and 32")
      ->excludes(checkpoint)
      ->excludes("--preset")
      ->excludes(ctx)
      ->excludes(rows);
  checkpoint->excludes("--preset");
  sub->add_option("--tp", opts->tp, "TP ranks, one GPU each (NCCL)")
      ->check(power_of_two(kMaxTp))
      ->capture_default_str();
  add_devices(sub, opts->devices, "GPU of each TP rank, distinct (default: 0 .. tp-1)");
  add_tp_reduce(sub, opts->tp_reduce);
  add_step_pdl(sub, opts->step_pdl);
  sub->add_flag("--timeline", opts->timeline,
                "Also replay the fused graph once under CUPTI (libcupti from the CUDA toolkit, "
                "loaded at run time) and print its kernel count, span, idle time between "
                "kernels and the largest gaps; the JSON gets every kernel's start and duration "
                "(TP 1)");
  sub->add_option("--json", opts->json, "Write the results as a JSON array to this file");
  add_load_flags(sub, opts->load);
  return {
      sub, [opts]() -> int {
        if (!opts->devices.empty() && opts->tp == 1)
          throw InvalidArgument("bench step --devices names the GPUs of --tp N ranks (N >= 2)");
        if (opts->timeline && opts->tp > 1)
          throw InvalidArgument("bench step --timeline records the TP 1 step (leave out --tp)");
#if defined(SPARKDRAFT_HAVE_CUDA)
        require_gpu("bench step");
        struct Target {
          std::string preset, dir;
        };
        std::vector<Target> targets;
        if (!opts->checkpoint.empty())
          targets.push_back({"", opts->checkpoint});
        else
          for (const std::string& p : opts->spec_suite
                                          ? std::vector<std::string>{"qwen3-8b", "muse"}
                                          : std::vector<std::string>{opts->preset})
            targets.push_back({p, ""});
        const std::vector<int> row_counts =
            opts->spec_suite ? std::vector<int>{1, 8, 32} : opts->rows;
        nlohmann::json all = nlohmann::json::array();
        std::vector<cuda::StepBenchResult> results;
        for (Target& t : targets) {
          if (t.dir.empty()) t.dir = preset_checkpoint(t.preset, opts->preset_dir);
          LoadOptions lo = opts->load.options();
          lo.defer_nonfinite_scan = true;  // each backend scans its device copies
          auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(t.dir, lo));
          for (int r : row_counts) {
            cuda::StepBenchOptions b;
            b.preset = t.preset;
            b.checkpoint = t.dir;
            b.ctx = opts->spec_suite ? 4096 : opts->ctx;
            b.rows = r;
            b.repeats = opts->repeats;
            b.seed = opts->seed;
            b.tp = opts->tp;
            b.devices = opts->devices;
            b.tp_reduce = cuda::parse_tp_reduce(opts->tp_reduce);
            b.step_pdl = opts->step_pdl == "on";
            b.timeline = opts->timeline;
            const cuda::StepBenchResult res = b.tp == 1 ? cuda::bench_step(ckpt, b, std::cout)
                                                        : cuda::bench_step_tp(ckpt, b, std::cout);
            if (!res.ok()) {
              std::fflush(stdout);
              std::fprintf(stderr, "sparkdraft: bench step: nothing timed: %s (seed %llu)\n",
                           res.difference.c_str(), static_cast<unsigned long long>(b.seed));
              return kExitDifference;
            }
            all.push_back(cuda::step_bench_json(res));
            results.push_back(res);
          }
        }
        const cuda::GpuInfo& gpu = results.front().gpu;
        std::printf("\n%s, memory clock %d MHz\n", gpu.name.c_str(), gpu.mem_clock_peak_mhz);
        if (opts->tp > 1) {
          std::printf("%-10s %-6s %-5s %-3s %11s %11s %10s %11s %9s %7s\n", "preset", "ctx", "rows",
                      "tp", "tp1 us", "tpN us", "floor us", "tpN/floor", "copy GB/s", "SM MHz");
          for (const auto& r : results)
            std::printf("%-10s %-6d %-5d %-3d %11.1f %11.1f %10.1f %11.3f %9.0f %7d\n",
                        r.options.preset.empty() ? "(ckpt)" : r.options.preset.c_str(),
                        r.options.ctx, r.options.rows, r.options.tp, r.tp1_us, r.timing.fused_us,
                        r.timing.floor_us, r.timing.fused_ratio, r.timing.copy_bandwidth_gbs,
                        r.gpu.sm_clock_seen_mhz);
          return write_bench_json(opts->json, all);
        }
        for (const auto& r : results)
          std::printf("%-10s %-6d %-5d %11.1f %11.1f %10.1f %11.3f %11.3f %9.0f %7d\n",
                      r.options.preset.empty() ? "(ckpt)" : r.options.preset.c_str(), r.options.ctx,
                      r.options.rows, r.timing.eager_us, r.timing.fused_us, r.timing.floor_us,
                      r.timing.fused_ratio, r.timing.eager_ratio, r.timing.copy_bandwidth_gbs,
                      r.gpu.sm_clock_seen_mhz);
        return write_bench_json(opts->json, all);
#else
            (void)opts;
            no_cuda("bench step");
#endif
      }};
}

Command add_bench_allreduce(CLI::App* bench) {
  struct Opts {
    std::string json;
    std::vector<int> tp, rows{1, 2, 4, 8, 16, 32, 128, 512}, hidden{4096, 8192};
    int repeats = 50;
    uint64_t seed = 20240601;
    double timeout = 60;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* sub = bench->add_subcommand(
      "allreduce",
      "The TP all-reduce (contract.md section 6), one thread and one GPU per rank: our eager "
      "all_reduce_sum (ncclAllGather of the fp32 partials + the fixed tree, the same bits on "
      "every rank) and our fused one (each rank pushes its partials into its peers' mailboxes "
      "over NVLink with epoch flags, the tree in the same kernel; where the GPUs reach each "
      "other) vs ncclAllReduce on the same buffer, each in a CUDA graph, for each TP size and "
      "rows x hidden. Checks both of our sums against the tree computed on the host bit for "
      "bit before timing (exit 1 on a difference) and counts the elements where "
      "ncclAllReduce's bits differ from the tree; median of repeats, each after a host "
      "barrier, the slowest rank reported. Prints a table and writes JSON. Needs 2 or more "
      "GPUs.");
  add_bounded(sub, "--tp", opts->tp, "TP sizes (several allowed); default: 2 to the GPU count", 2,
              kMaxTp);
  add_bounded(sub, "--rows", opts->rows,
              "Row counts (several allowed); the draft's o_proj and down reduce requests x "
              "block-size rows: 16, 128 and 512 at 1, 8 and 32 requests of a 16-token block",
              1, kMaxReqs);
  add_bounded(sub, "--hidden", opts->hidden, "Hidden sizes (several allowed)", 1, 1 << 16);
  add_bounded(sub, "--repeats", opts->repeats, "Timed graph launches (the median is reported)", 1,
              100000);
  add_seed(sub, opts->seed, "Seed of the partials");
  add_bounded(sub, "--timeout", opts->timeout,
              "Seconds any host wait of the group may take before the group is aborted", 1.0,
              3600.0);
  sub->add_option("--json", opts->json, "Write the results as a JSON array to this file");
  return {sub, [opts]() -> int {
#if defined(SPARKDRAFT_HAVE_CUDA) && defined(SPARKDRAFT_HAVE_NCCL)
            require_gpu("bench allreduce");
            int gpus = 0;
            SD_CUDA_CHECK(cudaGetDeviceCount(&gpus));
            if (gpus < 2)
              throw Unavailable("bench allreduce needs a CUDA GPU per rank, at least 2, and " +
                                std::to_string(gpus) + " is usable here");
            cuda::AllReduceBenchOptions b;
            if (opts->tp.empty())
              for (int tp = 2; tp <= std::min(gpus, kMaxTp); ++tp) b.tp_sizes.push_back(tp);
            else
              b.tp_sizes = opts->tp;
            b.rows = opts->rows;
            b.hidden = opts->hidden;
            b.repeats = opts->repeats;
            b.seed = opts->seed;
            b.timeout_s = opts->timeout;
            const cuda::AllReduceBenchReport report = cuda::bench_allreduce(b, std::cout);
            nlohmann::json all = nlohmann::json::array();
            std::printf("\nNCCL %s\n%-4s %-5s %-7s %10s %10s %10s %11s %12s\n",
                        report.nccl_version.c_str(), "tp", "rows", "hidden", "eager us", "fused us",
                        "nccl us", "fused/nccl", "nccl differs");
            for (const auto& r : report.results) {
              all.push_back(cuda::allreduce_bench_json(r, b, report.nccl_version));
              std::printf("%-4d %-5d %-7d %10.2f %10.2f %10.2f %11.3f %12lld\n", r.tp, r.rows,
                          r.hidden, r.our_us, r.fused_us, r.nccl_us,
                          r.nccl_us > 0 ? r.fused_us / r.nccl_us : 0.0,
                          static_cast<long long>(r.nccl_bits_differ));
            }
            if (!report.fused_why.empty())
              std::printf("the fused all-reduce did not run (fused us 0): %s\n",
                          report.fused_why.c_str());
            if (!report.ok()) {
              std::fflush(stdout);
              std::fprintf(stderr, "sparkdraft: bench allreduce: %s\n", report.difference.c_str());
              write_bench_json(opts->json, all);
              return kExitDifference;
            }
            return write_bench_json(opts->json, all);
#elif defined(SPARKDRAFT_HAVE_CUDA)
            (void)opts;
            throw Unavailable(
                "bench allreduce needs NCCL, which this build does not have (no libnccl at "
                "configure time)");
#else
            (void)opts;
            no_cuda("bench allreduce");
#endif
          }};
}

Command add_bench_verify(CLI::App* bench) {
  struct Opts {
    std::string json, dtype = "bf16", method = "standard", form = "auto", logits = "uniform";
    std::vector<int> vocab{151936, 202048}, rows{1, 8, 32};
    int steps = 7, repeats = 50, threads = 0, slice = 0, resident_rows = 0;
    float temperature = 1.0f;
    uint64_t seed = 20240601;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* sub = bench->add_subcommand(
      "verify",
      "The lossless verifier (contract.md section 8) on the GPU, in a CUDA graph, against the "
      "floor: the bytes of target logits and draft-logits cache it must read over the device "
      "copy bandwidth measured in the same run. Seeded inputs (target logits uniform in [-8, 8], "
      "or with --logits trained a trained LM's spread; the cache the target plus noise, the "
      "drafts the cache's greedy picks). Checks the GPU "
      "against the CPU reference bit for bit before timing (exit 1 on a difference, nothing "
      "timed); median of repeats with cudaEvents, L2 flushed before each. Prints bytes, floor "
      "and ratio per shape; writes JSON. Default: V 151936 and 202048, N 7, 1, 8 and 32 rows.");
  add_bounded(sub, "--vocab", opts->vocab, "Vocabularies V (several allowed)", 1, 1 << 24);
  add_bounded(sub, "--rows", opts->rows, "Row counts (several allowed)", 1, kMaxReqs);
  add_bounded(sub, "--steps", opts->steps, "Draft tokens N", 1, 64);
  add_bounded(sub, "--repeats", opts->repeats, "Timed graph launches (the median is reported)", 1,
              100000);
  add_bounded(sub, "--temperature", opts->temperature, "Temperature of every row", 0.0f, 1e6f);
  sub->add_option("--dtype", opts->dtype, "Target logits: bf16 or f32")
      ->check(CLI::IsMember({"bf16", "f32"}))
      ->capture_default_str();
  sub->add_option("--method", opts->method, "standard (token-wise) or block verification")
      ->check(CLI::IsMember({"standard", "block"}))
      ->capture_default_str();
  sub->add_option("--form", opts->form,
                  "The vocabulary passes' form: auto (the launcher's choice by row count), rows "
                  "(every pass reads the logits), lists (the first pass counts bf16 patterns, "
                  "the sums read the counts) or resident (one cooperative kernel, each "
                  "request's logits held in shared memory from the first pass to the draw); "
                  "the same bits in every form")
      ->check(CLI::IsMember({"auto", "rows", "lists", "resident"}))
      ->capture_default_str();
  sub->add_option("--threads", opts->threads,
                  "Threads per CTA instead of the launcher's (64, 128, 256 or 512; a sweep's knob)")
      ->check(CLI::IsMember({64, 128, 256, 512}));
  add_bounded(sub, "--slice", opts->slice,
              "Ids per vocabulary slice instead of the launcher's (a sweep's knob; a shape the "
              "launcher cannot run is refused)",
              1, 1 << 24);
  add_bounded(sub, "--resident-rows", opts->resident_rows,
              "With --form resident: requests in flight instead of the launcher's (all their CTAs "
              "must fit on the GPU at once)",
              1, kMaxReqs);
  sub->add_option("--logits", opts->logits,
                  "Target logits: uniform (in [-8, 8]) or trained (the spread of a trained LM's "
                  "logits: normal bulk around -2, eight ids far above it; bench markov's profile)")
      ->check(CLI::IsMember({"uniform", "trained"}))
      ->capture_default_str();
  add_seed(sub, opts->seed, "Seed of the inputs");
  sub->add_option("--json", opts->json, "Write the results as a JSON array to this file");
  return {sub, [opts]() -> int {
            if (opts->resident_rows > 0 && opts->form != "resident")
              throw InvalidArgument("bench verify: --resident-rows needs --form resident");
#if defined(SPARKDRAFT_HAVE_CUDA)
            require_gpu("bench verify");
            nlohmann::json all = nlohmann::json::array();
            std::vector<cuda::VerifyBenchResult> results;
            for (int v : opts->vocab)
              for (int rows : opts->rows) {
                cuda::VerifyBenchOptions b;
                b.vocab = v;
                b.n = opts->steps;
                b.rows = rows;
                b.repeats = opts->repeats;
                b.temperature = opts->temperature;
                b.dtype = opts->dtype == "f32" ? LogitsDType::f32 : LogitsDType::bf16;
                b.method = opts->method == "block" ? VerifyMethod::block : VerifyMethod::standard;
                b.form = opts->form == "rows"       ? cuda::VerifyForm::rows
                         : opts->form == "lists"    ? cuda::VerifyForm::lists
                         : opts->form == "resident" ? cuda::VerifyForm::resident
                                                    : cuda::VerifyForm::automatic;
                b.logits = opts->logits;
                b.seed = opts->seed;
                b.threads = opts->threads;
                b.slice = opts->slice;
                b.resident_rows = opts->resident_rows;
                const cuda::VerifyBenchResult r = cuda::bench_verify(b, std::cout);
                if (!r.ok()) {
                  std::fflush(stdout);
                  std::fprintf(stderr, "sparkdraft: bench verify: nothing timed: %s\n",
                               r.difference.c_str());
                  return kExitDifference;
                }
                all.push_back(cuda::verify_bench_json(r));
                results.push_back(r);
              }
            std::printf("\n%-8s %-3s %-5s %-5s %12s %10s %10s %8s %9s %9s\n", "V", "N", "rows",
                        "dtype", "bytes", "floor us", "verify us", "ratio", "copy GB/s",
                        "accepted");
            for (const auto& r : results)
              std::printf("%-8d %-3d %-5d %-5s %12.0f %10.1f %10.1f %8.3f %9.0f %9.2f\n",
                          r.options.vocab, r.options.n, r.options.rows, to_string(r.options.dtype),
                          r.bytes, r.floor_us, r.verify_us, r.ratio, r.copy_bandwidth_gbs,
                          r.mean_accepted);
            return write_bench_json(opts->json, all);
#else
            (void)opts;
            no_cuda("bench verify");
#endif
          }};
}

}  // namespace

Command add_bench(CLI::App& app) {
  CLI::App* bench = app.add_subcommand("bench", "GPU benchmarks (contract.md section 7)");
  bench->require_subcommand(1);
  const Command markov = add_bench_markov(bench);
  const Command step = add_bench_step(bench);
  const Command allreduce = add_bench_allreduce(bench);
  const Command verify = add_bench_verify(bench);
  return {bench, [markov, step, allreduce, verify] {
            if (markov.sub->parsed()) return markov.run();
            if (allreduce.sub->parsed()) return allreduce.run();
            if (verify.sub->parsed()) return verify.run();
            return step.run();
          }};
}

}  // namespace sparkdraft::cli
