// Inputs of one verify call held in vectors, the op parameters pointing into
// them, and drafts drawn by the CPU backend's own Markov sampler
// (runtime/markov_loop.h) from given base logits.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/markov_rows.h"
#include "runtime/markov_loop.h"
#include "sparkdraft/cpu/verify.h"
#include "sparkdraft/ops/markov.h"

namespace sparkdraft::test {

struct VerifyCase {
  int R = 0, N = 0, V = 0, slots = 0;
  std::vector<int64_t> tokens, anchors, seeds, cache_slots;
  std::vector<float> temps, top_p;
  std::vector<int32_t> top_k;
  std::vector<int32_t> lengths;   // [R] n_r, or empty (N for every row)
  std::vector<bf16> cache;        // [slots, N, V]
  std::vector<bf16> target_bf16;  // [R, N + 1, V]
  std::vector<float> target_f32;
  LogitsDType dtype = LogitsDType::bf16;
  VerifyMethod method = VerifyMethod::standard;
  int64_t accept_salt = kVerifyAcceptSalt;
  std::vector<int32_t> num_accepted;
  std::vector<int64_t> out;  // [R, N + 1]

  VerifyCase(int rows, int n, int vocab)
      : R(rows),
        N(n),
        V(vocab),
        slots(rows),
        tokens(static_cast<size_t>(rows) * n),
        anchors(rows, 100),
        seeds(rows),
        cache_slots(rows),
        temps(rows, 1.0f),
        top_p(rows, 1.0f),
        top_k(rows, 0),
        cache(static_cast<size_t>(rows) * n * vocab),
        target_bf16(static_cast<size_t>(rows) * (n + 1) * vocab),
        target_f32(static_cast<size_t>(rows) * (n + 1) * vocab) {
    for (int r = 0; r < rows; ++r) {
      seeds[r] = 1000 + r;
      cache_slots[r] = r;
    }
  }

  float& tf32(int r, int j, int v) {
    return target_f32[(static_cast<size_t>(r) * (N + 1) + j) * V + v];
  }
  bf16& tbf16(int r, int j, int v) {
    return target_bf16[(static_cast<size_t>(r) * (N + 1) + j) * V + v];
  }
  // Sets a target logit in both dtypes (the bf16 copy rounded).
  void set_target(int r, int j, int v, float x) {
    tf32(r, j, v) = x;
    tbf16(r, j, v) = to_bf16(x);
  }
  float target(int r, int j, int v) const {
    const size_t i = (static_cast<size_t>(r) * (N + 1) + j) * V + v;
    return dtype == LogitsDType::f32 ? target_f32[i] : to_f32(target_bf16[i]);
  }
  bf16& c(int64_t slot, int j, int v) { return cache[(static_cast<size_t>(slot) * N + j) * V + v]; }

  ops::VerifyParams params() {
    ops::VerifyParams p;
    p.rows = R;
    p.n = N;
    p.vocab = V;
    p.cache_rows = slots;
    p.draft_tokens = tokens.data();
    p.anchor_positions = anchors.data();
    p.seeds = seeds.data();
    p.temperatures = temps.data();
    p.top_k = top_k.data();
    p.top_p = top_p.data();
    p.lengths = lengths.empty() ? nullptr : lengths.data();
    p.cache_slots = cache_slots.data();
    p.draft_logits = cache.data();
    p.target_logits = dtype == LogitsDType::f32 ? static_cast<const void*>(target_f32.data())
                                                : static_cast<const void*>(target_bf16.data());
    p.target_dtype = dtype;
    p.method = method;
    p.accept_salt = accept_salt;
    p.num_accepted = num_accepted.data();
    p.tokens = out.data();
    return p;
  }

  // Runs the CPU reference; outputs start at sentinels (-7) so that untouched
  // padding rows show.
  void run(int64_t slice = 0) {
    num_accepted.assign(R, -7);
    out.assign(static_cast<size_t>(R) * (N + 1), -7);
    cpu::verify(params(), slice);
  }
  int64_t token(int r, int i) const { return out[static_cast<size_t>(r) * (N + 1) + i]; }

  // Draws the drafts of every row with the CPU backend's Markov loop from base
  // logits [R, N, V] (w2 = 0, so the step logits are the base logits): tokens and
  // the cache are exactly what propose writes.
  void draft_with_markov(const std::vector<bf16>& base) {
    ModelConfig mc;
    mc.vocab_size = V;
    mc.block_size = N;
    mc.markov_rank = 16;
    std::vector<bf16> w1(static_cast<size_t>(V) * mc.markov_rank, to_bf16(0.5f));
    std::vector<bf16> w2(static_cast<size_t>(V) * mc.markov_rank, to_bf16(0.0f));
    DraftWeights w;
    w.markov_w1 = w1.data();
    w.markov_w2 = w2.data();
    const ops::LogitTransform transform = ops::LogitTransform::from_config(mc);
    test::HostMarkovRows rows;
    rows.num_rows = R;
    for (int r = 0; r < R; ++r) {
      rows.anchor_tokens.push_back(r % V);
      rows.anchor_positions.push_back(anchors[r]);
      rows.seeds.push_back(seeds[r]);
      rows.cache_slots.push_back(cache_slots[r]);
      rows.temperatures.push_back(temps[r]);
    }
    const ops::MarkovRows view = rows.view();
    MarkovInputs in{&mc, &w, &transform, &view, slots, 1};
    ProposeOutputs po{tokens.data(), cache.data()};
    markov_loop_from_base(in, 1, base.data(), po);
  }
};

// The law p (or q) of section 8 in long double, written independently of the
// reference: softmax of f32(l) / T over the ids not masked (mask[v] == false),
// with the degenerate rows (a NaN, +inf or all -inf) a point mass at the first id.
inline std::vector<double> softmax_law(const std::vector<float>& logits, float T,
                                       const std::vector<bool>& masked = {}) {
  const size_t V = logits.size();
  std::vector<double> p(V, 0.0);
  std::vector<float> s(V);
  for (size_t v = 0; v < V; ++v) s[v] = (!masked.empty() && masked[v]) ? -INFINITY : logits[v] / T;
  size_t first = 0;
  for (size_t v = 1; v < V; ++v)
    if (better(s[v], static_cast<int64_t>(v), s[first], static_cast<int64_t>(first))) first = v;
  if (std::isnan(s[first]) || std::isinf(s[first])) {
    p[first] = 1.0;
    return p;
  }
  long double z = 0;
  for (size_t v = 0; v < V; ++v) z += std::exp(static_cast<long double>(s[v]) - s[first]);
  for (size_t v = 0; v < V; ++v)
    p[v] = static_cast<double>(std::exp(static_cast<long double>(s[v]) - s[first]) / z);
  return p;
}

}  // namespace sparkdraft::test
