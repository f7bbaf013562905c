// The floor of the draft step (contract.md section 7): the bytes one propose call must
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
//   kv_cache       the KV cache attention reads: rows x kv_heads x 2 x head_dim bf16
//                  per position read, summed over the layers; a layer reads the
//                  union of its queries' ranges, [0, ctx + N) (the block's own N
//                  positions included), or with a window w [max(0, ctx - w + 1), ctx + N)
//   markov_w2      w2 (V x markov_rank bf16) read once per step, N steps
//   base_logits    rows x N x V bf16 written by lm_head and read by the Markov loop
//   draft_logits   the draft-logits cache rows x N x V bf16 written
// Not counted (small next to these): the embedding rows, the w1 rows, the
// activations between ops, the tokens.
//
// At TP t (the floor of one GPU, contract.md section 7: its share of the weights and KV):
// where the layers shard (runtime/layer_shard.h) each GPU reads 1/t of the QKV,
// o_proj, gate_up and down weights and of the KV cache, and all of the norms and
// residual coefficients (replicated); where they do not, all of them. lm_head, w2 and
// the base logits are 1/t (the vocabulary shards); the draft-logits cache is written
// whole on every GPU (the vocab-parallel loop gathers it). The all-reduce traffic is
// not counted (`bench allreduce` reports it).
#pragma once

#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "sparkdraft/config.h"

namespace sparkdraft::bench {

// One part of the floor: its JSON name, its printed label, its bytes.
struct FloorPart {
  const char* name;
  const char* label;
  double bytes;
};

// The parts above, in that order.
struct StepFloorBytes {
  std::vector<FloorPart> parts;
  double total() const;
  // The bytes of the part called `name` (std::out_of_range when there is none).
  double at(std::string_view name) const;
};

// The floor bytes of one draft step over `rows` requests of `ctx` context positions,
// on one GPU of tp_size (a power of two dividing the vocabulary).
StepFloorBytes step_floor_bytes(const ModelConfig& config, int rows, int ctx, int tp_size = 1);

// The matrix products of one draft step, 2 FLOPs a multiply-add, on one GPU of tp_size
// (the same shares as the bytes: the layer matrices and attention where the layers shard,
// lm_head and the Markov bias over the vocabulary shards). T = rows x N query tokens:
//   projections  2 T (QKV (+ g) + o_proj + gate_up + down), every layer
//   lm_head      2 T V_d H
//   attention    2 x 2 head_dim per (query token, head, position it reads): Q.K and P.V;
//                a query at ctx + j reads [lo, ctx + j + 1) causal, [lo, ctx + N) not
//   markov       2 rows N r V_d: the bias h (rank r) . w2 of every step
// Paired with the bytes they move (step_roofline): projections with layer_weights, lm_head
// with lm_head, attention with kv_cache, markov with markov_w2.
struct FlopPart {
  const char* name;
  const char* bytes_part;  // the StepFloorBytes part moved by these products
  double flops;
};
struct StepFloorFlops {
  std::vector<FlopPart> parts;
  double total() const;
  double at(std::string_view name) const;  // std::out_of_range when there is none
};
StepFloorFlops step_floor_flops(const ModelConfig& config, int rows, int ctx, int tp_size = 1);

// The roofline floor: every bytes part over the copy bandwidth, or its products over the
// tensor-core peak where those take longer (max per pair, summed), in us. A lower bound of
// the step as tight as the two measured rates allow: a part cannot beat either.
struct StepRoofline {
  double bytes_us = 0;  // every part over the bandwidth (the floor of contract.md section 7)
  double flops_us = 0;  // every product over the peak
  double floor_us = 0;  // sum over the pairs of the larger
  std::vector<std::pair<std::string, double>> parts;  // bytes part -> its floor term, us
};
StepRoofline step_roofline(const StepFloorBytes& bytes, const StepFloorFlops& flops,
                           double bandwidth_gbs, double peak_tflops);

}  // namespace sparkdraft::bench
