// What the tensor-parallel tests of both backends share: a model shape whose layers
// shard at TP 1, 2, 4 and 8, its seeded synthetic checkpoint, and o_proj-like inputs
// whose canonical K slices cancel so that another order of the slice tree shows.
#pragma once

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "common/files.h"
#include "common/random.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/config.h"
#include "sparkdraft/core/bf16.h"

namespace sparkdraft::test {

// A shape that shards at TP 1, 2, 4 and 8: q = 8 * 16 = 128 and I = 256 are
// multiples of 128 (8 canonical slices each), heads and KV heads split over 8.
inline ModelConfig shardable(const std::string& style, int heads = 8, int kv_heads = 8) {
  ModelConfig c = preset_config("tiny", style);  // 2 layers, the style's options
  c.hidden_size = 128;
  c.num_heads = heads;
  c.num_kv_heads = kv_heads;
  c.head_dim = 16;
  c.intermediate_size = 256;
  c.vocab_size = 512;
  c.mask_token_id = 511;
  c.markov_rank = 32;
  c.block_size = 5;
  c.validate();
  return c;
}

// The seeded synthetic checkpoint of `c`, written to `dir` and loaded.
inline std::shared_ptr<const Checkpoint> checkpoint_of(const ModelConfig& c, const TempDir& dir,
                                                       uint64_t seed) {
  SyntheticOptions so;
  so.seed = seed;
  write_synthetic_checkpoint(c, dir.path(), so);
  return std::make_shared<const Checkpoint>(Checkpoint::load(dir.path()));
}

// o_proj-like inputs x [M, K], w [N, K] whose 8 canonical slices cancel: slice 2 is
// slice 0 negated (x the same, w negated) and slice 6 slice 4's, slices 0 and 4
// scaled by 2^20, so that the large partials cancel and the order in which the small
// ones are added shows in the bf16 result.
struct CancellingSlices {
  int M, N, K;
  std::vector<bf16> x, w;
  CancellingSlices(Gen& gen, int rows, int n = 48, int k = 8 * 32) : M(rows), N(n), K(k) {
    x = gen.normal_bf16s(static_cast<size_t>(M) * K, 1.0f);
    w = gen.normal_bf16s(static_cast<size_t>(N) * K, 1.0f);
    const int len = K / 8;
    for (int m = 0; m < M; ++m)
      for (int i = 0; i < len; ++i) {
        x[m * K + 2 * len + i] = x[m * K + i];
        x[m * K + 6 * len + i] = x[m * K + 4 * len + i];
      }
    for (int r = 0; r < N; ++r)
      for (int i = 0; i < len; ++i) {
        bf16& w0 = w[r * K + i];
        bf16& w4 = w[r * K + 4 * len + i];
        w0 = to_bf16(std::ldexp(to_f32(w0), 20));
        w4 = to_bf16(std::ldexp(to_f32(w4), 20));
        w[r * K + 2 * len + i] = to_bf16(-to_f32(w0));
        w[r * K + 6 * len + i] = to_bf16(-to_f32(w4));
      }
  }
};

}  // namespace sparkdraft::test
