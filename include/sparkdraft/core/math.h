// The contract's transcendental functions (contract.md section 3), host and device.
//
// Why: libm and CUDA's math library round differently, so every exp/log/tanh/
// sigmoid/silu/rsqrt the contract uses is ours. Each function is built only from
// IEEE basic operations (+ - * / sqrt, fma, float<->double conversion, all
// round-to-nearest-even) and integer bit manipulation; on the device each
// operation is an explicit __dadd_rn/__dmul_rn/... intrinsic, so nothing can be
// contracted or approximated there, and the host build uses -ffp-contract=off.
// The bits are therefore identical on host and device by construction.
//
//   log_f32(x)     natural log, CORRECTLY ROUNDED (to nearest even) for every
//                  fp32 x: a double evaluation (relative error < 2^-50) is kept
//                  when its whole error interval (+-2^-47 relative) rounds to one
//                  float; otherwise (16 of the 151M calls of the sampling domain)
//                  a double-double evaluation (relative error < 2^-85) decides.
//                  log(+-0) = -inf, log(x < 0) = NaN, log(+inf) = +inf.
//   log1p_f32(x)   log(1 + x), same method (1 + x formed exactly as a double-double),
//                  CORRECTLY ROUNDED for every fp32 x.
//                  log1p(-1) = -inf, log1p(x < -1) = NaN, log1p(+-0) = +-0.
//                  Verified exhaustively over the sampling domain by the tests
//                  (tests/core/test_math.cpp: log1p_f32(-u) for every u that
//                  core/philox.h philox_uniform can return, and log_f32 of
//                  -log1p_f32(-u)), and once over every fp32 input of both
//                  functions against logl/log1pl (libquadmath where those were
//                  too close to a midpoint to decide): no mismatch.
//   exp_f32(x)     float(exp(x)), exp evaluated in double (error < 2^-50).
//                  +inf past 88.72..., +0 below -103.97..., subnormals rounded once.
//   tanh_f32(x)    float(tanh(x)) in double: an odd Taylor series for |x| < 1/16
//                  (exact sign of zero, tanh(x) ~ x), else (1 - e)/(1 + e) with
//                  e = exp(-2|x|); exactly +-1 for |x| > 9.1.
//   sigmoid_f32(x) float(1 / (1 + exp(-x))) in double; +0 below -104, 1 above 40.
//   silu_f32(x)    float(x / (1 + exp(-x))) in double: x * sigmoid(x) rounded
//                  once (not x times the rounded sigmoid: that loses all relative
//                  accuracy where the sigmoid is subnormal). -0 below -120, x
//                  above 40 (so silu(+inf) = +inf, silu(-inf) = -0).
//   rsqrt_f32(x)   1.0f / sqrtf(x): IEEE fp32 square root, then IEEE fp32 division
//                  (two roundings; rsqrt(+0) = +inf, rsqrt(-0) = -inf, rsqrt(<0) = NaN).
// A NaN input comes back quieted with its sign and payload (integer ops, so
// the same bits on both sides); invalid inputs give the NaN 0x7fc00000.
//
// Measured error against long double references (tests/core/test_math.cpp:
// every 4099th bit pattern plus 1M values in each working range): exp_f32
// 0.49999995 ulp, tanh_f32 0.49999996, sigmoid_f32 0.49999999, silu_f32 0.5
// (x/2 ties at subnormal x), all asserted <= 0.5 + 2^-20; rsqrt_f32 1.49 ulp,
// asserted <= 1.5 (two roundings).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/hd.h"

#if defined(__CUDACC__)
#define SD_HD_NOINLINE __host__ __device__ __noinline__ inline
#else
#define SD_HD_NOINLINE inline
#endif

namespace sparkdraft {
namespace math_detail {

// ---- IEEE basic operations, explicit on the device -------------------------
SD_HD double dadd(double a, double b) {
#if SD_ON_DEVICE
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
SD_HD double dsub(double a, double b) {
#if SD_ON_DEVICE
  return __dsub_rn(a, b);
#else
  return a - b;
#endif
}
SD_HD double dmul(double a, double b) {
#if SD_ON_DEVICE
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
SD_HD double ddiv(double a, double b) {
#if SD_ON_DEVICE
  return __ddiv_rn(a, b);
#else
  return a / b;
#endif
}
SD_HD double dfma(double a, double b, double c) {
#if SD_ON_DEVICE
  return __fma_rn(a, b, c);
#else
  return std::fma(a, b, c);
#endif
}
SD_HD float to_float(double x) {
#if SD_ON_DEVICE
  return __double2float_rn(x);
#else
  return static_cast<float>(x);
#endif
}
SD_HD uint64_t f64_bits(double x) { return bit_cast_hd<uint64_t>(x); }
SD_HD double bits_f64(uint64_t u) { return bit_cast_hd<double>(u); }
SD_HD double dabs(double x) { return bits_f64(f64_bits(x) & 0x7fffffffffffffffull); }
SD_HD bool is_nan(float x) { return (f32_bits(x) & 0x7fffffffu) > 0x7f800000u; }
// NaN in, NaN out with integer ops: GPU float arithmetic would return the
// canonical NaN, the host's would keep the payload.
SD_HD float quiet(float nan) { return bits_f32(f32_bits(nan) | 0x00400000u); }
SD_HD float with_sign_of(float magnitude, float sign_source) {
  return bits_f32((f32_bits(magnitude) & 0x7fffffffu) | (f32_bits(sign_source) & 0x80000000u));
}
// 2^k as a double, k in [-1022, 1023].
SD_HD double pow2(int k) { return bits_f64(static_cast<uint64_t>(k + 1023) << 52); }

// c0 + z * (c1 + z * (c2 + ...)): Horner, one rounding per multiply and add.
SD_HD double poly(double, double c0) { return c0; }
template <class... Cs>
SD_HD double poly(double z, double c0, Cs... cs) {
  return dadd(c0, dmul(z, poly(z, cs...)));
}

// ---- constants (hex: exact doubles) ----------------------------------------
inline constexpr double kLn2Hi = 0x1.62e42fefa39efp-1;  // ln 2 = kLn2Hi + kLn2Lo (dd)
inline constexpr double kLn2Lo = 0x1.abc9e3b39803fp-56;
inline constexpr double kLn2Hi32 = 0x1.62e42ffp-1;          // 29 bits: k * kLn2Hi32 exact
inline constexpr double kLn2Lo32 = -0x1.718432a1b0e26p-35;  // ln 2 - kLn2Hi32
inline constexpr double kInvLn2 = 0x1.71547652b82fep+0;
inline constexpr double kSqrt2 = 0x1.6a09e667f3bcdp+0;
inline constexpr double kRoundShift = 0x1.8p52;  // (x + s) - s rounds x to an integer

// 1/(2k+1), the coefficients of atanh(s)/s = sum s^(2k) / (2k+1).
inline constexpr double kA1 = 0x1.5555555555555p-2, kA1lo = 0x1.5555555555555p-56;
inline constexpr double kA2 = 0x1.999999999999ap-3, kA2lo = -0x1.999999999999ap-57;
inline constexpr double kA3 = 0x1.2492492492492p-3, kA3lo = 0x1.2492492492492p-57;
inline constexpr double kA4 = 0x1.c71c71c71c71cp-4, kA4lo = 0x1.c71c71c71c71cp-58;
inline constexpr double kA5 = 0x1.745d1745d1746p-4, kA5lo = -0x1.745d1745d1746p-59;
inline constexpr double kA6 = 0x1.3b13b13b13b14p-4, kA6lo = -0x1.3b13b13b13b14p-58;
inline constexpr double kA7 = 0x1.1111111111111p-4;
inline constexpr double kA8 = 0x1.e1e1e1e1e1e1ep-5;
inline constexpr double kA9 = 0x1.af286bca1af28p-5;
inline constexpr double kA10 = 0x1.8618618618618p-5;
inline constexpr double kA11 = 0x1.642c8590b2164p-5;
inline constexpr double kA12 = 0x1.47ae147ae147bp-5;
inline constexpr double kA13 = 0x1.2f684bda12f68p-5;
inline constexpr double kA14 = 0x1.1a7b9611a7b96p-5;
inline constexpr double kA15 = 0x1.0842108421084p-5;

// ---- double-double (hi + lo, |lo| <= ulp(hi)/2) -----------------------------
struct dd {
  double hi, lo;
};
SD_HD dd two_sum(double a, double b) {
  const double s = dadd(a, b);
  const double bb = dsub(s, a);
  return dd{s, dadd(dsub(a, dsub(s, bb)), dsub(b, bb))};
}
SD_HD dd fast_two_sum(double a, double b) {  // |a| >= |b| (or a == 0)
  const double s = dadd(a, b);
  return dd{s, dsub(b, dsub(s, a))};
}
SD_HD dd two_prod(double a, double b) {
  const double p = dmul(a, b);
  return dd{p, dfma(a, b, -p)};
}
SD_HD dd dd_add(dd x, dd y) {
  dd s = two_sum(x.hi, y.hi);
  const dd t = two_sum(x.lo, y.lo);
  s = fast_two_sum(s.hi, dadd(s.lo, t.hi));
  return fast_two_sum(s.hi, dadd(s.lo, t.lo));
}
SD_HD dd dd_mul(dd x, dd y) {
  const dd p = two_prod(x.hi, y.hi);
  return fast_two_sum(p.hi, dadd(p.lo, dadd(dmul(x.hi, y.lo), dmul(x.lo, y.hi))));
}
SD_HD dd dd_div(dd x, dd y) {
  const double q1 = ddiv(x.hi, y.hi);
  const dd p1 = dd_mul(dd{q1, 0.0}, y);
  const dd r1 = dd_add(x, dd{-p1.hi, -p1.lo});
  const double q2 = ddiv(r1.hi, y.hi);
  const dd p2 = dd_mul(dd{q2, 0.0}, y);
  const dd r2 = dd_add(r1, dd{-p2.hi, -p2.lo});
  const double q3 = ddiv(r2.hi, y.hi);
  const dd q = fast_two_sum(q1, q2);
  return dd_add(q, dd{q3, 0.0});
}

// The float next to f in the direction of `up` (f finite).
SD_HD float float_step(float f, bool up) {
  const uint32_t b = f32_bits(f);
  if ((b & 0x7fffffffu) == 0) return bits_f32(up ? 0x00000001u : 0x80000001u);
  const bool away = ((b >> 31) == 0) == up;  // away from zero
  return bits_f32(away ? b + 1 : b - 1);
}

// hi + lo rounded once to the nearest float (ties to even). float(hi) is right
// unless hi is exactly the midpoint of two floats; then lo decides.
SD_HD float round_dd_to_float(dd x) {
  const float f = to_float(x.hi);
  const double fd = static_cast<double>(f);
  if (x.lo == 0.0 || fd == x.hi) return f;
  const bool up = x.hi > fd;
  const float n = float_step(f, up);
  if (dadd(fd, static_cast<double>(n)) != dmul(2.0, x.hi)) return f;
  return (x.lo > 0.0) == up ? n : f;
}

// Split y (positive normal double) into 2^e * m, m in [sqrt(1/2), sqrt(2)).
struct log_split {
  int e;
  double m;
};
SD_HD log_split split_log(double y) {
  const uint64_t b = f64_bits(y);
  int e = static_cast<int>((b >> 52) & 0x7ff) - 1023;
  double m = bits_f64((b & 0x000fffffffffffffull) | (uint64_t{1023} << 52));
  if (m >= kSqrt2) {
    m = dmul(m, 0.5);
    e += 1;
  }
  return log_split{e, m};
}

// log(yh + yl) in double-double, relative error < 2^-85. yh > 0 normal,
// |yl| <= ulp(yh)/2. log = e ln2 + log1p(F), F = m - 1 + yl/2^e (exact),
// log1p(F) = 2 atanh(s), s = F / (2 + F): 2 s sum_{k<=15} s^2k / (2k+1); the
// terms k >= 7 (< 2^-39 of the sum) in double, the rest in double-double.
SD_HD_NOINLINE dd log_dd(double yh, double yl) {
  const log_split sp = split_log(yh);
  const dd f = two_sum(dsub(sp.m, 1.0), dmul(yl, pow2(-sp.e)));
  const dd s = dd_div(f, dd_add(dd{2.0, 0.0}, f));
  const dd z = dd_mul(s, s);
  const double tail = poly(z.hi, kA7, kA8, kA9, kA10, kA11, kA12, kA13, kA14, kA15);
  dd p{tail, 0.0};
  p = dd_add(dd{kA6, kA6lo}, dd_mul(z, p));
  p = dd_add(dd{kA5, kA5lo}, dd_mul(z, p));
  p = dd_add(dd{kA4, kA4lo}, dd_mul(z, p));
  p = dd_add(dd{kA3, kA3lo}, dd_mul(z, p));
  p = dd_add(dd{kA2, kA2lo}, dd_mul(z, p));
  p = dd_add(dd{kA1, kA1lo}, dd_mul(z, p));
  p = dd_add(dd{1.0, 0.0}, dd_mul(z, p));
  const dd l = dd_mul(dd{dmul(2.0, s.hi), dmul(2.0, s.lo)}, p);
  const double ed = static_cast<double>(sp.e);
  dd eln2 = two_prod(ed, kLn2Hi);
  eln2 = fast_two_sum(eln2.hi, dadd(eln2.lo, dmul(ed, kLn2Lo)));
  return dd_add(eln2, l);
}

// log(yh + yl) rounded to float: the double path, kept when its error interval
// (2^-47 relative, 8x the analysed bound 2^-50) rounds to a single float.
SD_HD float log_round(double yh, double yl) {
  const log_split sp = split_log(yh);
  const double f = dadd(dsub(sp.m, 1.0), dmul(yl, pow2(-sp.e)));
  const double s = ddiv(f, dadd(2.0, f));
  const double z = dmul(s, s);
  const double p = poly(z, 1.0, kA1, kA2, kA3, kA4, kA5, kA6, kA7, kA8, kA9, kA10);
  const double l = dmul(dmul(2.0, s), p);
  const double ed = static_cast<double>(sp.e);
  const double r = dadd(dmul(ed, kLn2Hi32), dadd(dmul(ed, kLn2Lo32), l));
  const double err = dmul(dabs(r), 0x1p-47);
  const float lo = to_float(dsub(r, err)), hi = to_float(dadd(r, err));
  if (f32_bits(lo) == f32_bits(hi)) return lo;
  return round_dd_to_float(log_dd(yh, yl));
}

// exp(r) in double, relative error < 2^-50, for |r| <= 700.
SD_HD double exp_d(double r) {
  const double k = dsub(dadd(dmul(r, kInvLn2), kRoundShift), kRoundShift);
  const double t = dsub(dsub(r, dmul(k, kLn2Hi32)), dmul(k, kLn2Lo32));
  const double p = poly(t, 1.0, 1.0, 0x1p-1, 0x1.5555555555555p-3, 0x1.5555555555555p-5,
                        0x1.1111111111111p-7, 0x1.6c16c16c16c17p-10, 0x1.a01a01a01a01ap-13,
                        0x1.a01a01a01a01ap-16, 0x1.71de3a556c734p-19, 0x1.27e4fb7789f5cp-22,
                        0x1.ae64567f544e4p-26, 0x1.1eed8eff8d898p-29, 0x1.6124613a86d09p-33);
  return dmul(p, pow2(static_cast<int>(k)));
}

}  // namespace math_detail

// ---- fp32 basic operations, one IEEE rounding each, explicit on the device ---
// (the host compiles with -ffp-contract=off; std::fmaf is correctly rounded)

SD_HD float fdiv_rn(float a, float b) {
#if SD_ON_DEVICE
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
SD_HD float fsub_rn(float a, float b) {
#if SD_ON_DEVICE
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
SD_HD float fadd_rn(float a, float b) {
#if SD_ON_DEVICE
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
SD_HD float fmul_rn(float a, float b) {
#if SD_ON_DEVICE
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
// a * b + c rounded once (IEEE fusedMultiplyAdd; std::fmaf is correctly rounded).
SD_HD float ffma_rn(float a, float b, float c) {
#if SD_ON_DEVICE
  return __fmaf_rn(a, b, c);
#else
  return std::fmaf(a, b, c);
#endif
}

SD_HD float log_f32(float x) {
  using namespace math_detail;
  if (is_nan(x)) return quiet(x);
  if (x == 0.0f) return bits_f32(0xff800000u);  // -inf
  if (x < 0.0f) return bits_f32(0x7fc00000u);   // NaN
  if (f32_bits(x) == 0x7f800000u) return x;     // +inf
  return log_round(static_cast<double>(x), 0.0);
}

SD_HD float log1p_f32(float x) {
  using namespace math_detail;
  if (is_nan(x)) return quiet(x);
  if (x == 0.0f) return x;  // keeps the sign of zero
  if (x == -1.0f) return bits_f32(0xff800000u);
  if (x < -1.0f) return bits_f32(0x7fc00000u);
  if (f32_bits(x) == 0x7f800000u) return x;
  const dd y = two_sum(1.0, static_cast<double>(x));  // 1 + x exactly
  return log_round(y.hi, y.lo);
}

SD_HD float exp_f32(float x) {
  using namespace math_detail;
  if (is_nan(x)) return quiet(x);
  if (x > 89.0f) return bits_f32(0x7f800000u);
  if (x < -104.0f) return 0.0f;
  return to_float(exp_d(static_cast<double>(x)));
}

SD_HD float tanh_f32(float x) {
  using namespace math_detail;
  if (is_nan(x)) return quiet(x);
  const double a = dabs(static_cast<double>(x));
  float r;
  if (a > 9.1) {
    r = 1.0f;
  } else if (a < 0.0625) {
    const double t = dmul(a, a);
    const double p = poly(t, -0x1.5555555555555p-2, 0x1.1111111111111p-3, -0x1.ba1ba1ba1ba1cp-5,
                          0x1.664f4882c10fap-6, -0x1.226e355e6c23dp-7, 0x1.d6d3d0e157de0p-9,
                          -0x1.7da36452b75e3p-10);
    r = to_float(dadd(a, dmul(dmul(a, t), p)));
  } else {
    const double e = exp_d(-dmul(2.0, a));
    r = to_float(ddiv(dsub(1.0, e), dadd(1.0, e)));
  }
  return with_sign_of(r, x);
}

SD_HD float sigmoid_f32(float x) {
  using namespace math_detail;
  if (is_nan(x)) return quiet(x);
  if (x < -104.0f) return 0.0f;
  if (x > 40.0f) return 1.0f;
  return to_float(ddiv(1.0, dadd(1.0, exp_d(-static_cast<double>(x)))));
}

SD_HD float silu_f32(float x) {
  using namespace math_detail;
  if (is_nan(x)) return quiet(x);
  if (x < -120.0f) return -0.0f;
  if (x > 40.0f) return x;
  const double xd = static_cast<double>(x);
  return to_float(ddiv(xd, dadd(1.0, exp_d(-xd))));
}

SD_HD float rsqrt_f32(float x) {
  using namespace math_detail;
  if (is_nan(x)) return quiet(x);
  if (x < 0.0f) return bits_f32(0x7fc00000u);  // the NaN bits of sqrt(<0) differ
#if SD_ON_DEVICE
  return __fdiv_rn(1.0f, __fsqrt_rn(x));
#else
  return 1.0f / std::sqrt(x);
#endif
}

}  // namespace sparkdraft
