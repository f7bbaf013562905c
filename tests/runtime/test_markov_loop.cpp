// The CPU Markov loop (runtime/markov_loop.h) from given base logits: equal to
// a naive loop written from contract.md sections 1 and 4, and bit for bit the same
// tokens and cache at TP 1, 2, 4 and 8, with NaN rows, exact ties and padding rows.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "common/bits.h"
#include "common/markov_rows.h"
#include "common/markov_tp_sweep.h"
#include "common/random.h"
#include "runtime/markov_loop.h"
#include "sparkdraft/core/philox.h"
#include "sparkdraft/core/sampling.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

struct LoopSetup {
  ModelConfig c;
  std::vector<bf16> w1, w2, base;
  DraftWeights w;
  ops::LogitTransform transform;
  test::HostMarkovRows rows;
};

LoopSetup make_setup(uint64_t seed, int R, int N, int V, int markov_rank, bool cap) {
  LoopSetup s;
  s.c.vocab_size = V;
  s.c.markov_rank = markov_rank;
  s.c.block_size = N;
  if (cap) {
    s.c.logit_multiplier = 0.75f;
    s.c.logit_soft_cap = 20.0f;
  }
  s.w1 = test::Gen(seed).normal_bf16s(static_cast<size_t>(V) * markov_rank, 0.3f);
  s.w2 = test::Gen(seed + 1).normal_bf16s(static_cast<size_t>(V) * markov_rank, 0.3f);
  s.base = test::Gen(seed + 2).normal_bf16s(static_cast<size_t>(R) * N * V, 2.0f);
  // Row 1: a NaN base logit at a late id of step 0 and several at step 2.
  // Row 2: exact ties: two ids with identical base logits and identical w2 rows.
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (R > 1) {
    s.base[(1 * N + 0) * V + V - 3] = to_bf16(nan);
    if (N > 2) {
      s.base[(1 * N + 2) * V + 17] = to_bf16(nan);
      s.base[(1 * N + 2) * V + 5] = to_bf16(nan);
    }
  }
  if (R > 2) {
    for (int j = 0; j < N; ++j) {
      bf16* row = &s.base[(2 * N + j) * V];
      for (int v = 0; v < V; ++v) row[v] = to_bf16(-30.0f);
      row[V / 2 + 3] = row[V / 3] = to_bf16(40.0f);
    }
    std::memcpy(&s.w2[static_cast<size_t>(V / 2 + 3) * markov_rank],
                &s.w2[static_cast<size_t>(V / 3) * markov_rank], markov_rank * sizeof(bf16));
  }
  s.w.markov_w1 = s.w1.data();
  s.w.markov_w2 = s.w2.data();
  s.transform = ops::LogitTransform::from_config(s.c);
  s.rows.num_rows = R;
  for (int r = 0; r < R; ++r) {
    s.rows.anchor_tokens.push_back((r * 37 + 11) % V);
    s.rows.anchor_positions.push_back(100 + 13 * r);
    s.rows.seeds.push_back(static_cast<int64_t>(seed * 1000 + r) - 500);
    s.rows.temperatures.push_back(r == 2 || r % 3 == 0 ? 0.0f : (r % 3 == 1 ? 0.7f : 1.0f));
    s.rows.cache_slots.push_back(r == R - 1 && R > 3 ? -1 : r);  // last row padding when R > 3
  }
  return s;
}

// The loop written from the contract's text (contract.md section 1.5), one entry at a time.
void naive_loop(const LoopSetup& s, std::vector<int64_t>& tokens, std::vector<bf16>& cache) {
  const int R = s.rows.num_rows, N = s.c.block_size, V = s.c.vocab_size, K = s.c.markov_rank;
  for (int r = 0; r < R; ++r) {
    int64_t prev = s.rows.anchor_tokens[r];
    for (int j = 0; j < N; ++j) {
      std::vector<bf16> e(s.w1.begin() + prev * K, s.w1.begin() + (prev + 1) * K), bias(V), l(V);
      cpu::markov_bias(e.data(), 1, s.w2.data(), V, K, bias.data());
      cpu::step_logits(&s.base[(static_cast<size_t>(r) * N + j) * V], bias.data(), V, s.transform,
                       l.data());
      const uint32_t gs = draft_step_seed(s.rows.seeds[r], s.rows.anchor_positions[r], j);
      int64_t best = -1;
      float best_z = 0;
      for (int v = 0; v < V; ++v) {
        const float z = noised_score(to_f32(l[v]), s.rows.temperatures[r], gs, v);
        if (best < 0) {
          best = v;
          best_z = z;
          continue;
        }
        const bool bn = std::isnan(best_z);
        if (bn) continue;  // the lowest NaN stays
        if (std::isnan(z) || z > best_z) {
          best = v;
          best_z = z;
        }  // strict: lowest id of the max
      }
      tokens[static_cast<size_t>(r) * N + j] = best;
      if (s.rows.cache_slots[r] >= 0)
        std::memcpy(&cache[(static_cast<size_t>(s.rows.cache_slots[r]) * N + j) * V], l.data(),
                    V * sizeof(bf16));
      prev = best;
    }
  }
}

TEST(MarkovLoopCpu, MatchesNaiveLoopAndIsInvariantToTp) {
  struct Case {
    int R, N, V, markov_rank;
    bool cap;
  };
  for (const Case k : {Case{1, 7, 1000, 64, false}, Case{5, 5, 1000, 64, true},
                       Case{4, 16, 512, 128, false}, Case{3, 1, 1024, 256, true}}) {
    const uint64_t seed = 1234 + k.R * 7 + k.N;
    SCOPED_TRACE("seed " + std::to_string(seed) + " R " + std::to_string(k.R) + " N " +
                 std::to_string(k.N) + " V " + std::to_string(k.V) + " rank " +
                 std::to_string(k.markov_rank));
    LoopSetup s = make_setup(seed, k.R, k.N, k.V, k.markov_rank, k.cap);
    const size_t cache_size = static_cast<size_t>(k.R) * k.N * k.V;
    std::vector<int64_t> naive_tokens(static_cast<size_t>(k.R) * k.N);
    std::vector<bf16> naive_cache(cache_size, to_bf16(-7.0f));
    naive_loop(s, naive_tokens, naive_cache);
    if (k.R > 1 && k.N > 2) {
      EXPECT_EQ(naive_tokens[1 * k.N + 0], k.V - 3) << "NaN row must pick the NaN id";
      EXPECT_EQ(naive_tokens[1 * k.N + 2], 5) << "the lowest NaN id wins";
    }
    if (k.R > 2) {
      for (int j = 0; j < k.N; ++j)
        EXPECT_EQ(naive_tokens[2 * k.N + j], k.V / 3) << "exact tie at T = 0: the lowest id wins";
    }
    const ops::MarkovRows rows = s.rows.view();
    MarkovInputs in{&s.c, &s.w, &s.transform, &rows, k.R, 2};
    test::expect_loop_equals_naive_at_every_tp(in, s.base.data(), k.V, naive_tokens, naive_cache);
  }
}

// A reduced draft vocabulary (contract.md section 11), written from the contract's text in
// the target's ids: the step logits of the Vd draft ids scattered into a V-wide row of -inf
// (the cache row), then section 4's rule over all V target ids of that row (noise keyed by
// the target id). Odd V, a non-monotonic map, NaN and tie rows, a row whose draft logits are
// all -inf at step 0 (it draws the fill id, outside the draft vocabulary, and continues from
// it), a padding row; TP 1, 2 and 4 split the draft vocabulary.
TEST(MarkovLoopCpu, ReducedDraftVocabularyMatchesTheTargetSpaceRuleAtEveryTp) {
  const uint64_t seed = 20261203;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const int R = 6, N = 5, V = 997, Vd = 612, K = 40;
  // No soft cap: it would turn the all -inf row finite (tanh(-inf) * cap = -cap).
  LoopSetup s = make_setup(seed, R, N, V, K, false);
  s.c.logit_multiplier = 0.75f;
  s.c.draft_vocab_size = Vd;
  s.w2.resize(static_cast<size_t>(Vd) * K);  // w2 [Vd, K]; w1 stays [V, K]
  // Base logits [R, N, Vd], NaNs and ties as make_setup places them (ids < Vd).
  s.base = test::Gen(seed + 2).normal_bf16s(static_cast<size_t>(R) * N * Vd, 2.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  s.base[(1 * N + 0) * Vd + Vd - 3] = to_bf16(nan);
  s.base[(1 * N + 2) * Vd + 17] = to_bf16(nan);
  s.base[(1 * N + 2) * Vd + 5] = to_bf16(nan);
  for (int j = 0; j < N; ++j) {
    bf16* row = &s.base[(2 * N + j) * Vd];
    for (int v = 0; v < Vd; ++v) row[v] = to_bf16(-30.0f);
    row[Vd / 2 + 3] = row[Vd / 3] = to_bf16(40.0f);
  }
  std::memcpy(&s.w2[static_cast<size_t>(Vd / 2 + 3) * K], &s.w2[static_cast<size_t>(Vd / 3) * K],
              K * sizeof(bf16));
  for (int v = 0; v < Vd; ++v) s.base[(3 * N + 0) * Vd + v] = to_bf16(-INFINITY);
  // A seeded injective map, shuffled (not monotonic): the first Vd of a permutation of V.
  std::vector<int32_t> perm(V);
  for (int t = 0; t < V; ++t) perm[t] = t;
  test::Gen g(seed + 9);
  for (int t = V - 1; t > 0; --t) std::swap(perm[t], perm[g.integer(0, t)]);
  std::vector<int32_t> ids(perm.begin(), perm.begin() + Vd);
  std::vector<bool> taken(V, false);
  for (int32_t t : ids) taken[t] = true;
  int32_t fill = 0;
  while (taken[fill]) ++fill;
  s.w.markov_w2 = s.w2.data();
  s.w.draft_ids = ids.data();
  s.w.draft_fill = fill;
  s.transform = ops::LogitTransform::from_config(s.c);

  // The naive loop over target space.
  std::vector<int64_t> want(static_cast<size_t>(R) * N, -1);
  std::vector<bf16> want_cache(static_cast<size_t>(R) * N * V, to_bf16(-7.0f));
  for (int r = 0; r < R; ++r) {
    int64_t prev = s.rows.anchor_tokens[r];
    for (int j = 0; j < N; ++j) {
      std::vector<bf16> e(s.w1.begin() + prev * K, s.w1.begin() + (prev + 1) * K), bias(Vd), l(Vd);
      cpu::markov_bias(e.data(), 1, s.w2.data(), Vd, K, bias.data());
      cpu::step_logits(&s.base[(static_cast<size_t>(r) * N + j) * Vd], bias.data(), Vd, s.transform,
                       l.data());
      std::vector<bf16> row(V, to_bf16(-INFINITY));
      for (int d = 0; d < Vd; ++d) row[ids[d]] = l[d];
      const uint32_t gs = draft_step_seed(s.rows.seeds[r], s.rows.anchor_positions[r], j);
      int64_t best = 0;
      float best_z = noised_score(to_f32(row[0]), s.rows.temperatures[r], gs, 0);
      for (int v = 1; v < V; ++v) {
        const float z = noised_score(to_f32(row[v]), s.rows.temperatures[r], gs, v);
        if (std::isnan(best_z)) break;
        if (std::isnan(z) || z > best_z) best = v, best_z = z;
      }
      want[static_cast<size_t>(r) * N + j] = best;
      if (s.rows.cache_slots[r] >= 0)
        std::memcpy(&want_cache[(static_cast<size_t>(s.rows.cache_slots[r]) * N + j) * V],
                    row.data(), V * sizeof(bf16));
      prev = best;
    }
  }
  EXPECT_EQ(want[3 * N + 0], fill) << "an all -inf row draws the fill id";
  EXPECT_EQ(want[2 * N + 0], std::min(ids[Vd / 3], ids[Vd / 2 + 3]))
      << "exact tie at T = 0: the lowest target id";
  EXPECT_EQ(want[1 * N + 0], ids[Vd - 3]) << "a NaN draft logit: its target id";

  const ops::MarkovRows rows = s.rows.view();
  MarkovInputs in{&s.c, &s.w, &s.transform, &rows, R, 2};
  for (int tp : {1, 2, 4}) {
    std::vector<int64_t> tokens(want.size(), -1);
    std::vector<bf16> cache(want_cache.size(), to_bf16(-7.0f));
    markov_loop_from_base(in, tp, s.base.data(), ProposeOutputs{tokens.data(), cache.data()});
    for (int r = 0; r < R; ++r) {
      if (s.rows.cache_slots[r] < 0) continue;  // padding rows: don't-care
      for (int j = 0; j < N; ++j)
        EXPECT_EQ(tokens[r * N + j], want[r * N + j])
            << "tp " << tp << " row " << r << " step " << j;
    }
    EXPECT_TRUE(test::same_bits(cache, want_cache)) << "cache at tp " << tp;
  }
  EXPECT_THROW(markov_loop_from_base(in, 8, s.base.data(), ProposeOutputs{nullptr, nullptr}),
               InvalidArgument)
      << "tp 8 does not divide the draft vocabulary 612";
}

}  // namespace
}  // namespace sparkdraft
