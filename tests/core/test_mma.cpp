// The tensor-core twin (core/mma.h): hand-computed cases of each rule, an
// independent model in fp64 over every probe family, the special values, the
// chain, and the device results recorded on an H200 (tests/fixtures/).
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "core/mma_fixture.h"
#include "core/mma_model.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/mma.h"
#include "sparkdraft/core/mma_probe.h"

namespace sparkdraft {
namespace {

bf16 bf(float x) { return to_bf16(x); }
uint32_t bits(float x) { return f32_bits(x); }

// One step with a[i] * b[i] given as parallel lists (the rest zero).
uint32_t step(float c, std::vector<float> a, std::vector<float> b) {
  bf16 va[16] = {}, vb[16] = {};
  for (size_t i = 0; i < a.size(); ++i) va[i] = bf(a[i]), vb[i] = bf(b[i]);
  return mma_step_bits(bits(c), va, vb);
}

TEST(MmaTwin, ExactSmallIntegerSums) {
  std::vector<float> a, b;
  for (int i = 1; i <= 16; ++i)
    a.push_back(static_cast<float>(i)), b.push_back(static_cast<float>(17 - i));
  float expect = 10.0f;
  for (int i = 1; i <= 16; ++i) expect += static_cast<float>(i * (17 - i));
  EXPECT_EQ(step(10.0f, a, b), bits(expect));
  EXPECT_EQ(step(0.0f, {}, {}), 0u);
}

TEST(MmaTwin, FinalResultTruncatesTowardZero) {
  // 1 + 1.5 ulp: round-to-nearest-even gives 1 + 2 ulp, the tensor core 1 + 1 ulp.
  EXPECT_EQ(step(1.0f, {std::ldexp(1.5f, -23)}, {1.0f}), 0x3f800001u);
  EXPECT_EQ(step(-1.0f, {std::ldexp(-1.5f, -23)}, {1.0f}), 0xbf800001u);
}

TEST(MmaTwin, EachTermTruncatesToTwentyFiveBitsBelowTheLargest) {
  // c = 2^24 sets E = 24, the grid 2^-1: eight products of 0.375 each truncate to
  // 0, where the exact sum 2^24 + 3 would truncate to 2^24 + 2.
  std::vector<float> a(8, 0.375f), b(8, 1.0f);
  EXPECT_EQ(step(16777216.0f, a, b), bits(16777216.0f));
  // Products of 0.5 are on the grid and survive: 2^24 + 4.
  std::vector<float> h(8, 0.5f);
  EXPECT_EQ(step(16777216.0f, h, b), bits(16777220.0f));
}

TEST(MmaTwin, ProductExponentIsTheSumOfTheInputExponents) {
  // (255/128)^2 has exponent 0 + 0 = 0 although its value lies in [2, 4): E = 0
  // and the grid is 2^-25, so 15 terms of 1.5 * 2^-25 keep 2^-25 each (with
  // E = 1 they would vanish). Sum: 65025/16384 + 15 * 2^-25, truncated.
  std::vector<float> a(16, std::ldexp(1.5f, -25)), b(16, 1.0f);
  a[0] = 255.0f / 128.0f, b[0] = 255.0f / 128.0f;
  const double exact = 65025.0 / 16384.0 + 15.0 * std::ldexp(1.0, -25);
  const float trunc = std::nextafter(static_cast<float>(exact), 0.0f);  // exact is not an fp32
  ASSERT_GT(static_cast<double>(static_cast<float>(exact)), exact);
  EXPECT_EQ(step(0.0f, a, b), bits(trunc));
}

TEST(MmaTwin, AZeroProductDoesNotSetTheExponent) {
  // 0 * 2^120 would count at exponent -6 under the published models and leave a
  // grid of 2^-31 (the other product truncated to 7 * 2^-31); the H200 ignores
  // zero products, so E = -30 and the product (65025/16384) * 2^-30 is exact.
  const float x = std::ldexp(255.0f / 128.0f, -15);
  EXPECT_EQ(step(0.0f, {0.0f, x}, {std::ldexp(1.0f, 120), x}),
            bits(std::ldexp(65025.0f / 16384.0f, -30)));
  EXPECT_EQ(step(0.0f, {-0.0f, x}, {std::ldexp(1.0f, 120), x}),
            bits(std::ldexp(65025.0f / 16384.0f, -30)));
}

TEST(MmaTwin, SpecialValues) {
  const float inf = INFINITY, nan = NAN;
  EXPECT_EQ(step(0.0f, {nan}, {1.0f}), kMmaNan);
  EXPECT_EQ(step(nan, {1.0f}, {1.0f}), kMmaNan);
  EXPECT_EQ(step(0.0f, {inf, 1.0f}, {1.0f, -inf}), kMmaNan);  // inf - inf
  EXPECT_EQ(step(0.0f, {inf}, {0.0f}), kMmaNan);              // 0 * inf
  EXPECT_EQ(step(-inf, {inf}, {1.0f}), kMmaNan);              // c = -inf, + inf
  EXPECT_EQ(step(1.0f, {inf}, {-2.0f}), 0xff800000u);
  EXPECT_EQ(step(inf, {3.0f}, {2.0f}), 0x7f800000u);
  // Finite terms past the fp32 range overflow to infinity; cancelling ones do not.
  EXPECT_EQ(step(0.0f, {1e38f, 1e38f}, {1e38f, 1e38f}), 0x7f800000u);
  EXPECT_EQ(step(0.0f, {1e38f, 1e38f}, {1e38f, -1e38f}), 0u);
}

TEST(MmaTwin, ZeroSumIsPositiveZero) {
  EXPECT_EQ(step(-0.0f, {-0.0f, 0.0f}, {1.0f, -1.0f}), 0u);
  EXPECT_EQ(step(-1.0f, {1.0f}, {1.0f}), 0u);
}

TEST(MmaTwin, SubnormalResultsAreKept) {
  // 2^-100 * 2^-45 = 2^-145 with c = 0: a subnormal fp32, kept.
  EXPECT_EQ(step(0.0f, {std::ldexp(1.0f, -100)}, {std::ldexp(1.0f, -45)}), 1u << 4);
  // A negative sum that truncates to zero is +0.
  EXPECT_EQ(step(0.0f, {-std::ldexp(1.0f, -100)}, {std::ldexp(1.0f, -51)}), 0u);
}

TEST(MmaTwin, TheAlignmentExponentStopsAtMinus133) {
  // c = 0, the largest product 2^-139 (E would be -139, grid 2^-164); the H200 stops
  // E at -133 (grid 2^-158). Fifteen products (128 + m) * 2^-159 with m odd lose
  // half a grid unit each on 2^-158: the sum in units of 2^-158 is 2^19 + 1023
  // (-> 1024 + 1.998 subnormal ulps of 2^-149, truncated: 1025); on the finer grid
  // it would be 2^19 + 1030.5 (-> 1026).
  auto pow2 = [](int e) { return std::ldexp(1.0f, e); };
  std::vector<float> a(16), b(16);
  a[0] = pow2(-100), b[0] = pow2(-39);
  for (int i = 1; i < 16; ++i) {
    const int m = i < 15 ? 9 : 15;  // q = (127 + m) / 2: 14 * 68 + 71 = 1023
    a[i] = (128.0f + m) / 128.0f * pow2(-100), b[i] = pow2(-52);
  }
  EXPECT_EQ(step(0.0f, a, b), 1025u);
}

bool has_special(const MmaCase& cs, int m, int n) {
  if ((cs.c[m][n] & 0x7f800000u) == 0x7f800000u) return true;
  for (int k = 0; k < 16; ++k)
    if ((cs.a[m][k].bits & 0x7f80u) == 0x7f80u || (cs.b[n][k].bits & 0x7f80u) == 0x7f80u)
      return true;
  return false;
}

TEST(MmaTwin, AgreesWithAnIndependentFp64ModelOnEveryFamily) {
  const uint64_t seed = 77;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  for (int d = 0; d < kMmaDistCount; ++d) {
    const MmaDist dist = static_cast<MmaDist>(d);
    int64_t checked = 0, bad = 0;
    for (int i = 0; i < 300; ++i) {
      MmaCase cs;
      make_mma_case(dist, seed, static_cast<uint64_t>(i), cs);
      uint32_t twin[16][8];
      mma_case_twin(cs, twin);
      for (int m = 0; m < 16; ++m)
        for (int n = 0; n < 8; ++n) {
          if (has_special(cs, m, n)) continue;
          ++checked;
          const uint32_t want = test::mma_step_f64(cs.c[m][n], cs.a[m], cs.b[n]);
          if (twin[m][n] != want && bad++ == 0) {
            ADD_FAILURE() << mma_dist_name(dist) << " case " << i << " d[" << m << "][" << n
                          << "]: twin 0x" << std::hex << twin[m][n] << ", fp64 model 0x" << want;
          }
        }
    }
    EXPECT_EQ(bad, 0) << mma_dist_name(dist) << ": " << bad << " of " << checked << " differ";
    if (dist != MmaDist::special) {
      EXPECT_GT(checked, 0) << mma_dist_name(dist);
    }
  }
}

TEST(MmaTwin, ChainIsStepsInIncreasingKWithZeroPadding) {
  std::vector<bf16> a(40), b(40);
  for (int k = 0; k < 40; ++k) a[k] = bf(std::sin(0.7f * k) * 3.0f), b[k] = bf(std::cos(1.3f * k));
  bf16 pa[16] = {}, pb[16] = {};
  uint32_t c = mma_step_bits(0u, a.data(), b.data());
  c = mma_step_bits(c, a.data() + 16, b.data() + 16);
  for (int k = 0; k < 8; ++k) pa[k] = a[32 + k], pb[k] = b[32 + k];
  c = mma_step_bits(c, pa, pb);
  EXPECT_EQ(f32_bits(mma_chain(a.data(), b.data(), 40)), c);
  // The order matters: the same products in another step order differ somewhere.
  bool any_diff = false;
  for (int s = 0; s < 50 && !any_diff; ++s) {
    for (int k = 0; k < 32; ++k)
      a[k] = bf(std::sin(0.37f * k + s) * std::ldexp(1.0f, (k * 7 + s) % 20 - 10)),
      b[k] = bf(std::cos(1.1f * k + s));
    const uint32_t fwd = f32_bits(mma_chain(a.data(), b.data(), 32));
    const uint32_t rev =
        mma_step_bits(mma_step_bits(0u, a.data() + 16, b.data() + 16), a.data(), b.data());
    any_diff = fwd != rev;
  }
  EXPECT_TRUE(any_diff)
      << "the chain's step order never mattered: the test cannot see an order change";
}

TEST(MmaTwin, MatchesTheDeviceResultsRecordedOnAnH200) {
  const std::string path = std::string(SPARKDRAFT_FIXTURE_DIR) + "/mma_h200.bin";
  const test::MmaFixture f = test::read_mma_fixture(path);
  ASSERT_GE(f.families, 12u) << path;
  ASSERT_LE(f.families, static_cast<uint32_t>(kMmaDistCount)) << path;
  ASSERT_GE(f.cases, 1u);
  std::printf("fixture %s: seed %llu, %u families x %u cases x 128 outputs\n", path.c_str(),
              static_cast<unsigned long long>(f.seed), f.families, f.cases);
  for (uint32_t d = 0; d < f.families; ++d) {
    const MmaDist dist = static_cast<MmaDist>(d);
    int64_t bad = 0;
    for (uint32_t i = 0; i < f.cases; ++i) {
      MmaCase cs;
      make_mma_case(dist, f.seed, i, cs);
      uint32_t twin[16][8];
      mma_case_twin(cs, twin);
      const uint32_t* dev = f.bits.data() + (static_cast<size_t>(d) * f.cases + i) * 128;
      for (int e = 0; e < 128; ++e)
        if (twin[e / 8][e % 8] != dev[e] && bad++ == 0) {
          ADD_FAILURE() << mma_dist_name(dist) << " case " << i << " d[" << e / 8 << "][" << e % 8
                        << "]: twin 0x" << std::hex << twin[e / 8][e % 8] << ", device 0x"
                        << dev[e];
        }
    }
    EXPECT_EQ(bad, 0) << mma_dist_name(dist) << ": " << bad << " of " << f.cases * 128
                      << " outputs differ";
  }
}

}  // namespace
}  // namespace sparkdraft
