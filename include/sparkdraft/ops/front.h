// The contract of the backbone's fronts (contract.md sections 1 and 5): what follows a
// projection before attention reads the paged cache, and what starts the backbone.
// Each is defined as a composition of the ops of norm.h, rope.h, kv.h and embed.h,
// in a fixed order; a fused kernel must give the same bits as that composition (the
// steps touch disjoint values, so the order only fixes what each step reads).
//
// qkv_front (QkvFrontParams), on rows of `token_stride` bf16 values per token:
//   1. q heads (heads > 0): head_rms_norm(q, q_norm) if qk_norm, then rope(q)
//   2. for each layer l in order:
//        head_rms_norm(k_l, k_norm_l) if qk_norm
//        head_rms_norm(v_l, no weight, NormGain::none) if v_norm
//        rope(k_l)
//        kv_insert(k_l, v_l, slots, cache_l)
// all with the same gain and eps, the rope table and style, and the positions. Every
// head is normed and rotated in place (padding tokens too); the insert skips a
// negative slot, as kv_insert does. Values outside the q, k and v heads (the output
// gate of the QKV buffer) are not touched. The query block runs it once per layer
// with q, the context chain once for every layer without q (heads == 0).
//
// embed_norm (EmbedNormParams), over `rows` tokens of H values:
//   embed(ids, table) -> x; widen(x) -> residual_f32 (when not null);
//   rms_norm(x, weight) -> y
// (the embedding, the fp32 residual's start and the first layer's input norm).
#pragma once

#include <cstdint>
#include <string>

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/ops/embed.h"
#include "sparkdraft/ops/kinds.h"
#include "sparkdraft/ops/kv.h"
#include "sparkdraft/ops/require.h"

namespace sparkdraft::ops {

// Most layers one qkv_front call takes (the context chain calls it per group).
inline constexpr int kMaxFrontLayers = 16;

// One layer's K and V heads (rows of the params' token_stride), its K-norm weight
// and its paged cache [slots, kv_heads, 2 * head_dim].
struct FrontLayer {
  bf16* k = nullptr;
  bf16* v = nullptr;
  const bf16* k_norm = nullptr;  // [head_dim]; null only with NormGain::none or !qk_norm
  bf16* cache = nullptr;
};

struct QkvFrontParams {
  int tokens = 0;
  int heads = 0;  // q heads; 0 = no q (the context chain)
  int kv_heads = 0;
  int head_dim = 0;
  int64_t token_stride = 0;      // distance between tokens, for q, k and v alike
  bf16* q = nullptr;             // head h of token t at q + t*token_stride + h*head_dim
  const bf16* q_norm = nullptr;  // [head_dim]
  int layers = 0;
  FrontLayer layer[kMaxFrontLayers];
  bool qk_norm = false;
  bool v_norm = false;
  NormGain gain = NormGain::weight;
  float eps = 1e-6f;
  const int64_t* positions = nullptr;  // [tokens], each in the rope table
  const float* rope_table = nullptr;   // rope.h layout
  RopeStyle rope_style = RopeStyle::neox;
  const int64_t* slots = nullptr;  // [tokens], -1 = write nothing

  // Layer l's KV insert (the composition's last op).
  KvInsertParams kv_insert(int l) const {
    return kv_insert_of(layer[l].k, token_stride, layer[l].v, token_stride, tokens, kv_heads,
                        head_dim, slots, layer[l].cache);
  }

  // The only validation of these fields (InvalidArgument naming the first bad one).
  void check() const {
    const char* op = "qkv_front";
    require(tokens >= 0, op, "tokens must be >= 0, got " + std::to_string(tokens));
    require(heads >= 0, op, "heads must be >= 0, got " + std::to_string(heads));
    require(kv_heads >= 1, op, "kv_heads must be >= 1, got " + std::to_string(kv_heads));
    require(head_dim >= 2 && head_dim % 2 == 0, op,
            "head_dim must be even and >= 2, got " + std::to_string(head_dim));
    require(layers >= 1 && layers <= kMaxFrontLayers, op,
            "layers must be in [1, " + std::to_string(kMaxFrontLayers) + "], got " +
                std::to_string(layers));
    const int64_t widest = static_cast<int64_t>(heads > kv_heads ? heads : kv_heads) * head_dim;
    require(token_stride >= widest, op,
            "token_stride " + std::to_string(token_stride) + " < heads * head_dim " +
                std::to_string(widest));
    require((heads > 0) == (q != nullptr), op, "q must be given exactly when heads > 0");
    if (qk_norm && heads > 0) require_gain_weight(q_norm, gain, op, "q_norm");
    for (int l = 0; l < layers; ++l) {
      const std::string at = "layer " + std::to_string(l) + ": ";
      require(layer[l].k && layer[l].v && layer[l].cache, op,
              at + "k, v and cache must not be null");
      if (qk_norm) require(gain == NormGain::none || layer[l].k_norm, op, at + "k_norm is null");
    }
    require_eps(eps, op);
    if (tokens > 0)
      require(positions && rope_table && slots, op,
              "positions, rope_table and slots must not be null");
  }
};

struct EmbedNormParams {
  int rows = 0;
  int hidden = 0;                 // H
  const int64_t* ids = nullptr;   // [rows], each < the table's rows
  const bf16* table = nullptr;    // [V, H]
  bf16* x = nullptr;              // [rows, H] the embedding
  float* residual_f32 = nullptr;  // [rows, H] its fp32 copy, or null (a bf16 residual)
  const bf16* weight = nullptr;   // [H] the first layer's input norm
  NormGain gain = NormGain::weight;
  float eps = 1e-6f;
  bf16* y = nullptr;  // [rows, H] the normed input of layer 0

  // The composition's ops (the norm: ops::rms_norm_rows of x into y).
  EmbedParams embed() const { return embed_of(ids, rows, table, hidden, x); }
  WidenParams widen() const {
    return widen_of(x, static_cast<int64_t>(rows) * hidden, residual_f32);
  }

  // The only validation of these fields (InvalidArgument naming the first bad one).
  void check() const {
    const char* op = "embed_norm";
    require(rows >= 0, op, "rows must be >= 0, got " + std::to_string(rows));
    require(hidden >= 1, op, "hidden must be >= 1, got " + std::to_string(hidden));
    require_gain_weight(weight, gain, op, "weight");
    require_eps(eps, op);
    if (rows > 0) require(ids && table && x && y, op, "ids, table, x and y must not be null");
  }
};

}  // namespace sparkdraft::ops
