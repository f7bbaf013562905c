// core/sampling.h: the token rule (lowest NaN id, else lowest id of the maximum)
// on hand-built rows, and the claim behind every kernel: reducing with `better`
// in any tree shape, block size or vocab split gives the linear scan's winner.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "common/random.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/sampling.h"

namespace sparkdraft {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();
const float kNan = std::numeric_limits<float>::quiet_NaN();

// The rule written directly from contract.md section 4, without `better`.
int64_t rule_token(const std::vector<float>& z) {
  for (size_t i = 0; i < z.size(); ++i)
    if (std::isnan(z[i])) return static_cast<int64_t>(i);
  int64_t best = 0;
  for (size_t i = 1; i < z.size(); ++i)
    if (z[i] > z[best]) best = static_cast<int64_t>(i);
  return best;
}

// Linear scan with `better`, left to right.
int64_t scan_token(const std::vector<float>& z) {
  int64_t best = 0;
  for (size_t i = 1; i < z.size(); ++i)
    if (better(z[i], static_cast<int64_t>(i), z[best], best)) best = static_cast<int64_t>(i);
  return best;
}

TEST(SamplingRule, NanAnywhereWins) {
  for (size_t pos : {size_t{0}, size_t{3}, size_t{6}}) {
    std::vector<float> z = {1.0f, 5.0f, -2.0f, 0.5f, kInf, 3.0f, 2.0f};
    z[pos] = kNan;
    EXPECT_EQ(scan_token(z), static_cast<int64_t>(pos)) << "NaN at " << pos;
    EXPECT_EQ(rule_token(z), static_cast<int64_t>(pos));
  }
}

TEST(SamplingRule, LowestNanWinsAmongSeveral) {
  std::vector<float> z = {1.0f, 2.0f, kNan, 9.0f, -kNan, kNan, kInf};
  EXPECT_EQ(scan_token(z), 2);
  z[2] = 0.0f;
  EXPECT_EQ(scan_token(z), 4);  // a negative NaN is a NaN too
  EXPECT_TRUE(better(kNan, 7, kNan, 8));
  EXPECT_FALSE(better(kNan, 8, kNan, 7));
  EXPECT_TRUE(better(kNan, 9, kInf, 0));
  EXPECT_FALSE(better(kInf, 0, kNan, 9));
}

TEST(SamplingRule, ExactTiesGoToTheLowestId) {
  EXPECT_EQ(scan_token({1.0f, 3.0f, 2.0f, 3.0f, 3.0f}), 1);
  EXPECT_EQ(scan_token({kInf, 0.0f, kInf}), 0);
  EXPECT_TRUE(better(3.0f, 1, 3.0f, 4));
  EXPECT_FALSE(better(3.0f, 4, 3.0f, 1));
}

TEST(SamplingRule, AllMinusInfinityGivesIdZero) {
  const std::vector<float> z(17, -kInf);
  EXPECT_EQ(scan_token(z), 0);
  EXPECT_EQ(rule_token(z), 0);
}

TEST(SamplingRule, SignedZerosTie) {
  EXPECT_EQ(scan_token({-1.0f, -0.0f, 0.0f}), 1);
  EXPECT_EQ(scan_token({-1.0f, 0.0f, -0.0f}), 1);
  EXPECT_TRUE(better(-0.0f, 2, 0.0f, 5));
  EXPECT_TRUE(better(0.0f, 2, -0.0f, 5));
}

TEST(SamplingRule, ZeroTemperatureIsPureArgmax) {
  const uint32_t gs = draft_step_seed(42, 100, 0);
  const float logits[] = {0.25f, -1.5f, 7.0f, kNan, -kInf, 1e30f, -0.0f};
  for (int64_t v = 0; v < 7; ++v) {
    EXPECT_EQ(f32_bits(noised_score(logits[v], 0.0f, gs, v)), f32_bits(logits[v])) << "v " << v;
    EXPECT_EQ(f32_bits(noised_score(logits[v], -0.0f, gs, v)), f32_bits(logits[v])) << "v " << v;
  }
  std::vector<float> z = {0.5f, 2.0f, 2.0f, -3.0f};
  for (int64_t v = 0; v < 4; ++v) z[v] = noised_score(z[v], 0.0f, gs, v);
  EXPECT_EQ(scan_token(z), 1);
}

TEST(SamplingRule, PositiveTemperatureAddsTheNoiseAfterTheDivision) {
  const uint32_t gs = draft_step_seed(7, 33, 2);
  test::Gen32 gen(11);
  std::mt19937& rng = gen.engine();
  std::uniform_real_distribution<float> dist(-20.0f, 20.0f);
  for (int64_t v = 0; v < 1000; ++v) {
    const float l = round_bf16(dist(rng)), t = 0.7f;
    const float scaled = l / t;
    const float expected = scaled + draft_noise(gs, v);
    ASSERT_EQ(f32_bits(noised_score(l, t, gs, v)), f32_bits(expected)) << "v " << v;
  }
  EXPECT_TRUE(std::isnan(noised_score(kNan, 0.7f, gs, 3)));
}

// A seeded row with NaNs, exact ties, +-0 and +-inf sprinkled in.
std::vector<float> make_row(std::mt19937& rng, int n, bool with_nans) {
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  std::vector<float> z(n);
  for (auto& x : z) x = round_bf16(dist(rng));  // bf16 grid: many exact ties
  std::uniform_int_distribution<int> pick(0, n - 1);
  const float extras[] = {0.0f, -0.0f, -kInf, 4.0f, 4.0f};
  for (float e : extras) z[pick(rng)] = e;
  if (with_nans) {
    const int count = 1 + pick(rng) % 3;
    for (int k = 0; k < count; ++k) z[pick(rng)] = (k % 2) ? -kNan : kNan;
  }
  return z;
}

struct candidate {
  float v;
  int64_t id;
};

// Reduce a list of candidates by a random binary tree (random adjacent pairs).
candidate reduce_random_tree(std::vector<candidate> c, std::mt19937& rng) {
  while (c.size() > 1) {
    std::uniform_int_distribution<size_t> pick(0, c.size() - 2);
    const size_t i = pick(rng);
    const candidate w = better(c[i].v, c[i].id, c[i + 1].v, c[i + 1].id) ? c[i] : c[i + 1];
    c[i] = w;
    c.erase(c.begin() + static_cast<std::ptrdiff_t>(i) + 1);
  }
  return c[0];
}

// Blocks of `block` ids, each reduced by a random tree, block winners combined in
// a random order (an arrival counter's last block sees them in any order).
candidate reduce_blocks(const std::vector<float>& z, int64_t first_id, int block,
                        std::mt19937& rng) {
  std::vector<candidate> winners;
  for (size_t b = 0; b < z.size(); b += block) {
    std::vector<candidate> c;
    for (size_t i = b; i < std::min(z.size(), b + block); ++i)
      c.push_back({z[i], first_id + static_cast<int64_t>(i)});
    winners.push_back(reduce_random_tree(c, rng));
  }
  std::shuffle(winners.begin(), winners.end(), rng);
  candidate best = winners[0];
  for (size_t k = 1; k < winners.size(); ++k)
    if (better(winners[k].v, winners[k].id, best.v, best.id)) best = winners[k];
  return best;
}

TEST(SamplingRule, AnyTreeBlockSizeOrSplitGivesTheLinearWinner) {
  const uint32_t seed = 90210;
  test::Gen32 gen(seed);  // names the seed in any failure
  std::mt19937& rng = gen.engine();
  const int sizes[] = {1, 2, 7, 31, 33, 255, 1000, 4097};
  for (int trial = 0; trial < 400; ++trial) {
    const int n = sizes[trial % 8];
    const bool nans = trial % 3 == 0;
    const std::vector<float> z = make_row(rng, n, nans);
    const int64_t expected = rule_token(z);
    ASSERT_EQ(scan_token(z), expected) << "trial " << trial << " n " << n;
    // One reduction: random block size.
    const int block = 1 + static_cast<int>(rng() % 300);
    const candidate whole = reduce_blocks(z, 0, block, rng);
    ASSERT_EQ(whole.id, expected) << "trial " << trial << " n " << n << " block " << block;
    // Vocab split over ranks holding increasing id ranges, packets gathered in any order.
    const int ranks = 1 + static_cast<int>(rng() % 8);
    std::vector<candidate> packets;
    for (int r = 0; r < ranks; ++r) {
      const int64_t lo = static_cast<int64_t>(n) * r / ranks,
                    hi = static_cast<int64_t>(n) * (r + 1) / ranks;
      if (lo == hi) continue;
      const std::vector<float> slice(z.begin() + lo, z.begin() + hi);
      packets.push_back(reduce_blocks(slice, lo, 1 + static_cast<int>(rng() % 64), rng));
    }
    std::shuffle(packets.begin(), packets.end(), rng);
    ASSERT_EQ(reduce_random_tree(packets, rng).id, expected)
        << "trial " << trial << " n " << n << " ranks " << ranks;
  }
}

TEST(SamplingRule, BetterIsAStrictTotalOrder) {
  test::Gen32 gen(5);
  std::mt19937& rng = gen.engine();
  const float pool[] = {kNan, -kNan, kInf, -kInf, 0.0f, -0.0f, 1.0f, 1.0f, -2.5f, 3.0f};
  for (int t = 0; t < 20000; ++t) {
    candidate a{pool[rng() % 10], static_cast<int64_t>(rng() % 1000)};
    candidate b{pool[rng() % 10], static_cast<int64_t>(rng() % 1000)};
    candidate c{pool[rng() % 10], static_cast<int64_t>(rng() % 1000)};
    if (a.id == b.id || b.id == c.id || a.id == c.id) continue;
    const bool ab = better(a.v, a.id, b.v, b.id), ba = better(b.v, b.id, a.v, a.id);
    ASSERT_NE(ab, ba) << "exactly one of a, b wins";
    if (ab && better(b.v, b.id, c.v, c.id)) {
      ASSERT_TRUE(better(a.v, a.id, c.v, c.id)) << "transitive";
    }
  }
}

// The test vectors printed in docs/contract.md section 4 (the Gumbel noise of the
// Philox vectors' uniforms, and the worked step): the document quotes exactly these.
TEST(SamplingRule, ContractDocumentVectors) {
  struct row {
    int64_t seed, off;
    uint32_t g_bits[3];  // gumbel_noise(philox_uniform(randint(seed, off), v)), v = 0, 1, 2
  };
  const row rows[] = {
      {0, 0, {0x4099b072u, 0x3dd76873u, 0x3eb479bdu}},
      {12345, 77, {0xbf59eb2eu, 0xbe8d9009u, 0x3dab43d6u}},
      {-5, 9, {0x403a80d6u, 0xbf0e6e86u, 0xbe587571u}},
  };
  for (const row& r : rows) {
    const uint32_t gs = philox_randint(r.seed, r.off);
    for (int v = 0; v < 3; ++v)
      EXPECT_EQ(f32_bits(draft_noise(gs, v)), r.g_bits[v])
          << "randint(" << r.seed << ", " << r.off << "), v " << v;
  }
  // The worked step: seed 12345, anchor 70, step 7, logits (1.0, 1.5, 1.25, 1.5).
  const uint32_t gs = draft_step_seed(12345, 70, 7);
  ASSERT_EQ(gs, 2211821518u);
  const uint32_t u_bits[4] = {0x3f7db1e9u, 0x3efc364du, 0x3e699922u, 0x3f3217f5u};
  const uint32_t g_bits[4] = {0xbfc65cbbu, 0x3ec69ee4u, 0x3facf3ffu, 0xbe31d7ebu};
  const uint32_t z1_bits[4] = {0xbf0cb976u, 0x3ff1a7b9u, 0x40267a00u, 0x3fa9c503u};
  const float logits[4] = {1.0f, 1.5f, 1.25f, 1.5f};
  std::vector<float> z0(4), z1(4);
  for (int v = 0; v < 4; ++v) {
    EXPECT_EQ(f32_bits(philox_uniform(gs, v)), u_bits[v]) << "v " << v;
    EXPECT_EQ(f32_bits(draft_noise(gs, v)), g_bits[v]) << "v " << v;
    z0[v] = noised_score(logits[v], 0.0f, gs, v);
    z1[v] = noised_score(logits[v], 1.0f, gs, v);
    EXPECT_EQ(f32_bits(z0[v]), f32_bits(logits[v])) << "v " << v;
    EXPECT_EQ(f32_bits(z1[v]), z1_bits[v]) << "v " << v;
  }
  EXPECT_EQ(scan_token(z0), 1);
  EXPECT_EQ(rule_token(z0), 1);
  EXPECT_EQ(scan_token(z1), 2);
  EXPECT_EQ(rule_token(z1), 2);
}

// The noise range kGumbelMin .. kGumbelMax (the bound the fused loop's pruning uses):
// the noise of the two ends of u's range, computed here with the contract's own
// functions, and every u the sampler can draw (seeded draws through philox_uniform,
// the ends' neighbours) gives a g inside it; g is non-increasing in u on the way.
TEST(SamplingRule, GumbelNoiseRangeIsThatOfTheEndsOfU) {
  const float u_lo = kUniformScale, u_hi = 0x1.fffffep-1f;
  EXPECT_EQ(f32_bits(gumbel_noise(u_lo)), f32_bits(kGumbelMax));
  EXPECT_EQ(f32_bits(gumbel_noise(u_hi)), f32_bits(kGumbelMin));
  EXPECT_EQ(f32_bits(kGumbelMax), 0x41abe687u);
  EXPECT_EQ(f32_bits(kGumbelMin), 0xc033f049u);
  // u's range: the largest int32 magnitude times the scale, and zero clamped up.
  EXPECT_EQ(f32_bits(static_cast<float>(0x7fffffff) * kUniformScale), f32_bits(u_hi));
  test::Gen gen(20261204);
  for (int i = 0; i < 200000; ++i) {
    const uint32_t step_seed = static_cast<uint32_t>(gen.bits());
    const int64_t v = gen.integer(0, (int64_t{1} << 32) - 1);
    const float u = philox_uniform(step_seed, v);
    ASSERT_GE(u, u_lo);
    ASSERT_LE(u, u_hi);
    const float g = gumbel_noise(u);
    ASSERT_GE(g, kGumbelMin) << "u " << u;
    ASSERT_LE(g, kGumbelMax) << "u " << u;
    // Monotone: the next fp32 above u (inside the range) never gives a larger g.
    if (u < u_hi) {
      const float next = bits_f32(f32_bits(u) + 1u);
      ASSERT_LE(gumbel_noise(next), g) << "u " << u;
    }
  }
  // The ends' neighbours stay inside.
  EXPECT_LE(gumbel_noise(bits_f32(f32_bits(u_lo) + 1u)), kGumbelMax);
  EXPECT_GE(gumbel_noise(bits_f32(f32_bits(u_hi) - 1u)), kGumbelMin);
}

}  // namespace
}  // namespace sparkdraft
