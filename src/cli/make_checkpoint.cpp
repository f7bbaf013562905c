// `sparkdraft make-checkpoint`: writes a synthetic checkpoint of a named shape
// (seeded, non-zero weights with the published tensor names) with progress.
#include <cstdio>
#include <filesystem>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/interrupt.h"
#include "cli/options.h"
#include "cli/progress.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cli {
namespace {

// --out must be a directory (or nothing yet) without a checkpoint in it,
// unless --force: a checkpoint is never overwritten silently.
void refuse_existing_output(const std::string& out, bool force) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::file_status st = fs::status(out, ec);
  if (st.type() == fs::file_type::not_found) {
    std::error_code e2;
    if (fs::is_symlink(fs::symlink_status(out, e2)))
      throw IoError("--out '" + out + "' is a dangling symbolic link (to '" +
                    fs::read_symlink(out, e2).string() +
                    "'); remove it or give a directory that exists or can be created");
    return;
  }
  if (ec) throw IoError("cannot use --out '" + out + "': " + ec.message());
  if (st.type() != fs::file_type::directory)
    throw IoError("--out '" + out + "' exists and is not a directory");
  if (force) return;
  for (const char* name : {"config.json", "model.safetensors", "model.safetensors.index.json"}) {
    std::error_code e2;
    if (fs::symlink_status(fs::path(out) / name, e2).type() != fs::file_type::not_found)
      throw IoError("--out '" + out + "' already holds a checkpoint (" + name +
                    "); pass --force to overwrite it");
  }
}

}  // namespace

Command add_make_checkpoint(CLI::App& app) {
  struct Opts {
    std::string preset = "tiny", style, out;
    uint64_t seed = 1;
    bool force = false;
    // Shape options for a draft of a given target (0 / empty: the preset's).
    int vocab = 0, target_hidden = 0, block_size = 0;
    std::string confidence_head;  // "", "markov", "plain" or "none"
    std::vector<int> target_layers;
  };
  auto opts = std::make_shared<Opts>();
  CLI::App* sub = app.add_subcommand(
      "make-checkpoint",
      "Write a synthetic draft checkpoint (config.json + model.safetensors) with seeded, "
      "non-zero, sanely scaled weights under the published DeepSpec tensor names.");
  std::string presets;
  for (const auto& p : preset_names()) presets += (presets.empty() ? "" : ", ") + p;
  sub->add_option(
         "--preset", opts->preset,
         "Shape: tiny (seconds, for tests), tiny-conf (tiny with the confidence head), tiny-d2t "
         "(tiny with a reduced draft vocabulary of 612 ids and its d2t map; the GPU runs it at TP "
         "1 on the eager Markov loop), tiny-topk (tiny with the top-k Markov loop, markov_topk 16; "
         "the GPU runs it at TP 1 on the eager Markov loop), tiny-topk-union (tiny-topk with the "
         "union form, markov_bias_topk 8: the bias's top 8 join the candidates), tiny-gated and "
         "tiny-rnn (tiny with DeepSpec's gated or rnn Markov head; the GPU runs them at TP 1 on "
         "the eager Markov loop), tiny-fillin (tiny in the fill-in layout, 1 + 7 query slots; its "
         "Qwen3-style config.json is the speculators form), "
         "qwen3-8b "
         "(the published Qwen3-8B draft, "
         "~4.7 GB) or muse (the open Muse Spark draft shape, ~13.9 GB with embeddings and lm_head)")
      ->check(CLI::IsMember(preset_names()))
      ->capture_default_str();
  sub->add_option("--style", opts->style,
                  "Layer style on that shape: qwen3 (DeepSpec pre-norm) or muse (sandwich, "
                  "norm-preserving fp32 residual, GPT-J RoPE, output gate, logit transform). "
                  "Default: the preset's own")
      ->check(CLI::IsMember({"qwen3", "muse"}));
  add_seed(sub, opts->seed, "Seed of the weights");
  sub->add_option("--out", opts->out,
                  "Output directory (created; refused if it already holds a checkpoint)")
      ->required()
      ->check(non_empty(""));
  sub->add_flag("--force", opts->force, "Overwrite a checkpoint already in --out");
  sub->add_option("--vocab", opts->vocab,
                  "Vocabulary size V (the target's; the mask token becomes V-1 when the "
                  "preset's is out of range). Default: the preset's")
      ->check(CLI::Range(1, 1 << 30));
  sub->add_option("--target-hidden", opts->target_hidden,
                  "Target hidden size H_t (fc reads taps x H_t). Default: the preset's")
      ->check(CLI::Range(1, 1 << 20));
  sub->add_option("--target-layers", opts->target_layers,
                  "Target layer ids whose hidden states feed the draft (the taps), e.g. "
                  "--target-layers 0 2 3 (-1: the embedding output). Default: the preset's")
      ->check(CLI::Range(-1, 1 << 20));
  sub->add_option("--block-size", opts->block_size,
                  "Draft tokens per request per round N. Default: the preset's")
      ->check(CLI::Range(1, 1 << 10));
  sub->add_option("--confidence-head", opts->confidence_head,
                  "The confidence head (contract.md section 9): markov (input [h ; w1[prev]]), "
                  "plain (input h) or none. Default: the preset's (tiny-conf: markov, else none)")
      ->check(CLI::IsMember({"markov", "plain", "none"}));
  return {sub, [opts] {
            ModelConfig config = preset_config(opts->preset, opts->style);
            if (opts->vocab > 0) {
              config.vocab_size = opts->vocab;
              if (config.mask_token_id >= opts->vocab) config.mask_token_id = opts->vocab - 1;
            }
            if (opts->target_hidden > 0) config.target_hidden_size = opts->target_hidden;
            if (!opts->target_layers.empty()) config.target_layer_ids = opts->target_layers;
            if (opts->block_size > 0) config.block_size = opts->block_size;
            if (!opts->confidence_head.empty()) {
              config.confidence_head = opts->confidence_head != "none";
              config.confidence_head_with_markov = opts->confidence_head == "markov";
            }
            config.validate();  // a bad shape is refused before anything is written
            refuse_existing_output(opts->out, opts->force);
            // Ctrl-C removes what this run wrote (never a file that was there before,
            // the directory only when this run made it), so that a retry works.
            namespace fs = std::filesystem;
            std::error_code ec;
            const bool existed = fs::exists(fs::symlink_status(opts->out, ec));
            std::vector<std::string> ours;
            for (const std::string& name : synthetic_checkpoint_files())
              if (!fs::exists(fs::symlink_status(fs::path(opts->out) / name, ec)) ||
                  (name.size() > 4 && name.compare(name.size() - 4, 4, ".tmp") == 0))
                ours.push_back(name);
            RemoveOnInterrupt on_interrupt(opts->out, ours, !existed);
            SyntheticOptions so;
            so.seed = opts->seed;
            so.progress = write_progress("make-checkpoint");
            write_synthetic_checkpoint(config, opts->out, so);
            std::printf("wrote %s checkpoint (%s style) to %s\n", opts->preset.c_str(),
                        to_string(config.layer_style), opts->out.c_str());
            return 0;
          }};
}

}  // namespace sparkdraft::cli
