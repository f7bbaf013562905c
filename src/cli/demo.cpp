// `sparkdraft demo`: the main job on the embedded default backend. Loads a
// checkpoint (or makes a tiny synthetic one), runs rounds of drafting for a few
// requests with a mock verifier advancing each request's context, and prints
// the plan, per-request draft tokens and per-stage timings.
#include <chrono>
#include <cstdio>
#include <string>

#include "cli/backend_select.h"
#include "cli/commands.h"
#include "cli/options.h"
#include "cli/tiny_checkpoint.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/scenario.h"

namespace sparkdraft::cli {

Command add_demo(CLI::App& app) {
  struct Opts {
    std::string checkpoint, backend = "auto";
    int requests = 3, rounds = 3, tp = 1, threads = 0;
    uint64_t seed = 1;
    bool allow_nonfinite = false, allow_unused = false;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "demo",
      "Draft a few rounds for a few requests and print the draft tokens, the plan and "
      "per-stage timings. Without --checkpoint a tiny synthetic checkpoint is made first.");
  sub->add_option("--checkpoint", opts->checkpoint,
                  "Checkpoint directory (config.json + safetensors); default: a tiny synthetic one "
                  "written to a temporary directory")
      ->check(non_empty(" (leave --checkpoint out for a tiny synthetic checkpoint)"));
  add_bounded(sub, "--requests", opts->requests, "Number of requests (rows)", 1, 256);
  add_bounded(sub, "--rounds", opts->rounds, "Drafting rounds", 1, 1000);
  add_seed(sub, opts->seed, "Scenario seed (prompts, hidden states, sampling seeds)");
  sub->add_option(
         "--tp", opts->tp,
         "TP thread ranks (power of two): the vocabulary, and the layers where the config splits")
      ->check(power_of_two(kMaxTp))
      ->capture_default_str();
  sub->add_option("--threads", opts->threads,
                  "CPU worker threads (0 = all cores; at most " + std::to_string(kMaxThreads) + ")")
      ->check(CLI::Range(0, kMaxThreads))
      ->capture_default_str();
  add_allow_nonfinite(sub, opts->allow_nonfinite);
  add_allow_unused(sub, opts->allow_unused);
  sub->add_option("--backend", opts->backend, backend_help())
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  return {
      sub, [opts] {
        const auto t0 = std::chrono::steady_clock::now();
        require_backend_available(opts->backend);
        TinyCheckpoint tiny;
        const std::string dir = opts->checkpoint.empty() ? tiny.make("qwen3") : opts->checkpoint;
        LoadOptions lo;
        lo.allow_nonfinite = opts->allow_nonfinite;
        lo.allow_unused_weights = opts->allow_unused;
        lo.threads = opts->threads;
        lo.defer_nonfinite_scan = true;  // the backend scans (the GPU on the device, after upload)
        auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(dir, lo));
        const ModelConfig& c = ckpt->config();
        const ScenarioOptions s = scenario_of(opts->requests, opts->rounds, opts->seed);
        DraftOptions o = scenario_draft_options(c, s);
        o.tp = opts->tp;
        o.threads = opts->threads;
        auto backend = make_backend(opts->backend, ckpt, o);
        std::printf("model: H %d, L %d, heads %d/%d x %d, I %d, V %d, rank %d, N %d, %s layers\n",
                    c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim,
                    c.intermediate_size, c.vocab_size, c.markov_rank, c.block_size,
                    to_string(c.layer_style));
        std::printf("plan: %s", backend_plan(*backend).c_str());
        run_scenario(*backend, s, [&](int round, const ScenarioRound& sr) {
          std::printf("round %d\n", round);
          for (const auto& d : sr.drafts) {
            std::printf("  request %d  anchor %lld @ %lld  T %.1f  draft:", d.request_id,
                        static_cast<long long>(d.anchor_token),
                        static_cast<long long>(d.anchor_position), d.temperature);
            for (int64_t t : d.tokens) std::printf(" %lld", static_cast<long long>(t));
            std::printf("\n");
          }
          const StageTimings& t = sr.timings;
          if (t.graph_ms >= 0)
            std::printf(
                "  timings ms: context %.3f  propose %.3f (the whole step, one CUDA graph)\n",
                t.context_ms, t.graph_ms);
          else
            std::printf(
                "  timings ms: context %.3f  embed %.3f  backbone %.3f  lm_head %.3f  "
                "markov %.3f  (propose %.3f)\n",
                t.context_ms, t.embed_ms, t.backbone_ms, t.lm_head_ms, t.markov_ms, t.total_ms());
        });
        const double s_total =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("done: %d requests x %d rounds on %s in %.2f s\n", opts->requests, opts->rounds,
                    backend->name().c_str(), s_total);
        return 0;
      }};
}

}  // namespace sparkdraft::cli
