// The model config of contract.md section 1: one struct for every known DSpark draft.
//
// Read from our own JSON (`to_json`/`from_json` round-trip) or imported from a
// DeepSpec / HF `Qwen3DSparkModel` config.json (`import_hf_config`), or from a
// speculators-format config.json (`speculators_model_type: "dspark"`,
// `import_speculators_config`, contract.md section 14). Anything out of scope
// (DeepSeek-V4's MLA draft, ...) is refused with a ConfigError that says why. A reduced draft
// vocabulary (`draft_vocab_size` < vocab_size, contract.md section 11) loads in
// both forms; draft_vocab_size equal to vocab_size is the full vocabulary.
//
// The Markov head's type (contract.md section 13): `markov_head_type` "vanilla" (the
// default), "gated" or "rnn" in both JSON forms; gated and rnn need a Markov head
// (markov_rank > 0) and are refused with markov_topk and with a reduced draft vocabulary.
//
// Our JSON: one flat object, every field of ModelConfig under its own name,
// enums as strings ("pre_norm", "sandwich", "one_plus_weight", "f32", "gptj"),
// the optional transform fields as a number or null, "layer_attention" as one
// {"window": int, "causal": bool} object per layer, plus "format":
// "sparkdraft" and "format_version": 1 (how load_config_file tells it from an
// HF config.json). Unknown or missing keys are refused ("draft_vocab_size" and the
// confidence head's flags may be absent). Every config that is
// not pure Qwen3 style (any Muse-style option) is written in this form; the HF
// form carries no sparkdraft extension fields beyond `target_hidden_size`
// (when H_t != H) and vLLM's `is_neox_style` (when false).
//
// HF import: Qwen3 defaults (pre-norm, plain bf16 residual, w gain, QK-norm,
// NeoX unless `is_neox_style` is false). Absent fields default as in HF's
// Qwen3Config (num_key_value_heads = heads, head_dim = hidden / heads,
// rms_norm_eps 1e-6, max_position_embeddings 32768, markov_head_type
// "vanilla", sample_from_anchor true, target_hidden_size = hidden_size); the
// rope theta, block_size, target_layer_ids, mask_token_id and markov_rank are
// required. layer_types (absent: every layer full_attention) lists
// "full_attention" or "sliding_attention" per layer, mixed allowed; sliding layers
// take `sliding_window` (then required), full ones no window. Causality per layer
// as vLLM resolves it: `is_causal` if set, else `dflash_config.causal` if set, else
// causal exactly for the sliding_attention layers.
// markov_rank 0 means no Markov head: no markov tensors are expected and the
// step logits would be the base logits (a backend without that path refuses it).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sparkdraft/ops/kinds.h"

namespace sparkdraft {

// pre_norm: Qwen3 (input norm -> branch -> residual add).
// sandwich: Muse/Gemma (input norm -> branch -> post-norm -> residual -> next pre-norm).
enum class LayerStyle { pre_norm, sandwich };
// plain: s + b. norm_preserving: alpha * s + beta * b with fp32 [H] coefficients.
enum class ResidualKind { plain, norm_preserving };
// The Markov head (contract.md section 13): vanilla e = w1[prev]; gated u = sigmoid(gate_proj([h
// ; e])) * e; rnn u = tanh(out) of joint_proj([s ; e ; h]) with the state s. W2 reads e or u.
enum class MarkovHeadType { vanilla, gated, rnn };

// One layer's attention (ops/attention.h): window 0 = full; causal: a query at
// position pos reads positions < pos + 1 only.
struct LayerAttention {
  int window = 0;
  bool causal = false;
  bool operator==(const LayerAttention&) const = default;
};

struct ModelConfig {
  std::string architecture = "sparkdraft";  // informational
  // Shapes.
  int hidden_size = 0;        // H
  int num_layers = 0;         // L
  int num_heads = 0;          // query heads
  int num_kv_heads = 0;       // KV heads (GQA)
  int head_dim = 0;           // hd
  int intermediate_size = 0;  // I (SwiGLU)
  int vocab_size = 0;         // V: the target's ids (embedding, Markov w1, the cache)
  // Vd of a reduced draft vocabulary (contract.md section 11: lm_head and Markov w2
  // rows, a `d2t` map to target ids); 0 = the full vocabulary (Vd = V, no map).
  int draft_vocab_size = 0;
  int markov_rank = 0;                // r (0 = no Markov head)
  int block_size = 0;                 // N draft tokens per request per round (see query_slots)
  int target_hidden_size = 0;         // H_t of the target model
  std::vector<int> target_layer_ids;  // taps; fc input width = taps * H_t
  int64_t mask_token_id = 0;
  int max_position_embeddings = 0;
  // Norms.
  NormGain norm_gain = NormGain::weight;
  float rms_norm_eps = 1e-6f;
  // Layers.
  LayerStyle layer_style = LayerStyle::pre_norm;
  ResidualKind residual_kind = ResidualKind::plain;
  StreamDType stream_dtype = StreamDType::bf16;
  bool context_layer_norm = false;  // apply each layer's input norm to the context
  // Attention.
  RopeStyle rope_style = RopeStyle::neox;
  double rope_theta = 1e6;
  bool qk_norm = true;
  bool v_norm = false;       // per-head RMSNorm on V without a weight
  bool output_gate = false;  // o = o * sigmoid(g), g from g_proj
  bool o_norm = false;       // per-head RMSNorm on the attention output (before the gate)
  // The o-norm's gain: true = norm_gain with the layer's self_attn.o_norm.weight;
  // false = no weight (x * r, NormGain::none; the open Muse Spark draft).
  bool o_norm_weight = true;
  // Attention of each layer: empty = every layer full and non-causal, else one entry
  // per layer.
  std::vector<LayerAttention> layer_attention;
  // Output-logit transform of the step logits (contract.md section 3).
  std::optional<float> logit_multiplier;
  std::optional<float> logit_soft_cap;
  // Layout: true = DSpark (N queries give N drafts); false = the fill-in (DFlash)
  // layout, contract.md section 14 (1 + N queries, slots 1 .. N drafted).
  bool sample_from_anchor = true;
  // The confidence head (contract.md section 9): c = sigmoid(w . [h ; w1[prev]] + b)
  // per drafted position. `enable_confidence_head` / `confidence_head_with_markov`
  // in the JSON forms; with_markov needs the head and a Markov rank > 0.
  bool confidence_head = false;
  bool confidence_head_with_markov = false;
  // Per-position temperature calibration of the confidences (STS, contract.md 9.1):
  // empty = none; else block_size fp32 values, each finite and > 0 (step j's value is
  // sigmoid(z / T_j)). `confidence_temperatures` in both JSON forms; needs the head.
  std::vector<float> confidence_temperatures;
  // The top-k Markov variant (contract.md section 12): at each step only the top
  // `markov_topk` ids of the position's base logits are candidates, the rest -inf.
  // 0 = off (the dense loop); 1 <= k <= V. `markov_topk` in both JSON forms (vLLM's
  // name); a reduced draft vocabulary with it is refused by name.
  int markov_topk = 0;
  // The union form (section 12.5): the bias's own top `markov_bias_topk` ids join each
  // step's candidates. 0 = off; 1 <= m <= V, only with markov_topk > 0.
  int markov_bias_topk = 0;
  // The Markov head's type (contract.md section 13); `markov_head_type` in both JSON forms.
  MarkovHeadType markov_head_type = MarkovHeadType::vanilla;

  int taps() const { return static_cast<int>(target_layer_ids.size()); }
  // Query slots per request (contract.md section 14): N, or 1 + N in the fill-in layout.
  // Our JSON's block_size is always N; the speculators form's counts the query slots.
  int query_slots() const { return block_size + (sample_from_anchor ? 0 : 1); }
  // The first drafted slot of a request's query block: 0, or 1 in the fill-in layout.
  int first_drafted_slot() const { return sample_from_anchor ? 0 : 1; }
  // Whether the draft samples in a reduced vocabulary mapped by d2t (section 11).
  bool reduced_vocab() const { return draft_vocab_size > 0; }
  // Whether the Markov loop runs the top-k variant (section 12).
  bool topk_markov() const { return markov_topk > 0; }
  // Whether the Markov head has a projection (gated or rnn, contract.md section 13).
  bool markov_head_proj() const { return markov_head_type != MarkovHeadType::vanilla; }
  // The head projection's output rows P (r gated, 3r rnn) and input width K (H + r gated,
  // 2r + H rnn); 0 for vanilla.
  int markov_proj_rows() const {
    return markov_head_type == MarkovHeadType::gated ? markov_rank
           : markov_head_type == MarkovHeadType::rnn ? 3 * markov_rank
                                                     : 0;
  }
  int markov_proj_inputs() const {
    return markov_head_type == MarkovHeadType::gated ? hidden_size + markov_rank
           : markov_head_type == MarkovHeadType::rnn ? 2 * markov_rank + hidden_size
                                                     : 0;
  }
  // Vd: the rows of lm_head and Markov w2, the ids the draft samples over.
  int draft_vocab() const { return reduced_vocab() ? draft_vocab_size : vocab_size; }
  // The confidence head's input width: H + r with the Markov embedding, else H.
  int confidence_inputs() const {
    return hidden_size + (confidence_head_with_markov ? markov_rank : 0);
  }
  int q_size() const { return num_heads * head_dim; }
  int kv_size() const { return num_kv_heads * head_dim; }
  LayerAttention attention_of(int layer) const {
    return layer_attention.empty() ? LayerAttention{} : layer_attention[static_cast<size_t>(layer)];
  }
  // The gain the o-norm applies (NormGain::none without a weight).
  NormGain o_norm_gain() const { return o_norm_weight ? norm_gain : NormGain::none; }
  bool has_logit_transform() const {
    return logit_multiplier.has_value() || logit_soft_cap.has_value();
  }

  // Throws ConfigError naming the first field that is out of range or unsupported.
  void validate() const;
};

// Our own JSON form (every option explicit).
nlohmann::json config_to_json(const ModelConfig& config);
ModelConfig config_from_json(const nlohmann::json& j);
ModelConfig load_config_file(const std::string& path);  // ours or HF, detected
void save_config_file(const ModelConfig& config, const std::string& path);

// A DeepSpec / HF `Qwen3DSparkModel` config.json, or a speculators-format one
// (`speculators_model_type` present: import_speculators_config); DeepSeek-V4 forms
// are refused with a clear message.
ModelConfig import_hf_config(const nlohmann::json& j);
// A speculators-format config.json (`speculators_model_type: "dspark"`, architecture
// `DSparkDraftModel`; contract.md section 14 gives the mapping and its refusals).
ModelConfig import_speculators_config(const nlohmann::json& j);

const char* to_string(LayerStyle s);
const char* to_string(ResidualKind k);
const char* to_string(MarkovHeadType t);

}  // namespace sparkdraft
