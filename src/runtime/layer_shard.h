// The layers' tensor parallelism (contract.md section 6): which part of each layer TP
// rank r of t holds, and when a config cannot be split that way.
//
// At TP t rank r holds query heads [r*Hq/t, (r+1)*Hq/t) and KV heads
// [r*Hkv/t, (r+1)*Hkv/t) of the QKV projection (with the gate rows of its heads
// when the config has an output gate), the gate and up rows [r*I/t, (r+1)*I/t) of
// gate_up, the matching K columns of o_proj and down_proj (exactly its canonical K
// slices [S*r/t, S*(r+1)/t) of S = ops::canonical_k_slices(K)), its KV heads of
// the context chain's stacked K/V projection and of every layer's KV cache.
// Everything else (embedding, norms, fc, residual coefficients) is replicated; the
// vocabulary (lm_head, Markov w2) shards on its own (runtime/markov_loop.h).
#pragma once

#include <string>
#include <vector>

#include "sparkdraft/config.h"
#include "sparkdraft/core/bf16.h"

namespace sparkdraft {

struct LayerShard {
  int tp_rank = 0;
  int tp_size = 1;  // 1: the layers are replicated (one rank holds everything)

  int heads(const ModelConfig& c) const { return c.num_heads / tp_size; }
  int kv_heads(const ModelConfig& c) const { return c.num_kv_heads / tp_size; }
  int intermediate(const ModelConfig& c) const { return c.intermediate_size / tp_size; }
  // This rank's count of o_proj's / down_proj's canonical K slices.
  int o_slices(const ModelConfig& c) const;
  int down_slices(const ModelConfig& c) const;
};

// Why the layers of `c` cannot be sharded over `tp_size` ranks, every reason
// joined by "; " ("2 KV heads do not split over 8 ranks"); empty when they can
// (always at tp_size 1).
std::string layer_shard_refusal(const ModelConfig& c, int tp_size);

// The layer TP size a backend of `tp_size` ranks runs: tp_size where the layers
// shard, else 1 (replicated layers; the vocabulary still shards).
int layer_tp_size(const ModelConfig& c, int tp_size);

// One layer's KV cache in the TP 1 layout [slots, kv_heads, 2 * head_dim] from the
// ranks' shards (shards[r] = [slots, kv_heads / t, 2 * head_dim], rank r holding
// heads [r * kv_heads / t, (r + 1) * kv_heads / t)): per slot the ranks in order.
std::vector<bf16> gather_kv_shards(const ModelConfig& c, std::vector<std::vector<bf16>> shards);

}  // namespace sparkdraft
