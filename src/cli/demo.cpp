// `sparkdraft demo`: the main job on the embedded default backend. Loads a
// checkpoint (or makes a tiny synthetic one), runs rounds of speculative decoding
// for a few requests (draft, then the real lossless verifier against a seeded
// stand-in for the target's logits), and prints the plan, per-request drafts,
// what the verifier accepted and emitted, per-stage timings, the acceptance per
// draft position, the mean accepted length, a legend and what to run next.
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

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
    LoadFlags load;
    float target_noise = 0.3f;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "demo",
      "Run a few rounds of speculative decoding for a few requests: draft N tokens, verify them "
      "with the lossless verifier (contract.md section 8), continue from what it accepted and "
      "emitted. Prints the plan, every request's drafts, the accepted count and emitted token, "
      "per-stage timings, the acceptance per draft position and the mean accepted length. There "
      "is no target model here: its logits are a seeded stand-in, the draft's own cache row plus "
      "seeded noise of standard deviation --target-noise (t_j = c_j + noise * n, the bonus "
      "position using row N-1), so the acceptance is that of a draft which agrees with its "
      "target as well as the noise lets it. Without --checkpoint a tiny synthetic checkpoint is "
      "made first.");
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
  add_bounded(sub, "--target-noise", opts->target_noise,
              "Standard deviation of the seeded noise added to the draft's logits to stand in "
              "for the target's (0: the target is the draft, every draft is accepted)",
              0.0f, 100.0f);
  add_load_flags(sub, opts->load);
  sub->add_option("--backend", opts->backend, backend_help())
      ->check(CLI::IsMember({"auto", "cpu", "cuda"}))
      ->capture_default_str();
  return {
      sub, [opts] {
        const auto t0 = std::chrono::steady_clock::now();
        require_backend_available(opts->backend);
        TinyCheckpoint tiny;
        const std::string dir = opts->checkpoint.empty() ? tiny.make("qwen3") : opts->checkpoint;
        LoadOptions lo = opts->load.options();
        lo.threads = opts->threads;
        lo.defer_nonfinite_scan = true;  // the backend scans (the GPU on the device, after upload)
        auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(dir, lo));
        const ModelConfig& c = ckpt->config();
        ScenarioOptions s = scenario_of(opts->requests, opts->rounds, opts->seed);
        s.real_verifier = true;
        s.target_noise = opts->target_noise;
        DraftOptions o = scenario_draft_options(c, s);
        o.tp = opts->tp;
        o.threads = opts->threads;
        auto backend = make_backend(opts->backend, ckpt, o);
        std::printf("model: H %d, L %d, heads %d/%d x %d, I %d, V %d, rank %d, N %d, %s layers\n",
                    c.hidden_size, c.num_layers, c.num_heads, c.num_kv_heads, c.head_dim,
                    c.intermediate_size, c.vocab_size, c.markov_rank, c.block_size,
                    to_string(c.layer_style));
        std::printf("plan: %s", backend_plan(*backend).c_str());
        std::printf(
            "legend: request = request id; anchor TOKEN @ POS = the last verified token and its "
            "position a; T = temperature (0.0: greedy); draft = the N = %d tokens drafted for "
            "positions a+1 .. a+N; accepted k = how many of them the verifier accepted; emitted = "
            "the token it drew at a+k+1 (the next round's anchor); timings = per-stage times of "
            "the draft step. Target logits: a seeded stand-in (the draft's logits + noise of "
            "standard deviation %g).\n",
            c.block_size, static_cast<double>(opts->target_noise));
        if (c.confidence_head)
          std::printf(
              "confidence = the confidence head's predicted survival of each draft token "
              "(contract.md section 9).\n");
        const int N = c.block_size;
        std::vector<long long> reached(N, 0), accepted(N, 0);
        long long verified_rows = 0, accepted_total = 0;
        run_scenario(*backend, s, [&](int round, const ScenarioRound& sr) {
          std::printf("round %d\n", round);
          for (const auto& d : sr.drafts) {
            std::printf("  request %d  anchor %lld @ %lld  T %.1f  draft:", d.request_id,
                        static_cast<long long>(d.anchor_token),
                        static_cast<long long>(d.anchor_position), d.temperature);
            for (int64_t t : d.tokens) std::printf(" %lld", static_cast<long long>(t));
            if (!d.confidences.empty()) {
              std::printf("  confidence:");
              for (float v : d.confidences) std::printf(" %.2f", static_cast<double>(v));
            }
            std::printf("  accepted %d  emitted %lld\n", d.accepted,
                        static_cast<long long>(d.emitted));
            for (int j = 0; j < N && j <= d.accepted; ++j) {
              ++reached[j];
              if (j < d.accepted) ++accepted[j];
            }
            ++verified_rows;
            accepted_total += d.accepted;
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
        std::printf("acceptance per draft position (accepted / verified):");
        for (int j = 0; j < N; ++j) std::printf(" %d: %lld/%lld", j + 1, accepted[j], reached[j]);
        const double mean =
            verified_rows ? static_cast<double>(accepted_total) / static_cast<double>(verified_rows)
                          : 0.0;
        std::printf(
            "\nmean accepted length: %.2f drafts per round (%.2f tokens per round with the "
            "emitted one)\n",
            mean, mean + 1.0);
        const double s_total =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("done: %d requests x %d rounds on %s in %.2f s\n", opts->requests, opts->rounds,
                    backend->name().c_str(), s_total);
        std::printf(
            "next: `sparkdraft check --backend cpu --tp 2` (TP 2 == TP 1 bit for bit, no GPU "
            "needed; `sparkdraft check` compares the CPU and the GPU), `sparkdraft bench step` "
            "(GPU timings against the floor), `python examples/python/spec_decode.py` (a round of "
            "speculative decoding from Python); README.md says more.\n");
        return 0;
      }};
}

}  // namespace sparkdraft::cli
