// The floor bytes of the draft step written out independently of
// bench/step/step_floor.cpp: the weights from the checkpoint's own tensor list
// (expected_tensors: every tensor of a layer, plus the final norm), the rest from
// the shapes; the tests compare step_floor_bytes and bench step's result with it.
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "sparkdraft/checkpoint.h"

namespace sparkdraft::test {

// Bytes by part name (the names of bench::StepFloorBytes).
using FloorParts = std::map<std::string, double>;

inline double total(const FloorParts& f) {
  double sum = 0;
  for (const auto& [name, bytes] : f) sum += bytes;
  return sum;
}

inline FloorParts floor_of(const ModelConfig& c, int rows, int ctx) {
  FloorParts f{{"layer_weights", 0.0}};
  for (const TensorSpec& t : expected_tensors(c)) {
    double bytes = static_cast<double>(dtype_size(t.dtype));
    for (int64_t d : t.shape) bytes *= static_cast<double>(d);
    if (t.name.rfind("layers.", 0) == 0 || t.name == "norm.weight") f["layer_weights"] += bytes;
    if (t.name == "lm_head.weight") f["lm_head"] = bytes;
    if (t.name == "markov_head.markov_w2.weight") f["markov_w2"] = bytes * c.block_size;
  }
  // Positions read per layer: every position some block query (at ctx + j, kv_len
  // ctx + N) reads, counted one by one.
  const int64_t kv_len = static_cast<int64_t>(ctx) + c.block_size;
  double positions = 0;
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerAttention a = c.attention_of(l);
    for (int64_t p = 0; p < kv_len; ++p) {
      bool read = false;
      for (int j = 0; j < c.block_size && !read; ++j) {
        const int64_t pos = ctx + j;
        const int64_t hi = a.causal ? pos + 1 : kv_len;
        read = p < hi && (a.window == 0 || p > pos - a.window);
      }
      positions += read ? 1 : 0;
    }
  }
  const double per_position = 2.0 * c.num_kv_heads * 2 * c.head_dim;
  f["kv_cache"] = per_position * rows * positions;
  // The base logits span the draft vocabulary (lm_head's rows), the cache the target's.
  const double base = 2.0 * rows * c.block_size * c.draft_vocab();
  f["base_logits"] = 2 * base;  // lm_head writes them, the Markov loop reads them
  f["draft_logits"] = 2.0 * rows * c.block_size * c.vocab_size;
  return f;
}

// The step's matrix products (2 FLOPs a multiply-add) by part name (those of
// bench::StepFloorFlops): every 2-D layer tensor and lm_head against the rows x N query
// tokens, w2 against the rows at every step, and attention counted position by position
// for every query (Q.K and P.V, head_dim each).
inline FloorParts flops_of(const ModelConfig& c, int rows, int ctx) {
  const double tokens = static_cast<double>(rows) * c.block_size;
  FloorParts f{{"projections", 0.0}};
  for (const TensorSpec& t : expected_tensors(c)) {
    double numel = 1;
    for (int64_t d : t.shape) numel *= static_cast<double>(d);
    if (t.name.rfind("layers.", 0) == 0 && t.shape.size() == 2)
      f["projections"] += 2 * tokens * numel;
    if (t.name == "lm_head.weight") f["lm_head"] = 2 * tokens * numel;
    if (t.name == "markov_head.markov_w2.weight") f["markov"] = 2.0 * rows * c.block_size * numel;
  }
  const int64_t kv_len = static_cast<int64_t>(ctx) + c.block_size;
  double reads = 0;  // (layer, query, position) triples read
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerAttention a = c.attention_of(l);
    for (int j = 0; j < c.block_size; ++j) {
      const int64_t pos = ctx + j;
      for (int64_t p = 0; p < kv_len; ++p)
        reads += p < (a.causal ? pos + 1 : kv_len) && (a.window == 0 || p > pos - a.window);
    }
  }
  f["attention"] = 2.0 * 2 * c.head_dim * c.num_heads * rows * reads;
  return f;
}

}  // namespace sparkdraft::test
