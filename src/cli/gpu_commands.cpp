// `sparkdraft check`, `sparkdraft plan` and `sparkdraft bench`: the GPU side of
// the tool. In a build without the CUDA backend they exist and say so.
#include <cstdio>
#include <fstream>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/commands.h"
#include "cli/options.h"
#include "cli/tiny_checkpoint.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/error.h"
#include "sparkdraft/plan.h"
#include "sparkdraft/scenario.h"

#if defined(SPARKDRAFT_HAVE_CUDA)
#include "markov/bench_markov.h"
#include "sparkdraft/cuda/check_draft.h"
#include "sparkdraft/cuda/draft.h"
#include "sparkdraft/cuda/markov.h"
#endif

namespace sparkdraft::cli {
namespace {

// The checkpoint of --checkpoint, or a tiny synthetic one in `tiny`'s directory.
[[maybe_unused]] std::shared_ptr<const Checkpoint> load_or_make_tiny(const std::string& dir,
                                                                     const std::string& style,
                                                                     bool allow_nonfinite,
                                                                     TinyCheckpoint& tiny,
                                                                     bool defer_scan = false) {
  LoadOptions lo;
  lo.allow_nonfinite = allow_nonfinite;
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
                            bool& allow_nonfinite) {
  sub->add_option("--checkpoint", checkpoint, "Checkpoint directory; default: a tiny synthetic one")
      ->check(non_empty(" (leave --checkpoint out for a tiny synthetic checkpoint)"));
  sub->add_option("--style", style, "Style of the default tiny checkpoint: qwen3 or muse")
      ->check(CLI::IsMember({"qwen3", "muse"}));
  add_allow_nonfinite(sub, allow_nonfinite);
}

#if defined(SPARKDRAFT_HAVE_CUDA)
void require_gpu(const char* what) {
  if (!cuda::cuda_available())
    throw Unavailable(std::string(what) + " needs a CUDA GPU, and none is usable here");
}
#endif

}  // namespace

Command add_check(CLI::App& app) {
  struct Opts {
    std::string checkpoint, style;
    int requests = 3, rounds = 3;
    uint64_t seed = 1;
    bool allow_nonfinite = false;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "check",
      "Bit-for-bit check of the exactness contract on the GPU: the CPU backend (its Markov bias "
      "on the CPU tensor-core twin; its backbone GEMMs and attention, not yet on the twin, done on "
      "the GPU) vs the GPU eager path vs the GPU fused path, on draft tokens, "
      "the draft-logits cache and every KV cache, over a multi-round scenario. Exit 1 on any "
      "difference, 4 without a GPU.");
  add_checkpoint_options(sub, opts->checkpoint, opts->style, opts->allow_nonfinite);
  add_bounded(sub, "--requests", opts->requests, "Requests", 1, 64);
  add_bounded(sub, "--rounds", opts->rounds, "Rounds", 1, 100);
  add_seed(sub, opts->seed, "Scenario seed");
  return {sub, [opts]() -> int {
#if defined(SPARKDRAFT_HAVE_CUDA)
            require_gpu("check");
            TinyCheckpoint tiny;
            auto ckpt =
                load_or_make_tiny(opts->checkpoint, opts->style, opts->allow_nonfinite, tiny, true);
            const ScenarioOptions s = scenario_of(opts->requests, opts->rounds, opts->seed);
            const cuda::CheckReport report = cuda::check_draft(ckpt, s);
            std::fputs(report.text().c_str(), stdout);
            return report.ok() ? 0 : 1;
#else
            (void)opts;
            no_cuda("check");
#endif
          }};
}

Command add_plan(CLI::App& app) {
  struct Opts {
    std::string checkpoint, style, backend = "cuda";
    int max_reqs = 8, tp = 1;
    bool allow_nonfinite = false;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "plan",
      "Print the plan of a backend for a checkpoint: for each part of the draft step the variant "
      "that runs (eager, fused, ...) and why; the backend runs exactly this plan");
  add_checkpoint_options(sub, opts->checkpoint, opts->style, opts->allow_nonfinite);
  sub->add_option("--backend", opts->backend, "cuda (the GPU plan, host logic only) or cpu")
      ->check(CLI::IsMember({"cuda", "cpu"}))
      ->capture_default_str();
  add_bounded(sub, "--max-reqs", opts->max_reqs, "Rows per call", 1, kMaxReqs);
  add_bounded(sub, "--tp", opts->tp, "Vocab-parallel ranks (cpu backend)", 1, kMaxTp);
  return {
      sub, [opts]() -> int {
        TinyCheckpoint tiny;
        auto ckpt = load_or_make_tiny(opts->checkpoint, opts->style, opts->allow_nonfinite, tiny);
        if (opts->backend == "cpu") {
          std::printf("%s", cpu_plan(opts->tp).text().c_str());
          return 0;
        }
#if defined(SPARKDRAFT_HAVE_CUDA)
        std::printf("%s", cuda::make_plan(ckpt->config(), cuda::CudaDraftOptions{}, opts->max_reqs)
                              .text()
                              .c_str());
        return 0;
#else
            no_cuda("plan (the cuda backend; --backend cpu prints the CPU plan)");
#endif
      }};
}

Command add_bench(CLI::App& app) {
  struct Opts {
    std::string json;
    std::vector<int> rows{1};
    int vocab = 151936, markov_rank = 256, steps = 7, repeats = 50;
    float temperature = 1.0f;
    bool transform = false, spec_suite = false;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* bench = app.add_subcommand("bench", "GPU benchmarks (SPEC section 7)");
  bench->require_subcommand(1);
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
  sub->add_option("--temperature", opts->temperature, "Temperature of every row")
      ->capture_default_str();
  sub->add_flag("--transform", opts->transform, "Apply the Muse-style output-logit transform");
  sub->add_flag("--spec", opts->spec_suite,
                "Run the SPEC section 7 shapes: V 151936 rank 256 and V 202048 rank 512, N 7, at "
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
            std::printf("\n%-8s %-5s %-3s %-5s %11s %11s %10s %11s %11s\n", "V", "rank", "N",
                        "rows", "eager us", "fused us", "floor us", "fused/floor", "eager/floor");
            for (const auto& r : results)
              std::printf("%-8d %-5d %-3d %-5d %11.1f %11.1f %10.1f %11.3f %11.3f\n",
                          r.options.vocab, r.options.markov_rank, r.options.steps, r.options.rows,
                          r.eager_us, r.fused_us, r.floor_us, r.fused_ratio, r.eager_ratio);
            if (!opts->json.empty()) {
              std::ofstream f(opts->json);
              if (!f) throw IoError("cannot write " + opts->json);
              f << all.dump(2) << "\n";
              std::printf("wrote %s\n", opts->json.c_str());
            }
            return 0;
#else
            (void)opts;
            no_cuda("bench markov");
#endif
          }};
}

}  // namespace sparkdraft::cli
