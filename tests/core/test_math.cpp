// core/math.h against long double references: log_f32 and log1p_f32 exhaustively
// over every input the sampling recipe feeds them (correct rounding is the
// contract there), special values of every function, and ulp sweeps of the rest.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <mutex>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/random.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/core/philox.h"

namespace sparkdraft {
namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::string hex(float x) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%a (0x%08x)", static_cast<double>(x), f32_bits(x));
  return buf;
}

// A long double reference rounded to float; `ambiguous` when it lies so close to
// a midpoint of two floats that the reference's own error (a few long double
// ulps) could flip the rounding.
struct ref_f32 {
  float value;
  bool ambiguous;
};
ref_f32 round_ref(long double r) {
  const float f = static_cast<float>(r);
  if (!std::isfinite(f) || r == static_cast<long double>(f)) return {f, false};
  const float n = std::nextafter(f, r > f ? kInf : -kInf);
  const long double mid = (static_cast<long double>(f) + static_cast<long double>(n)) / 2;
  return {f, std::fabs(r - mid) <= std::fabs(r) * 0x1p-60L};
}

// The distinct float(x), x in [0, 2^31) (philox_uniform's x): the integers up to
// 2^24, then every float in (2^24, 2^31].
constexpr int64_t kDomainSize = (int64_t{1} << 24) + 1 + 7 * (int64_t{1} << 23);
float domain_value(int64_t i) {
  if (i <= (int64_t{1} << 24)) return static_cast<float>(i);
  return bits_f32(f32_bits(16777216.0f) + static_cast<uint32_t>(i - (int64_t{1} << 24)));
}
float domain_u(int64_t i) {  // the contract.md section 4 formula
  const float u = domain_value(i) * kUniformScale;
  return u < kUniformScale ? kUniformScale : u;
}

struct mismatch_log {
  std::mutex mu;
  int64_t count = 0;
  int64_t ambiguous = 0;
  std::vector<std::string> first;
  void add(const std::string& what) {
    std::lock_guard<std::mutex> lock(mu);
    ++count;
    if (first.size() < 10) first.push_back(what);
  }
  std::string report() const {
    std::ostringstream os;
    for (const auto& s : first) os << "\n  " << s;
    return os.str();
  }
};

void check_cr(const char* fn, float x, float got, long double exact, mismatch_log& log,
              int64_t& ambiguous) {
  const ref_f32 ref = round_ref(exact);
  if (ref.ambiguous) {
    ++ambiguous;
    return;
  }
  if (f32_bits(got) != f32_bits(ref.value))
    log.add(std::string(fn) + "(" + hex(x) + ") = " + hex(got) + ", expected " + hex(ref.value));
}

template <class Body>
void parallel_for(int64_t n, int threads, Body body) {
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([=] { body(n * t / threads, n * (t + 1) / threads); });
  for (auto& th : pool) th.join();
}

TEST(MathExhaustive, LogAndLog1pCorrectlyRoundedOverTheSamplingDomain) {
  ASSERT_EQ(domain_value(kDomainSize - 1), 2147483648.0f);
  ASSERT_EQ(domain_value(int64_t{1} << 24), 16777216.0f);
  ASSERT_EQ(domain_value((int64_t{1} << 24) + 1), 16777218.0f);
  mismatch_log bad;
  const auto start = std::chrono::steady_clock::now();
  parallel_for(kDomainSize, 2, [&](int64_t begin, int64_t end) {
    int64_t ambiguous = 0;
    for (int64_t i = begin; i < end; ++i) {
      const float u = domain_u(i);
      const float l1 = log1p_f32(-u);
      check_cr("log1p_f32", -u, l1, std::log1p(-static_cast<long double>(u)), bad, ambiguous);
      const float t = -l1;
      check_cr("log_f32", t, log_f32(t), std::log(static_cast<long double>(t)), bad, ambiguous);
    }
    std::lock_guard<std::mutex> lock(bad.mu);
    bad.ambiguous += ambiguous;
  });
  const double secs =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("[ sampling domain ] %lld u values, log1p + log each, %.1f s (2 threads)\n",
              static_cast<long long>(kDomainSize), secs);
  EXPECT_EQ(bad.ambiguous, 0) << "the long double reference cannot decide these";
  EXPECT_EQ(bad.count, 0) << bad.count << " results not correctly rounded:" << bad.report();
}

// Runs body(rng, check) on a Gen32 of `seed` (named in any failure); check(fn, x,
// got, exact) records got unless it is exact correctly rounded. Expects no
// mismatch and no reference too close to a midpoint to decide.
template <class Body>
void expect_correctly_rounded(uint32_t seed, Body body) {
  test::Gen32 gen(seed);
  mismatch_log bad;
  int64_t ambiguous = 0;
  body(gen.engine(), [&](const char* fn, float x, float got, long double exact) {
    check_cr(fn, x, got, exact, bad, ambiguous);
  });
  EXPECT_EQ(ambiguous, 0);
  EXPECT_EQ(bad.count, 0) << bad.report();
}

// Correct rounding beyond the sampling domain: seeded random bit patterns of
// every exponent, and the double-double fallback on its own.
TEST(MathLog, CorrectlyRoundedOnRandomInputs) {
  expect_correctly_rounded(20240611, [](std::mt19937& rng, auto check) {
    for (int i = 0; i < 2000000; ++i) {
      const float x = bits_f32(rng() & 0x7fffffffu);  // positive, every exponent
      if (!std::isfinite(x) || x == 0.0f) continue;
      check("log_f32", x, log_f32(x), std::log(static_cast<long double>(x)));
      const float y = bits_f32(rng());  // both signs; log1p needs y > -1
      if (!std::isfinite(y) || y <= -1.0f || y == 0.0f) continue;
      check("log1p_f32", y, log1p_f32(y), std::log1p(static_cast<long double>(y)));
    }
    // Around 1 (log's cancellation zone) and around 0 for log1p, densely.
    for (uint32_t k = 0; k < 400000; ++k) {
      const float above = bits_f32(f32_bits(1.0f) + k), below = bits_f32(f32_bits(1.0f) - k);
      check("log_f32", above, log_f32(above), std::log(static_cast<long double>(above)));
      check("log_f32", below, log_f32(below), std::log(static_cast<long double>(below)));
    }
  });
}

TEST(MathLog, DoubleDoubleFallbackIsCorrectlyRoundedOnItsOwn) {
  expect_correctly_rounded(77, [](std::mt19937& rng, auto check) {
    for (int i = 0; i < 300000; ++i) {
      const float x = bits_f32((rng() & 0x7fffffffu) % 0x7f800000u);
      if (x == 0.0f) continue;
      const float got = math_detail::round_dd_to_float(math_detail::log_dd(x, 0.0));
      check("log_dd", x, got, std::log(static_cast<long double>(x)));
      const float y = bits_f32(rng());
      if (!std::isfinite(y) || y <= -1.0f) continue;
      const math_detail::dd one_plus = math_detail::two_sum(1.0, y);
      const float got1 =
          math_detail::round_dd_to_float(math_detail::log_dd(one_plus.hi, one_plus.lo));
      check("log1p_dd", y, got1, std::log1p(static_cast<long double>(y)));
    }
  });
}

TEST(MathDetail, RoundDoubleDoubleToFloatBreaksMidpointsWithTheLowPart) {
  using math_detail::dd;
  using math_detail::round_dd_to_float;
  const double one = 1.0, half_ulp = 0x1p-24;                   // midpoint of 1 and 1 + 2^-23
  EXPECT_EQ(round_dd_to_float(dd{one + half_ulp, 0.0}), 1.0f);  // tie: even
  EXPECT_EQ(round_dd_to_float(dd{one + half_ulp, 0x1p-80}), bits_f32(0x3f800001u));
  EXPECT_EQ(round_dd_to_float(dd{one + half_ulp, -0x1p-80}), 1.0f);
  const double odd_mid = 1.0 + 3 * half_ulp;  // between 1+2^-23 (odd) and 1+2^-22
  EXPECT_EQ(round_dd_to_float(dd{odd_mid, 0.0}), bits_f32(0x3f800002u));
  EXPECT_EQ(round_dd_to_float(dd{odd_mid, -0x1p-80}), bits_f32(0x3f800001u));
  EXPECT_EQ(round_dd_to_float(dd{-odd_mid, 0x1p-80}), bits_f32(0xbf800001u));
  EXPECT_EQ(round_dd_to_float(dd{-(one + half_ulp), -0x1p-80}), bits_f32(0xbf800001u));
}

void expect_bits(float got, float expected, const char* what) {
  EXPECT_EQ(f32_bits(got), f32_bits(expected))
      << what << ": got " << hex(got) << ", expected " << hex(expected);
}
void expect_nan(float got, const char* what) {
  EXPECT_TRUE(got != got) << what << ": got " << hex(got);
}

TEST(MathSpecial, LogAndLog1p) {
  const float nan_payload = bits_f32(0xff812345u);  // signaling, negative
  expect_bits(log_f32(0.0f), -kInf, "log(+0)");
  expect_bits(log_f32(-0.0f), -kInf, "log(-0)");
  expect_bits(log_f32(1.0f), 0.0f, "log(1)");
  expect_bits(log_f32(kInf), kInf, "log(inf)");
  expect_nan(log_f32(-1.0f), "log(-1)");
  expect_nan(log_f32(-kInf), "log(-inf)");
  expect_nan(log_f32(-bits_f32(1u)), "log(-denorm)");
  expect_bits(log_f32(nan_payload), bits_f32(0xffc12345u),
              "log(sNaN) quiet, sign and payload kept");
  expect_bits(log_f32(bits_f32(1u)),
              static_cast<float>(std::log(static_cast<long double>(bits_f32(1u)))),
              "log(denorm min)");
  expect_bits(
      log_f32(std::numeric_limits<float>::max()),
      static_cast<float>(std::log(static_cast<long double>(std::numeric_limits<float>::max()))),
      "log(FLT_MAX)");
  expect_bits(log_f32(2.0f), 0x1.62e43p-1f, "log(2)");

  expect_bits(log1p_f32(-1.0f), -kInf, "log1p(-1)");
  expect_bits(log1p_f32(0.0f), 0.0f, "log1p(+0)");
  expect_bits(log1p_f32(-0.0f), -0.0f, "log1p(-0)");
  expect_bits(log1p_f32(kInf), kInf, "log1p(inf)");
  expect_nan(log1p_f32(-2.0f), "log1p(-2)");
  expect_nan(log1p_f32(std::nextafter(-1.0f, -2.0f)), "log1p(-1 - ulp)");
  expect_nan(log1p_f32(-kInf), "log1p(-inf)");
  expect_bits(log1p_f32(nan_payload), bits_f32(0xffc12345u), "log1p(sNaN)");
  expect_bits(log1p_f32(bits_f32(1u)), bits_f32(1u), "log1p(denorm min)");
  expect_bits(log1p_f32(-bits_f32(1u)), -bits_f32(1u), "log1p(-denorm min)");
  expect_bits(log1p_f32(1e-30f), 1e-30f, "log1p(1e-30)");
  // The ends of the sampling domain: the smallest u and the largest.
  expect_bits(log1p_f32(-kUniformScale),
              static_cast<float>(std::log1p(-static_cast<long double>(kUniformScale))),
              "log1p(-min u)");
  expect_bits(log1p_f32(-0x1.fffffep-1f), static_cast<float>(std::log1p(-0x1.fffffep-1L)),
              "log1p(-max u)");
}

float ref_exp(float x) { return static_cast<float>(std::exp(static_cast<long double>(x))); }

TEST(MathSpecial, ExpTanhSigmoidSiluRsqrt) {
  const float nan_payload = bits_f32(0x7f800123u);
  const float quieted = bits_f32(0x7fc00123u);
  const float max_f = std::numeric_limits<float>::max();

  expect_bits(exp_f32(0.0f), 1.0f, "exp(0)");
  expect_bits(exp_f32(-0.0f), 1.0f, "exp(-0)");
  expect_bits(exp_f32(kInf), kInf, "exp(inf)");
  expect_bits(exp_f32(-kInf), 0.0f, "exp(-inf)");
  expect_bits(exp_f32(nan_payload), quieted, "exp(NaN)");
  expect_bits(exp_f32(88.72283f), ref_exp(88.72283f), "exp below overflow");
  expect_bits(exp_f32(88.72284f), kInf, "exp overflows");
  expect_bits(exp_f32(-103.9720f), bits_f32(1u), "exp to denorm min");
  expect_bits(exp_f32(-103.9730f), 0.0f, "exp underflows to +0");
  expect_bits(exp_f32(-120.0f), 0.0f, "exp(-120)");
  expect_bits(exp_f32(max_f), kInf, "exp(FLT_MAX)");

  expect_bits(tanh_f32(0.0f), 0.0f, "tanh(+0)");
  expect_bits(tanh_f32(-0.0f), -0.0f, "tanh(-0)");
  expect_bits(tanh_f32(kInf), 1.0f, "tanh(inf)");
  expect_bits(tanh_f32(-kInf), -1.0f, "tanh(-inf)");
  expect_bits(tanh_f32(9.2f), 1.0f, "tanh(9.2)");
  expect_bits(tanh_f32(-max_f), -1.0f, "tanh(-FLT_MAX)");
  expect_bits(tanh_f32(bits_f32(1u)), bits_f32(1u), "tanh(denorm min)");
  expect_bits(tanh_f32(1e-20f), 1e-20f, "tanh(1e-20)");
  expect_bits(tanh_f32(nan_payload), quieted, "tanh(NaN)");

  expect_bits(sigmoid_f32(0.0f), 0.5f, "sigmoid(0)");
  expect_bits(sigmoid_f32(kInf), 1.0f, "sigmoid(inf)");
  expect_bits(sigmoid_f32(-kInf), 0.0f, "sigmoid(-inf)");
  expect_bits(sigmoid_f32(-103.0f), static_cast<float>(1.0L / (1.0L + std::exp(103.0L))),
              "sigmoid(-103) subnormal");
  expect_bits(sigmoid_f32(-105.0f), 0.0f, "sigmoid(-105)");
  expect_bits(sigmoid_f32(17.0f), static_cast<float>(1.0L / (1.0L + std::exp(-17.0L))),
              "sigmoid(17)");
  expect_bits(sigmoid_f32(20.0f), 1.0f, "sigmoid(20)");
  expect_bits(sigmoid_f32(nan_payload), quieted, "sigmoid(NaN)");

  expect_bits(silu_f32(0.0f), 0.0f, "silu(+0)");
  expect_bits(silu_f32(-0.0f), -0.0f, "silu(-0)");
  expect_bits(silu_f32(kInf), kInf, "silu(inf)");
  expect_bits(silu_f32(-kInf), -0.0f, "silu(-inf)");
  expect_bits(silu_f32(max_f), max_f, "silu(FLT_MAX)");
  expect_bits(silu_f32(-100.0f), static_cast<float>(-100.0L / (1.0L + std::exp(100.0L))),
              "silu(-100) subnormal, rounded once");
  expect_bits(silu_f32(-130.0f), -0.0f, "silu(-130)");
  expect_bits(silu_f32(nan_payload), quieted, "silu(NaN)");

  expect_bits(rsqrt_f32(4.0f), 0.5f, "rsqrt(4)");
  expect_bits(rsqrt_f32(0.0f), kInf, "rsqrt(+0)");
  expect_bits(rsqrt_f32(-0.0f), -kInf, "rsqrt(-0)");
  expect_bits(rsqrt_f32(kInf), 0.0f, "rsqrt(inf)");
  expect_bits(rsqrt_f32(-1.0f), bits_f32(0x7fc00000u), "rsqrt(-1)");
  expect_bits(rsqrt_f32(nan_payload), quieted, "rsqrt(NaN)");
  expect_bits(rsqrt_f32(2.0f), 1.0f / std::sqrt(2.0f), "rsqrt(2)");
}

// Error of `got` in units of the float spacing at the exact value; the exact
// value overflowing or underflowing float is checked through its rounding.
double ulp_error(float got, long double exact) {
  const float rounded = static_cast<float>(exact);
  if (std::isinf(rounded) || rounded == 0.0f)
    return f32_bits(got) == f32_bits(rounded) || (rounded == 0.0f && got == 0.0f) ? 0.0 : 1e9;
  if (!std::isfinite(got)) return 1e9;
  const long double a = std::fabs(exact);
  const int e = a < 0x1p-126L ? -126 : std::ilogb(a);
  return static_cast<double>(std::fabs(static_cast<long double>(got) - exact) /
                             std::ldexp(1.0L, e - 23));
}

struct sweep_result {
  double max_ulp = 0.0;
  float worst_x = 0.0f;
  int64_t count = 0;
};

template <class F, class R>
sweep_result sweep(F f, R ref, float lo, float hi, uint32_t seed) {
  sweep_result res;
  auto visit = [&](float x) {
    if (!std::isfinite(x)) return;
    const long double exact = ref(static_cast<long double>(x));
    const float got = f(x);
    if (std::isnan(exact)) {  // outside the domain: NaN expected
      EXPECT_TRUE(got != got) << hex(x) << " gave " << hex(got);
      return;
    }
    const double err = ulp_error(got, exact);
    ++res.count;
    if (err > res.max_ulp) {
      res.max_ulp = err;
      res.worst_x = x;
    }
  };
  for (uint64_t b = 0; b < (uint64_t{1} << 32); b += 4099)
    visit(bits_f32(static_cast<uint32_t>(b)));
  test::Gen32 gen(seed);
  std::mt19937& rng = gen.engine();
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int i = 0; i < 1000000; ++i) visit(dist(rng));
  return res;
}

void expect_sweep(const char* fn, const sweep_result& r, double bound) {
  std::printf("[ ulp sweep ] %-11s max %.9f ulp at %a over %lld inputs (bound %.9f)\n", fn,
              r.max_ulp, static_cast<double>(r.worst_x), static_cast<long long>(r.count), bound);
  EXPECT_LE(r.max_ulp, bound) << fn << " worst at " << hex(r.worst_x);
}

// Every 4099th bit pattern (all exponents, both signs) plus 1M seeded values in
// each function's working range. Bounds: the double evaluations round once
// (0.5 ulp plus a hair); rsqrt rounds twice.
TEST(MathSweep, UlpErrorAgainstLongDouble) {
  constexpr double kOnce = 0.5 + 0x1p-20;
  expect_sweep("exp_f32",
               sweep(
                   exp_f32, [](long double x) { return std::exp(x); }, -105, 90, 1),
               kOnce);
  expect_sweep("tanh_f32",
               sweep(
                   tanh_f32, [](long double x) { return std::tanh(x); }, -10, 10, 2),
               kOnce);
  expect_sweep(
      "sigmoid_f32",
      sweep(
          sigmoid_f32, [](long double x) { return 1.0L / (1.0L + std::exp(-x)); }, -110, 30, 3),
      kOnce);
  expect_sweep("silu_f32",
               sweep(
                   silu_f32, [](long double x) { return x / (1.0L + std::exp(-x)); }, -125, 50, 4),
               kOnce);
  expect_sweep("rsqrt_f32",
               sweep(
                   rsqrt_f32, [](long double x) { return 1.0L / std::sqrt(x); }, 0, 100, 5),
               1.5);
}

TEST(MathSweep, TanhIsOddAndSigmoidSiluAreConsistent) {
  for (uint64_t b = 0; b < 0x80000000u; b += 127) {
    const float x = bits_f32(static_cast<uint32_t>(b));
    ASSERT_EQ(f32_bits(tanh_f32(-x)), f32_bits(tanh_f32(x)) ^ 0x80000000u) << hex(x);
    if (x != x) continue;
    const float s = sigmoid_f32(x), t = sigmoid_f32(-x);
    ASSERT_TRUE(s >= 0.5f && s <= 1.0f && t >= 0.0f && t <= 0.5f) << hex(x);
    if (std::isfinite(x)) {
      ASSERT_LE(std::fabs(silu_f32(x)), std::fabs(x)) << hex(x);
    }
  }
}

}  // namespace
}  // namespace sparkdraft
