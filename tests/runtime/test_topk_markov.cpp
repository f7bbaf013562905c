// The top-k Markov loop on the CPU (contract.md section 12) and its exact top-k
// (core/topk.h): the candidate lists equal a sort by the sampling rule's preference and
// are the same at every split of the row; the top-k loop equals the dense loop (the
// production one, markov_loop_from_base with markov_topk 0) over base logits masked to -inf
// off the candidates, and a naive loop written from the contract (the dense step's row,
// masked after the transform), at every TP size, with NaN, infinity, tie and padding rows,
// k = 1, k = V and odd V.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <vector>

#include "common/bits.h"
#include "common/markov_rows.h"
#include "common/random.h"
#include "runtime/markov_loop.h"
#include "sparkdraft/core/philox.h"
#include "sparkdraft/core/sampling.h"
#include "sparkdraft/core/topk.h"

namespace sparkdraft {
namespace {

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

// The top-k by a full sort with the rule's preference (a different algorithm).
std::vector<TopkEntry> sorted_topk(const bf16* row, int n, int k) {
  std::vector<TopkEntry> all;
  for (int i = 0; i < n; ++i) all.push_back(TopkEntry{to_f32(row[i]), i});
  std::sort(all.begin(), all.end(), [](const TopkEntry& a, const TopkEntry& b) {
    return better(a.value, a.id, b.value, b.id);
  });
  all.resize(static_cast<size_t>(std::min(k, n)));
  return all;
}

bool same_list(const std::vector<TopkEntry>& a, const TopkEntry* b, int nb) {
  if (static_cast<int>(a.size()) != nb) return false;
  for (int i = 0; i < nb; ++i) {
    if (a[i].id != b[i].id) return false;
    if (std::isnan(a[i].value) != std::isnan(b[i].value)) return false;
    if (!std::isnan(a[i].value) && f32_bits(a[i].value) != f32_bits(b[i].value)) return false;
  }
  return true;
}

// A row with every hard case: NaNs (two), +inf, -inf, +0 and -0, runs of equal values
// across the k boundary, and seeded normal values.
std::vector<bf16> hard_row(uint64_t seed, int n) {
  std::vector<bf16> row = test::Gen(seed).normal_bf16s(static_cast<size_t>(n), 2.0f);
  for (int i = 0; i < n; i += 3) row[i] = to_bf16(1.5f);  // a long tie
  if (n > 10) {
    row[n - 2] = to_bf16(kNaN);
    row[7] = to_bf16(kNaN);
    row[n / 2] = to_bf16(kInf);
    row[1] = to_bf16(-kInf);
    row[2] = to_bf16(0.0f);
    row[4] = to_bf16(-0.0f);
  }
  return row;
}

TEST(TopkCore, EqualsASortByTheRuleAndIsTheSameAtEverySplit) {
  for (const int n : {1, 2, 13, 257, 1000}) {
    for (const int k : {1, 2, 5, 31, n, n + 3}) {
      const uint64_t seed = 9000 + static_cast<uint64_t>(n) * 31 + k;
      SCOPED_TRACE("seed " + std::to_string(seed) + " n " + std::to_string(n) + " k " +
                   std::to_string(k));
      const std::vector<bf16> row = hard_row(seed, n);
      const std::vector<TopkEntry> want = sorted_topk(row.data(), n, k);
      std::vector<TopkEntry> got(static_cast<size_t>(k), TopkEntry{0.0f, -1});
      const int count = topk_of_row(row.data(), n, 0, k, got.data());
      EXPECT_TRUE(same_list(want, got.data(), count));
      // Split the row into parts (uneven ones too), take each part's top-k, merge the lists
      // in the given order and in reverse: the same list.
      for (const int parts : {2, 3, 7}) {
        if (parts > n) continue;
        std::vector<std::vector<TopkEntry>> lists;
        std::vector<int> counts;
        for (int p = 0; p < parts; ++p) {
          const int lo = n * p / parts, hi = n * (p + 1) / parts;
          lists.emplace_back(static_cast<size_t>(k), TopkEntry{0.0f, -1});
          counts.push_back(topk_of_row(row.data() + lo, hi - lo, lo, k, lists.back().data()));
        }
        for (const bool reverse : {false, true}) {
          std::vector<TopkEntry> merged(static_cast<size_t>(k), TopkEntry{0.0f, -1});
          int m = 0;
          for (int q = 0; q < parts; ++q) {
            const int p = reverse ? parts - 1 - q : q;
            m = topk_merge(merged.data(), m, k, lists[p].data(), counts[p]);
          }
          EXPECT_TRUE(same_list(want, merged.data(), m)) << parts << " parts reverse " << reverse;
        }
      }
    }
  }
  // The rule's corner cases, spelled out.
  const std::vector<bf16> row = {to_bf16(1.0f), to_bf16(kNaN),  to_bf16(3.0f), to_bf16(kNaN),
                                 to_bf16(3.0f), to_bf16(-0.0f), to_bf16(0.0f)};
  TopkEntry l[4];
  ASSERT_EQ(topk_of_row(row.data(), 7, 100, 4, l), 4);
  EXPECT_EQ(l[0].id, 101);  // NaNs first, the lower id first
  EXPECT_EQ(l[1].id, 103);
  EXPECT_EQ(l[2].id, 102);  // then the larger value, ties to the lower id
  EXPECT_EQ(l[3].id, 104);
  TopkEntry z[2];
  const std::vector<bf16> zeros = {to_bf16(-2.0f), to_bf16(-0.0f), to_bf16(0.0f)};
  ASSERT_EQ(topk_of_row(zeros.data(), 3, 0, 1, z), 1);
  EXPECT_EQ(z[0].id, 1);  // -0 and +0 tie: the lower id
}

struct TopkSetup {
  ModelConfig c;
  std::vector<bf16> w1, w2, base;
  DraftWeights w;
  ops::LogitTransform transform;
  test::HostMarkovRows rows;
};

// Seeded weights and base logits; row 1 has NaN base logits, row 2 a long exact tie across
// the k boundary (equal w2 rows for the tied ids), row 3 +inf and -inf base logits and a
// step whose base row is all -inf; the last row is padding when R > 4.
TopkSetup make_setup(uint64_t seed, int R, int N, int V, int rank, int k, bool cap) {
  TopkSetup s;
  s.c.vocab_size = V;
  s.c.markov_rank = rank;
  s.c.block_size = N;
  s.c.markov_topk = k;
  if (cap) {
    s.c.logit_multiplier = 0.75f;
    s.c.logit_soft_cap = 20.0f;
  }
  s.w1 = test::Gen(seed).normal_bf16s(static_cast<size_t>(V) * rank, 0.3f);
  s.w2 = test::Gen(seed + 1).normal_bf16s(static_cast<size_t>(V) * rank, 0.3f);
  s.base = test::Gen(seed + 2).normal_bf16s(static_cast<size_t>(R) * N * V, 2.0f);
  auto at = [&](int r, int j, int v) -> bf16& {
    return s.base[(static_cast<size_t>(r) * N + j) * V + v];
  };
  if (R > 1) {
    at(1, 0, V - 3) = to_bf16(kNaN);
    if (N > 2) {
      at(1, 2, V / 2) = to_bf16(kNaN);
      at(1, 2, 5 % V) = to_bf16(kNaN);
    }
  }
  if (R > 2) {
    // Every third id ties at 30.0 (more of them than k): the lower ids are the candidates;
    // their w2 rows are equal, so the step logits tie too and T = 0 picks the lowest.
    for (int j = 0; j < N; ++j)
      for (int v = 1; v < V; v += 3) at(2, j, v) = to_bf16(30.0f);
    for (int v = 4; v < V; v += 3)
      std::memcpy(&s.w2[static_cast<size_t>(v) * rank], &s.w2[static_cast<size_t>(1) * rank],
                  rank * sizeof(bf16));
  }
  if (R > 3) {
    at(3, 0, V - 1) = to_bf16(kInf);
    at(3, 0, 0) = to_bf16(-kInf);
    if (N > 1)
      for (int v = 0; v < V; ++v) at(3, 1, v) = to_bf16(-kInf);
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
    s.rows.cache_slots.push_back(r == R - 1 && R > 4 ? -1 : r);
  }
  return s;
}

// Whether id v is a candidate of (r, j): one of the k best of the base row by a sort.
std::vector<char> candidate_mask(const TopkSetup& s, int r, int j) {
  const int V = s.c.vocab_size, N = s.c.block_size;
  std::vector<char> m(static_cast<size_t>(V), 0);
  for (const TopkEntry& e :
       sorted_topk(&s.base[(static_cast<size_t>(r) * N + j) * V], V, s.c.markov_topk))
    m[static_cast<size_t>(e.id)] = 1;
  return m;
}

// The contract's text, one step at a time: the dense step's row (bias chain over all V,
// the add, the transform), -inf off the candidates, section 4's rule over the V ids.
void naive_topk_loop(const TopkSetup& s, std::vector<int64_t>& tokens, std::vector<bf16>& cache) {
  const int R = s.rows.num_rows, N = s.c.block_size, V = s.c.vocab_size, K = s.c.markov_rank;
  for (int r = 0; r < R; ++r) {
    int64_t prev = s.rows.anchor_tokens[r];
    for (int j = 0; j < N; ++j) {
      std::vector<bf16> e(s.w1.begin() + prev * K, s.w1.begin() + (prev + 1) * K), bias(V), l(V);
      cpu::markov_bias(e.data(), 1, s.w2.data(), V, K, bias.data());
      cpu::step_logits(&s.base[(static_cast<size_t>(r) * N + j) * V], bias.data(), V, s.transform,
                       l.data());
      std::vector<char> cand = candidate_mask(s, r, j);
      if (s.c.markov_bias_topk > 0)  // the union form (12.5): the bias row's m best join
        for (const TopkEntry& b : sorted_topk(bias.data(), V, s.c.markov_bias_topk))
          cand[static_cast<size_t>(b.id)] = 1;
      for (int v = 0; v < V; ++v)
        if (!cand[v]) l[v] = to_bf16(-kInf);
      const uint32_t gs = draft_step_seed(s.rows.seeds[r], s.rows.anchor_positions[r], j);
      int64_t best = 0;
      float best_z = noised_score(to_f32(l[0]), s.rows.temperatures[r], gs, 0);
      for (int v = 1; v < V; ++v) {
        const float z = noised_score(to_f32(l[v]), s.rows.temperatures[r], gs, v);
        if (std::isnan(best_z)) break;  // the lowest NaN stays
        if (std::isnan(z) || z > best_z) {
          best = v;
          best_z = z;
        }
      }
      tokens[static_cast<size_t>(r) * N + j] = best;
      if (s.rows.cache_slots[r] >= 0)
        std::memcpy(&cache[(static_cast<size_t>(s.rows.cache_slots[r]) * N + j) * V], l.data(),
                    V * sizeof(bf16));
      prev = best;
    }
  }
}

void expect_same(const TopkSetup& s, const std::vector<int64_t>& want_tokens,
                 const std::vector<bf16>& want_cache, const std::vector<int64_t>& tokens,
                 const std::vector<bf16>& cache, const std::string& what) {
  const int N = s.c.block_size;
  for (int r = 0; r < s.rows.num_rows; ++r) {
    if (s.rows.cache_slots[r] < 0) continue;  // padding rows' tokens are don't-care
    for (int j = 0; j < N; ++j)
      EXPECT_EQ(tokens[static_cast<size_t>(r) * N + j], want_tokens[static_cast<size_t>(r) * N + j])
          << what << " row " << r << " step " << j;
  }
  EXPECT_TRUE(test::same_bits(cache, want_cache)) << what << ": cache";
}

// The top-k loop at TP 1, 2, 4 and 8 (those that divide V) equals the wanted tokens and
// cache (cache rows pre-filled with -7 so that an unwritten entry shows).
void expect_every_tp(const TopkSetup& s, const std::vector<int64_t>& want_tokens,
                     const std::vector<bf16>& want_cache) {
  const ops::MarkovRows rows = s.rows.view();
  MarkovInputs in{&s.c, &s.w, &s.transform, &rows, s.rows.num_rows, 2};
  for (int tp : {1, 2, 4, 8}) {
    if (s.c.vocab_size % tp) continue;
    std::vector<int64_t> tokens(want_tokens.size(), -1);
    std::vector<bf16> cache(want_cache.size(), to_bf16(-7.0f));
    markov_loop_from_base(in, tp, s.base.data(), ProposeOutputs{tokens.data(), cache.data()});
    expect_same(s, want_tokens, want_cache, tokens, cache, "tp " + std::to_string(tp));
  }
}

struct Case {
  int R, N, V, rank, k;
};

// The top-k loop (markov_topk = k) equals the production dense loop (markov_topk = 0) run on
// base logits set to -inf off each position's candidates: without a transform and with
// finite weights, -inf + bias stays -inf, so that masked dense loop is the definition.
TEST(MarkovTopkCpu, EqualsTheDenseLoopOverMaskedBaseLogitsAtEveryTp) {
  for (const Case k : {Case{1, 7, 1000, 64, 1}, Case{5, 5, 1000, 64, 7}, Case{6, 4, 512, 128, 40},
                       Case{5, 3, 1000, 32, 1000}, Case{3, 2, 999, 16, 5}, Case{1, 1, 1, 16, 1},
                       Case{5, 6, 1024, 64, 333}}) {
    const uint64_t seed = 4321 + static_cast<uint64_t>(k.R) * 7 + k.N + k.k;
    SCOPED_TRACE("seed " + std::to_string(seed) + " R " + std::to_string(k.R) + " N " +
                 std::to_string(k.N) + " V " + std::to_string(k.V) + " k " + std::to_string(k.k));
    TopkSetup s = make_setup(seed, k.R, k.N, k.V, k.rank, k.k, false);
    // The masked base and a dense config.
    TopkSetup dense = s;
    dense.c.markov_topk = 0;
    dense.w.markov_w1 = dense.w1.data();
    dense.w.markov_w2 = dense.w2.data();
    for (int r = 0; r < k.R; ++r)
      for (int j = 0; j < k.N; ++j) {
        const std::vector<char> cand = candidate_mask(s, r, j);
        for (int v = 0; v < k.V; ++v)
          if (!cand[v]) dense.base[(static_cast<size_t>(r) * k.N + j) * k.V + v] = to_bf16(-kInf);
      }
    const size_t cache_size = static_cast<size_t>(k.R) * k.N * k.V;
    const ops::MarkovRows dense_rows = dense.rows.view();
    MarkovInputs din{&dense.c, &dense.w, &dense.transform, &dense_rows, k.R, 2};
    std::vector<int64_t> want_tokens(static_cast<size_t>(k.R) * k.N, -1);
    std::vector<bf16> want_cache(cache_size, to_bf16(-7.0f));
    markov_loop_from_base(din, 1, dense.base.data(),
                          ProposeOutputs{want_tokens.data(), want_cache.data()});
    // The cache rows are -inf exactly off the candidates (every candidate here is finite
    // after the bias, except where its base logit is infinite).
    expect_every_tp(s, want_tokens, want_cache);
    // A padding row's cache slot is never written.
    if (k.R > 4) {
      const ops::MarkovRows rows = s.rows.view();
      MarkovInputs in{&s.c, &s.w, &s.transform, &rows, k.R, 2};
      std::vector<int64_t> tokens(want_tokens.size(), -1);
      std::vector<bf16> cache(cache_size, to_bf16(-7.0f));
      markov_loop_from_base(in, 1, s.base.data(), ProposeOutputs{tokens.data(), cache.data()});
      const size_t pad = static_cast<size_t>(k.R - 1) * k.N * k.V;
      for (size_t i = pad; i < cache_size; ++i) ASSERT_EQ(cache[i].bits, to_bf16(-7.0f).bits);
    }
  }
}

// With the transform (multiplier and soft cap: tanh of -inf is -cap, so masking the base
// would not do) the top-k loop equals the naive loop of the contract's text: the dense step's
// row masked to -inf off the candidates, and section 4's rule. NaN rows pick the candidate
// NaN; the tie row picks the lowest tied id at T = 0; k = 1 is the argmax chain of the base.
TEST(MarkovTopkCpu, EqualsTheMaskedDenseStepWithTheTransformAtEveryTp) {
  for (const Case k : {Case{5, 5, 1000, 64, 1}, Case{6, 7, 512, 128, 9}, Case{4, 3, 1000, 32, 1000},
                       Case{3, 4, 777, 16, 100}}) {
    const uint64_t seed = 777 + static_cast<uint64_t>(k.R) * 11 + k.N + k.k;
    SCOPED_TRACE("seed " + std::to_string(seed) + " R " + std::to_string(k.R) + " N " +
                 std::to_string(k.N) + " V " + std::to_string(k.V) + " k " + std::to_string(k.k));
    TopkSetup s = make_setup(seed, k.R, k.N, k.V, k.rank, k.k, true);
    const size_t cache_size = static_cast<size_t>(k.R) * k.N * k.V;
    std::vector<int64_t> want_tokens(static_cast<size_t>(k.R) * k.N, -1);
    std::vector<bf16> want_cache(cache_size, to_bf16(-7.0f));
    naive_topk_loop(s, want_tokens, want_cache);
    // The hard rows do what the rule says.
    if (k.R > 1) {
      EXPECT_EQ(want_tokens[1 * k.N + 0], k.V - 3) << "a NaN candidate wins";
    }
    if (k.R > 2) {
      for (int j = 0; j < k.N; ++j)
        EXPECT_EQ(want_tokens[2 * k.N + j], 1) << "the tie row at T = 0: the lowest tied id";
    }
    if (k.k == 1)
      for (int r = 0; r < k.R; ++r)
        for (int j = 0; j < k.N; ++j) {
          const TopkEntry best =
              sorted_topk(&s.base[(static_cast<size_t>(r) * k.N + j) * k.V], k.V, 1)[0];
          EXPECT_EQ(want_tokens[static_cast<size_t>(r) * k.N + j], best.id)
              << "k = 1 takes the base argmax, row " << r << " step " << j;
        }
    expect_every_tp(s, want_tokens, want_cache);
  }
}

// The union form (markov_bias_topk = m, contract.md 12.5) equals the naive loop whose
// candidates are the base top-k plus the top-m of the step's dense bias row, at every TP size,
// with and without the transform; m = V is the dense loop; and the bias's candidates change
// the result (the same inputs with m = 0 give other tokens or cache rows), so the test can
// tell the union from the plain top-k loop.
TEST(MarkovTopkCpu, UnionEqualsTheMaskedDenseStepAtEveryTp) {
  struct UnionCase {
    int R, N, V, rank, k, m;
    bool cap;
  };
  for (const UnionCase u :
       {UnionCase{5, 5, 1000, 64, 1, 1, false}, UnionCase{6, 7, 512, 128, 9, 4, true},
        UnionCase{4, 3, 1000, 32, 5, 60, false}, UnionCase{3, 4, 777, 16, 100, 3, true},
        UnionCase{5, 2, 256, 32, 2, 256, false}}) {
    const uint64_t seed = 5151 + static_cast<uint64_t>(u.R) * 13 + u.k * 3 + u.m;
    SCOPED_TRACE("seed " + std::to_string(seed) + " R " + std::to_string(u.R) + " N " +
                 std::to_string(u.N) + " V " + std::to_string(u.V) + " k " + std::to_string(u.k) +
                 " m " + std::to_string(u.m));
    TopkSetup s = make_setup(seed, u.R, u.N, u.V, u.rank, u.k, u.cap);
    s.c.markov_bias_topk = u.m;
    const size_t cache_size = static_cast<size_t>(u.R) * u.N * u.V;
    std::vector<int64_t> want_tokens(static_cast<size_t>(u.R) * u.N, -1);
    std::vector<bf16> want_cache(cache_size, to_bf16(-7.0f));
    naive_topk_loop(s, want_tokens, want_cache);
    expect_every_tp(s, want_tokens, want_cache);
    // The plain top-k loop on the same inputs differs (the bias's candidates took part).
    TopkSetup plain = s;
    plain.c.markov_bias_topk = 0;
    plain.w.markov_w1 = plain.w1.data();
    plain.w.markov_w2 = plain.w2.data();
    std::vector<int64_t> plain_tokens(want_tokens.size(), -1);
    std::vector<bf16> plain_cache(cache_size, to_bf16(-7.0f));
    naive_topk_loop(plain, plain_tokens, plain_cache);
    EXPECT_TRUE(plain_tokens != want_tokens || !test::same_bits(plain_cache, want_cache))
        << "the union form gave the plain top-k loop's result";
    if (u.m == u.V) {  // every id a candidate: the dense loop
      TopkSetup dense = s;
      dense.c.markov_topk = dense.c.markov_bias_topk = 0;
      dense.w.markov_w1 = dense.w1.data();
      dense.w.markov_w2 = dense.w2.data();
      const ops::MarkovRows rows = dense.rows.view();
      MarkovInputs d{&dense.c, &dense.w, &dense.transform, &rows, u.R, 2};
      std::vector<int64_t> t0(want_tokens.size(), -1);
      std::vector<bf16> c0(cache_size, to_bf16(-7.0f));
      markov_loop_from_base(d, 1, dense.base.data(), ProposeOutputs{t0.data(), c0.data()});
      expect_same(s, want_tokens, want_cache, t0, c0, "m = V against the dense loop");
    }
  }
}

// k = V is the dense loop itself (every id a candidate).
TEST(MarkovTopkCpu, KEqualToTheVocabularyIsTheDenseLoop) {
  const uint64_t seed = 2468;
  SCOPED_TRACE("seed " + std::to_string(seed));
  for (const bool cap : {false, true}) {
    TopkSetup s = make_setup(seed, 5, 4, 256, 32, 256, cap);
    TopkSetup dense = s;
    dense.c.markov_topk = 0;
    dense.w.markov_w1 = dense.w1.data();
    dense.w.markov_w2 = dense.w2.data();
    const size_t cache_size = static_cast<size_t>(5) * 4 * 256;
    std::vector<int64_t> t0(20, -1), t1(20, -1);
    std::vector<bf16> c0(cache_size, to_bf16(-7.0f)), c1(cache_size, to_bf16(-7.0f));
    const ops::MarkovRows r0 = dense.rows.view(), r1 = s.rows.view();
    MarkovInputs d{&dense.c, &dense.w, &dense.transform, &r0, 5, 2};
    MarkovInputs t{&s.c, &s.w, &s.transform, &r1, 5, 2};
    markov_loop_from_base(d, 2, dense.base.data(), ProposeOutputs{t0.data(), c0.data()});
    markov_loop_from_base(t, 4, s.base.data(), ProposeOutputs{t1.data(), c1.data()});
    expect_same(s, t0, c0, t1, c1, cap ? "with the transform" : "plain");
  }
}

}  // namespace
}  // namespace sparkdraft
