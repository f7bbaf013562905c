// A draft checkpoint: config + safetensors weights, resolved to the tensors of
// contract.md section 1 and validated against the config (names, dtypes, shapes).
//
// Directory layout (DeepSpec / HF): config.json (ours or Qwen3DSparkModel) and
// model.safetensors, or shards listed in model.safetensors.index.json.
//
// Tensor names (no `model.` prefix; a prefixed checkpoint is accepted too):
//   embed_tokens.weight [V, H], lm_head.weight [V, H], fc.weight [H, taps*H_t],
//   hidden_norm.weight [H], norm.weight [H],
//   layers.i.input_layernorm.weight [H], layers.i.post_attention_layernorm.weight [H],
//   layers.i.self_attn.{q_proj [nH*hd, H], k_proj, v_proj [nKV*hd, H], o_proj [H, nH*hd]}.weight,
//   layers.i.self_attn.{q_norm, k_norm}.weight [hd]          (qk_norm)
//   layers.i.mlp.{gate_proj, up_proj [I, H], down_proj [H, I]}.weight,
//   markov_head.markov_w1.weight [V, r], markov_head.markov_w2.weight [V, r].
// A reduced draft vocabulary (draft_vocab_size Vd < V, contract.md section 11) has
//   lm_head.weight [Vd, H], markov_head.markov_w2.weight [Vd, r] and d2t [Vd] I64
//   (target id of draft id d = d + d2t[d]; t2d, training only, is ignored).
// The confidence head (enable_confidence_head) adds
//   confidence_head.proj.weight [1, H + r'], confidence_head.proj.bias [1]
//   (r' = r with confidence_head_with_markov, else 0).
// The gated / rnn Markov heads (markov_head_type, contract.md section 13) add
//   markov_head.gate_proj.{weight [r, H + r], bias [r]}        (gated)
//   markov_head.joint_proj.{weight [3r, 2r + H], bias [3r]}    (rnn)
// and a checkpoint holding them under a config that says vanilla is refused (an unused weight).
// Muse-style options add:
//   layers.i.self_attn.g_proj.weight [nH*hd, H]              (output_gate)
//   layers.i.self_attn.o_norm.weight [hd]                     (o_norm)
//   layers.i.pre_feedforward_layernorm.weight [H],
//   layers.i.post_feedforward_layernorm.weight [H]            (sandwich; there
//     post_attention_layernorm is the attention branch's post-norm)
//   layers.i.attn_residual.{alpha, beta} [H] F32,
//   layers.i.mlp_residual.{alpha, beta} [H] F32               (norm_preserving)
// Norm weights are absent under NormGain::none; everything else is BF16.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "sparkdraft/config.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/error.h"
#include "sparkdraft/safetensors.h"

namespace sparkdraft {

struct LayerWeights {
  const bf16* input_norm = nullptr;      // [H]
  const bf16* post_attn_norm = nullptr;  // [H] pre-norm: MLP input norm; sandwich: attn post-norm
  const bf16* pre_ffn_norm = nullptr;    // [H] sandwich only: MLP input norm
  const bf16* post_ffn_norm = nullptr;   // [H] sandwich only: MLP post-norm
  const bf16* q_proj = nullptr;          // [nH*hd, H]
  const bf16* k_proj = nullptr;          // [nKV*hd, H]
  const bf16* v_proj = nullptr;          // [nKV*hd, H]
  const bf16* g_proj = nullptr;          // [nH*hd, H] output gate
  const bf16* o_proj = nullptr;          // [H, nH*hd]
  const bf16* q_norm = nullptr;          // [hd]
  const bf16* k_norm = nullptr;          // [hd]
  const bf16* o_norm = nullptr;          // [hd]
  const bf16* gate_proj = nullptr;       // [I, H]
  const bf16* up_proj = nullptr;         // [I, H]
  const bf16* down_proj = nullptr;       // [H, I]
  const float* attn_alpha = nullptr;     // [H] norm-preserving residual
  const float* attn_beta = nullptr;
  const float* mlp_alpha = nullptr;
  const float* mlp_beta = nullptr;
};

struct DraftWeights {
  const bf16* embed = nullptr;         // [V, H]
  const bf16* lm_head = nullptr;       // [V, H]
  const bf16* fc = nullptr;            // [H, taps*H_t]
  const bf16* hidden_norm = nullptr;   // [H]
  const bf16* final_norm = nullptr;    // [H]
  const bf16* markov_w1 = nullptr;     // [V, r]
  const bf16* markov_w2 = nullptr;     // [V, r]
  const bf16* confidence_w = nullptr;  // [1, H + r'] (contract.md section 9)
  const bf16* confidence_b = nullptr;  // [1]
  // The gated / rnn Markov head's projection (contract.md section 13): gate_proj [r, H + r]
  // and [r] (gated), joint_proj [3r, 2r + H] and [3r] (rnn); null for vanilla.
  const bf16* markov_proj_w = nullptr;  // [P, K]
  const bf16* markov_proj_b = nullptr;  // [P]
  // A reduced draft vocabulary (contract.md section 11): the target id of each draft id,
  // d + d2t[d], checked at load (in [0, V), injective); null: the full vocabulary.
  const int32_t* draft_ids = nullptr;  // [Vd]
  int32_t draft_fill = -1;             // the lowest target id no draft id maps to (-1: none)
  std::vector<LayerWeights> layers;
};

struct LoadOptions {
  // Every tensor the draft uses is scanned for NaN and infinity at load (one
  // NaN in lm_head would make every draft token that id); a non-finite value
  // is refused with NonFiniteWeights naming the tensor and the first bad
  // index. Set this to load such a checkpoint anyway (e.g. to study it).
  bool allow_nonfinite = false;
  int threads = 0;  // threads of that scan (0 = hardware concurrency)
  // Leave the scan to the backend built on this checkpoint: the CPU backend scans
  // the host tensors when it is built, the CUDA backend scans its device copies
  // right after the upload (milliseconds on the GPU instead of a pass over the
  // host memory). Same refusal, same message. A checkpoint loaded this way and used
  // without a backend is not scanned (nonfinite_scan_pending() says so).
  bool defer_nonfinite_scan = false;
  // A tensor the draft knows but the config switches off (q_norm weights with
  // qk_norm false, g_proj with output_gate false, a layer past num_layers, ...)
  // is refused with CheckpointError naming the tensor and the switch: drafting
  // without it would not be the trained model. Set this to load it anyway.
  bool allow_unused_weights = false;
  // The target (verifier) model's directory, for a speculators checkpoint: it leaves
  // out the verifier's own weights (contract.md 14.3), embed_tokens.weight and, with
  // the full vocabulary, lm_head.weight. Those the draft's files lack are read from the
  // target's safetensors (model.safetensors or its index's shards, mapped, the "model."
  // prefix optional); a target whose config.json has tie_word_embeddings true serves
  // lm_head.weight from its embed_tokens.weight. Nothing else of the target is read, and
  // a tensor the draft holds is always the draft's. The shapes and dtypes are checked
  // like the draft's own; a path that is not a directory is refused even when the draft
  // needs nothing from it. Empty: none (a missing tensor is refused, naming this option).
  std::string target_dir;
};

// One resolved tensor of a loaded checkpoint (the data stays in the file mapping).
struct LoadedTensor {
  std::string name;  // as the draft names it (without a "model." prefix)
  std::string file;  // the safetensors file that holds it
  DType dtype = DType::bf16;
  std::vector<int64_t> shape;
  const uint8_t* data = nullptr;
  int64_t numel() const;
};

// The refusal of a tensor whose element `index` is NaN or infinite: names the
// tensor, its file, the value kind, the index and its coordinates.
std::string nonfinite_message(const LoadedTensor& t, int64_t index);

// A checkpoint refused because a tensor holds NaN or infinity.
class NonFiniteWeights : public CheckpointError {
 public:
  using CheckpointError::CheckpointError;
};

class Checkpoint {
 public:
  // Loads config.json (ours or HF) and the safetensors files of `dir`, resolves
  // and validates every tensor. Throws ConfigError / CheckpointError naming the
  // field, file or tensor at fault. Only regular files are read (a FIFO, a
  // directory or a symlink loop in place of a file is refused by name).
  static Checkpoint load(const std::string& dir, const LoadOptions& options = {});

  const ModelConfig& config() const { return config_; }
  const DraftWeights& weights() const { return weights_; }
  const std::string& dir() const { return dir_; }
  size_t total_bytes() const;  // bytes of the resolved tensors
  // Every tensor the draft uses, in expected_tensors() order.
  const std::vector<LoadedTensor>& tensors() const { return tensors_; }
  // Loaded with defer_nonfinite_scan and without allow_nonfinite: a backend must
  // scan (scan_nonfinite_on_host, or the CUDA backend's device scan).
  bool nonfinite_scan_pending() const { return scan_pending_; }
  // The load-time scan on host threads (0 = hardware concurrency); throws
  // NonFiniteWeights for the first tensor (in tensors() order) holding NaN or inf.
  void scan_nonfinite_on_host(int threads) const;

 private:
  std::string dir_;
  std::vector<LoadedTensor> tensors_;
  bool scan_pending_ = false;
  ModelConfig config_;
  DraftWeights weights_;
  std::shared_ptr<const std::vector<int32_t>> draft_ids_;  // weights_.draft_ids points here
  std::vector<std::shared_ptr<SafetensorsFile>> files_;
};

// The names of every tensor a config needs, with dtype and shape (what `load`
// validates against and what `make-checkpoint` writes).
struct TensorSpec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};
std::vector<TensorSpec> expected_tensors(const ModelConfig& config);

// The target ids of a reduced vocabulary's draft ids, t(d) = d + d2t[d] (contract.md
// section 11): CheckpointError naming `where`, the draft id and the value when a t(d)
// leaves [0, vocab) or two draft ids share one target id.
std::vector<int32_t> resolve_d2t(const int64_t* d2t, int draft_vocab, int vocab,
                                 const std::string& where);
// The lowest target id in [0, vocab) that no entry of `draft_ids` is, or -1.
int32_t draft_fill_id(const std::vector<int32_t>& draft_ids, int vocab);

// Named synthetic shapes for make-checkpoint.
//   tiny:     H 64, L 2, 4/2 heads, hd 16, I 160, V 1000, r 64, N 7, 3 taps of H_t 48
//   tiny-conf: tiny with the confidence head on [h ; w1[prev]] (contract.md section 9)
//   tiny-d2t: tiny with a reduced draft vocabulary of 612 of the 1000 ids (section 11;
//             a seeded increasing d2t map, as the speculators build it)
//   tiny-topk: tiny with the top-k Markov loop, markov_topk 16 (section 12)
//   tiny-topk-union: tiny-topk with the union form, markov_bias_topk 8 (section 12.5)
//   tiny-gated: tiny with the gated Markov head (section 13)
//   tiny-rnn: tiny with the rnn Markov head (section 13)
//   tiny-fillin: tiny in the fill-in layout (sample_from_anchor false, 1 + 7 query
//             slots, section 14); its Qwen3-style config.json is the speculators form
//   qwen3-8b: the published Qwen3-8B draft shape (H 4096, L 5, 32/8, hd 128, I 12288,
//             V 151936, r 256, N 7, taps [1,9,17,25,33] of 4096)
//   muse:     the open Muse Spark draft shape (H 8192, L 5, 128/16, hd 64, I 16384,
//             V 202048, r 512, N 7) with every Muse-style option
// `style` "qwen3" (pre-norm, DeepSpec) or "muse" (every Muse-style option) applies
// a style to any preset's shape; "" = the preset's own (muse for muse, else qwen3).
//   qwen3: w gain, eps 1e-6, pre_norm, plain bf16 residual, NeoX, theta 1e6,
//          QK-norm, no gate / o-norm / v-norm / context norm / transform.
//   muse:  1+w gain, eps 1e-6, sandwich, norm_preserving fp32 residual, GPT-J,
//          theta 5e5, QK-norm, output gate + o-norm, no v-norm, context layer
//          norm, logit multiplier 0.7 and soft cap 30, full attention.
// Muse preset taps: [13, 29, 45, 57, 61] of H_t 8192, mask id V-1 (~13.9 GB).
ModelConfig preset_config(const std::string& preset, const std::string& style = "");
std::vector<std::string> preset_names();

struct SyntheticOptions {
  uint64_t seed = 1;
  // Write config.json in the DeepSpec/HF form when the config allows it (the speculators
  // form for a fill-in draft, contract.md section 14), else ours.
  bool hf_config = true;
  std::function<void(size_t done, size_t total)> progress;
};
// Writes config.json + model.safetensors with seeded, non-zero, sanely scaled weights,
// atomically: both go to temporary names in `dir` first (model.safetensors.tmp,
// config.json.tmp), the weights are renamed into place, then config.json last (an
// old config.json is removed first), so `dir` never holds a config beside other
// weights. On failure the temporaries (and `dir`, when this call created it) are
// removed; IoError names the file and the reason.
void write_synthetic_checkpoint(const ModelConfig& config, const std::string& dir,
                                const SyntheticOptions& options);
// The names write_synthetic_checkpoint may create in its directory (temporaries
// first): what a caller removes when the write is interrupted.
std::vector<std::string> synthetic_checkpoint_files();

}  // namespace sparkdraft
