// core/bf16.h: the one fp32 -> bf16 rounding rule (round to nearest even, NaN
// kept and quieted, overflow to inf), on hand-picked patterns and exhaustively
// against a reference computed a different way (distances in double).
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sparkdraft/core/bf16.h"

namespace sparkdraft {
namespace {

uint16_t rne(uint32_t f32) { return to_bf16(bits_f32(f32)).bits; }

std::string hex32(uint32_t u) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", u);
  return buf;
}

// Reference for the 65536 patterns (h << 16) | low: pick the nearer of the two
// bf16 neighbours of |x| by comparing distances in double (exact: every value
// involved has < 53 significant bits). Above the largest finite bf16 the upper
// neighbour is 2^128, which stands for inf. NaNs: the canonical quiet NaN 0x7fc0.
void reference_block(uint32_t h, uint16_t* want) {
  const uint16_t sign = static_cast<uint16_t>(h & 0x8000u);
  const uint16_t below = static_cast<uint16_t>(h & 0x7fffu);  // |x| truncated toward zero
  if (below >= 0x7f80u) {
    for (uint32_t low = 0; low < 0x10000u; ++low)
      want[low] = static_cast<uint16_t>(below == 0x7f80u && low == 0 ? sign | 0x7f80u : 0x7fc0u);
    return;
  }
  const int exp_field = below >> 7;
  const int spacing_exp = (exp_field == 0 ? 1 : exp_field) - 127 - 7;  // 7 fraction bits
  const uint64_t spacing_bits = static_cast<uint64_t>(spacing_exp + 1023) << 52;
  double spacing;
  std::memcpy(&spacing, &spacing_bits, 8);
  const double lo = static_cast<double>(bits_f32(static_cast<uint32_t>(below) << 16));
  const double hi = lo + spacing;
  const bool odd = below & 1u;
  for (uint32_t low = 0; low < 0x10000u; ++low) {
    const double x = static_cast<double>(bits_f32((static_cast<uint32_t>(below) << 16) | low));
    const double d_lo = x - lo, d_hi = hi - x;
    const bool up = (d_hi < d_lo) | ((d_hi == d_lo) & odd);  // a tie goes to the even one
    want[low] = static_cast<uint16_t>(sign | (below + up));
  }
}

TEST(Bf16, TiesRoundToEvenBothDirections) {
  EXPECT_EQ(rne(0x3f808000u), 0x3f80u);  // 1 + 2^-8: tie, 0x3f80 even: down
  EXPECT_EQ(rne(0x3f818000u), 0x3f82u);  // tie between 0x3f81 and 0x3f82: up to even
  EXPECT_EQ(rne(0xbf808000u), 0xbf80u);
  EXPECT_EQ(rne(0xbf818000u), 0xbf82u);
  EXPECT_EQ(rne(0x3f808001u), 0x3f81u);  // just past the tie
  EXPECT_EQ(rne(0x3f807fffu), 0x3f80u);  // just before it
  EXPECT_EQ(rne(0x3f81ffffu), 0x3f82u);
  EXPECT_EQ(rne(0x3fffffffu), 0x4000u);  // carry into the exponent
  EXPECT_EQ(rne(0x40490fdbu), 0x4049u);  // pi
  EXPECT_EQ(rne(0x00000000u), 0x0000u);
  EXPECT_EQ(rne(0x80000000u), 0x8000u);
}

TEST(Bf16, EveryNanBecomesTheCanonicalQuietNan) {
  const uint32_t nans[] = {0x7f800001u, 0x7fc00000u, 0x7fffffffu, 0x7f80ffffu,
                           0xff800001u, 0xffc00000u, 0xffbfffffu, 0x7fbf0000u};
  for (uint32_t n : nans) {
    const bf16 b = to_bf16(bits_f32(n));
    EXPECT_TRUE(bf16_is_nan(b)) << hex32(n);
    EXPECT_EQ(b.bits, 0x7fc0u) << hex32(n);
  }
  EXPECT_EQ(rne(0x7f800001u), 0x7fc0u);  // would truncate to inf without the NaN rule
  EXPECT_EQ(rne(0xff800001u), 0x7fc0u);  // sign and payload dropped: see core/bf16.h
  EXPECT_FALSE(bf16_is_nan(bf16{0x7f80u}));
  EXPECT_TRUE(bf16_is_nan(bf16{0x7f81u}));
  EXPECT_TRUE(std::isnan(round_bf16(bits_f32(0x7f800001u))));
}

TEST(Bf16, InfinityAndOverflow) {
  EXPECT_EQ(rne(0x7f800000u), 0x7f80u);
  EXPECT_EQ(rne(0xff800000u), 0xff80u);
  EXPECT_EQ(rne(0x7f7f7fffu), 0x7f7fu);  // 0x1.fefffep127: still the largest finite bf16
  EXPECT_EQ(rne(0x7f7f8000u), 0x7f80u);  // the tie past it rounds to even = inf
  EXPECT_EQ(rne(0x7f7fffffu), 0x7f80u);  // FLT_MAX -> inf
  EXPECT_EQ(rne(0xff7f8000u), 0xff80u);
  EXPECT_EQ(rne(0xff7f7fffu), 0xff7fu);
}

TEST(Bf16, Subnormals) {
  EXPECT_EQ(rne(0x00000001u), 0x0000u);  // far below half the smallest bf16 subnormal
  EXPECT_EQ(rne(0x00008000u), 0x0000u);  // tie with 0x0000/0x0001: even is 0
  EXPECT_EQ(rne(0x00008001u), 0x0001u);
  EXPECT_EQ(rne(0x00018000u), 0x0002u);  // tie, up to even
  EXPECT_EQ(rne(0x007f8000u), 0x0080u);  // tie between 0x007f and 0x0080 (min normal)
  EXPECT_EQ(rne(0x007fffffu), 0x0080u);  // largest fp32 subnormal -> min normal bf16
  EXPECT_EQ(rne(0x80008001u), 0x8001u);
  EXPECT_EQ(rne(0x80000001u), 0x8000u);  // -tiny keeps its sign
}

TEST(Bf16, WideningIsExactForEveryPattern) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const bf16 h{static_cast<uint16_t>(b)};
    ASSERT_EQ(f32_bits(to_f32(h)), b << 16) << b;
    if (!bf16_is_nan(h)) {
      ASSERT_EQ(to_bf16(to_f32(h)).bits, b) << "round trip of " << b;
    }
  }
}

TEST(Bf16, ExhaustiveAgainstReference) {
  std::mutex mu;
  uint64_t bad = 0;
  std::vector<std::string> first;
  const auto start = std::chrono::steady_clock::now();
  auto run = [&](uint32_t h_begin, uint32_t h_end) {
    std::vector<uint16_t> want(0x10000), got(0x10000);
    uint64_t local_bad = 0;
    for (uint32_t h = h_begin; h < h_end; ++h) {
      reference_block(h, want.data());
      for (uint32_t low = 0; low < 0x10000u; ++low) got[low] = rne((h << 16) | low);
      if (std::memcmp(want.data(), got.data(), 0x20000) == 0) continue;
      for (uint32_t low = 0; low < 0x10000u; ++low) {
        if (got[low] == want[low]) continue;
        ++local_bad;
        std::lock_guard<std::mutex> lock(mu);
        if (first.size() < 10)
          first.push_back(hex32((h << 16) | low) + ": got " + hex32(got[low]) + ", expected " +
                          hex32(want[low]));
      }
    }
    std::lock_guard<std::mutex> lock(mu);
    bad += local_bad;
  };
  std::thread other(run, 0u, 0x8000u);
  run(0x8000u, 0x10000u);
  other.join();
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ bf16 exhaustive ] 2^32 patterns in %.1f s (2 threads)\n", secs);
  std::string report;
  for (const auto& s : first) report += "\n  " + s;
  EXPECT_EQ(bad, 0u) << bad << " patterns differ:" << report;
}

}  // namespace
}  // namespace sparkdraft
