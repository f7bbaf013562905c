// core/reduce.h: canonical_sum / canonical_dot against the order as its comment
// states it, re-implemented element by element in core/canonical_order.h (no
// library helpers), with the butterfly simulated as the warp's xor shuffle.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "common/random.h"
#include "common/tree.h"
#include "core/canonical_order.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/reduce.h"

namespace sparkdraft {
namespace {

// Values of mixed magnitude and sign so that a different order gives other bits.
std::vector<float> seeded_values(std::mt19937& rng, int n, bool bf16_grid) {
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::uniform_int_distribution<int> ex(-12, 12);
  std::vector<float> v(n);
  for (auto& x : v) {
    x = std::ldexp(mant(rng), ex(rng));
    if (bf16_grid) x = round_bf16(x);
  }
  return v;
}

float sequential_sum(const std::vector<float>& x, const std::vector<float>& y) {
  float acc = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) acc = std::fmaf(x[i], y[i], acc);
  return acc;
}

TEST(CanonicalReduce, MatchesTheDocumentedOrder) {
  const uint32_t seed = 1234567;
  test::Gen32 gen(seed);  // names the seed in any failure
  std::mt19937& rng = gen.engine();
  const int sizes[] = {1, 7, 8, 9, 31, 64, 255, 256, 257, 512, 4096, 8193};
  int order_sensitive = 0;
  for (int n : sizes) {
    for (int rep = 0; rep < 8; ++rep) {
      const bool grid = rep % 2 == 0;
      const std::vector<float> x = seeded_values(rng, n, grid), y = seeded_values(rng, n, grid);
      const float expected = test::canonical_order_dot(x, y);
      const float sum = canonical_sum(n, [&](int i, float& a, float& b) {
        a = x[i];
        b = y[i];
      });
      const float dot = canonical_dot(
          n, [&](int i) { return x[i]; }, [&](int i) { return y[i]; });
      ASSERT_EQ(f32_bits(sum), f32_bits(expected))
          << "n " << n << " rep " << rep << ": got " << sum << ", expected " << expected;
      ASSERT_EQ(f32_bits(dot), f32_bits(expected)) << "canonical_dot, n " << n << " rep " << rep;
      if (f32_bits(sequential_sum(x, y)) != f32_bits(expected)) ++order_sensitive;
    }
  }
  // The inputs are order sensitive: a plain left-to-right sum differs somewhere,
  // so the equality above really pins the order.
  EXPECT_GT(order_sensitive, 20);
}

TEST(CanonicalReduce, LanePartialsAndCombineAreTheSplitOfTheSum) {
  test::Gen32 gen(99);
  std::mt19937& rng = gen.engine();
  const int n = 1000;
  const std::vector<float> x = seeded_values(rng, n, false);
  auto term = [&](int i, float& a, float& b) {
    a = x[i];
    b = x[i];
  };
  float p[32];
  for (int l = 0; l < 32; ++l) {
    float expected = 0.0f;  // lane l: chunks l, l + 32, ...
    for (int i = 0; i < n; ++i)
      if ((i / 8) % 32 == l) expected = std::fmaf(x[i], x[i], expected);
    p[l] = canonical_lane_partial(l, n, term);
    ASSERT_EQ(f32_bits(p[l]), f32_bits(expected)) << "lane " << l;
  }
  EXPECT_EQ(f32_bits(canonical_combine(p)), f32_bits(canonical_sum(n, term)));
}

TEST(CanonicalReduce, TreeSumIsTheFixedTreeOfSection6) {
  test::Gen32 gen(2026);
  std::mt19937& rng = gen.engine();
  int left_to_right_differs = 0, reversed_differs = 0;
  for (int n = 1; n <= 8; ++n) {
    for (int rep = 0; rep < 200; ++rep) {
      const std::vector<float> p = seeded_values(rng, n, rep % 2 == 0);
      std::vector<float> scratch = p;
      const float found = canonical_tree_sum(scratch.data(), n);
      const float expected = test::documented_tree(p);
      ASSERT_EQ(f32_bits(found), f32_bits(expected))
          << "n " << n << " rep " << rep << ": found " << found << ", expected " << expected;
      float ltr = p[0], rev = p[n - 1];
      for (int k = 1; k < n; ++k) ltr = ltr + p[k];
      for (int k = n - 2; k >= 0; --k) rev = rev + p[k];
      if (n >= 4 && f32_bits(ltr) != f32_bits(expected)) ++left_to_right_differs;
      if (n >= 4 && f32_bits(rev) != f32_bits(expected)) ++reversed_differs;
    }
  }
  // The inputs are order sensitive: another order differs somewhere, so the
  // equality above pins the tree.
  EXPECT_GT(left_to_right_differs, 20);
  EXPECT_GT(reversed_differs, 20);
}

TEST(CanonicalReduce, EmptySumIsPositiveZero) {
  const float s = canonical_sum(0, [](int, float& a, float& b) {
    a = 1.0f;
    b = 1.0f;
  });
  EXPECT_EQ(f32_bits(s), 0u);
}

}  // namespace
}  // namespace sparkdraft
