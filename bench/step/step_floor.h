// The floor of the draft step (SPEC section 7): the bytes one propose call must
// move at least, part by part, from the model config alone (host code, no GPU).
// `sparkdraft bench step` divides them by the copy bandwidth it measures.
//
// Counted once per step (each is read or written at least once; nothing here
// assumes a cache serves any of it):
//   layer_weights  every backbone layer's weights: the QKV projection (q, k, v and
//                  the output gate's g when the config has one), o_proj, gate_up,
//                  down, its norms (input, post-attention, the sandwich's
//                  pre/post-feedforward, q/k norm, o-norm) and the fp32 residual
//                  coefficients of the norm-preserving residual; plus the final norm
//   lm_head        V x H bf16
//   kv_cache       the KV cache attention reads: rows x (ctx + N) positions x L x
//                  kv_heads x 2 x head_dim bf16 (the block's own N positions included)
//   markov_w2      w2 (V x markov_rank bf16) read once per step, N steps
//   base_logits    rows x N x V bf16 written by lm_head and read by the Markov loop
//   draft_logits   the draft-logits cache rows x N x V bf16 written
// Not counted (small next to these): the embedding rows, the w1 rows, the
// activations between ops, the tokens.
#pragma once

#include "sparkdraft/config.h"

namespace sparkdraft::bench {

struct StepFloorBytes {
  double layer_weights = 0;
  double lm_head = 0;
  double kv_cache = 0;
  double markov_w2 = 0;
  double base_logits = 0;
  double draft_logits = 0;
  double total() const {
    return layer_weights + lm_head + kv_cache + markov_w2 + base_logits + draft_logits;
  }
};

// The floor bytes of one draft step over `rows` requests of `ctx` context positions.
StepFloorBytes step_floor_bytes(const ModelConfig& config, int rows, int ctx);

}  // namespace sparkdraft::bench
