// Faster device forms of core/math.h's exp_f32, silu_f32, sigmoid_f32 and tanh_f32 with the SAME
// bits for every float input (checked on the device over all 2^32 bit patterns:
// cuda::fast_math_mismatches, CudaFastMath.* tests). Each computes its double result by a
// shorter route (a degree-10 Taylor polynomial, a reciprocal refined by Newton steps),
// rounds it to float, and hands the input to the function itself (out of line) where that
// double lies within kFastTol = 2^14 double ulps of a float rounding boundary (2^-39
// relative at the least, against < 2^-40.8 for its error plus the reference's) or where
// the result is not a normal float.
#pragma once

#include <cstdint>

#include "sparkdraft/core/math.h"

#include "cuda/common/common.cuh"

namespace sparkdraft::cuda {

inline constexpr uint32_t kFastTol = 1u << 14;

// Whether the double whose low word is `lo` lies within `tol` ulps of a float rounding
// boundary (the low 29 mantissa bits near 2^28; a normal float result).
__device__ __forceinline__ bool near_float_boundary(uint32_t lo, uint32_t tol = kFastTol) {
  return ((lo - 0x10000000u + tol) & 0x1fffffffu) < 2 * tol;
}

// The fast form of a function: try's float where it is ok, else slow(x), the function
// itself (out of line: the rare path stays a branch, not predicated code).
template <float (*Try)(float, bool*), float (*Slow)(float)>
__device__ __forceinline__ float fast_or_slow(float x) {
  bool ok;
  float f = Try(x, &ok);
  if (!ok) f = Slow(x);
  return f;
}

// fast_or_slow on N values: every try first (straight-line code, so that their FP64 chains
// overlap; a branch after each try cuts them into regions the scheduler does not mix, ncu
// 2026-12-07d run 1), then, under one branch, slow(x) for the values not trusted only (slow
// for all N where one was not trusted made the warps that met one late at the next barrier,
// ncu 2026-12-07d run 5). Attention keeps its own all-slow form: this per-value form was
// slower there (gpu-log 2026-12-07c run 4).
template <float (*Try)(float, bool*), float (*Slow)(float), int N>
__device__ __forceinline__ void fast_or_slow_n(const float (&x)[N], float (&y)[N]) {
  bool ok[N], all_ok = true;
#pragma unroll
  for (int i = 0; i < N; ++i) {
    y[i] = Try(x[i], &ok[i]);
    all_ok = all_ok && ok[i];
  }
  if (!all_ok) {
#pragma unroll
    for (int i = 0; i < N; ++i)
      if (!ok[i]) y[i] = Slow(x[i]);
  }
}

// exp(xd) ~ p 2^k: k = round(xd / ln2) by the shift trick, r = xd - k ln2 (two fma steps,
// exact first: k ln2_hi has 29 + 8 bits), p the degree-10 Taylor polynomial of exp(r) by
// fma Horner (|r| <= 0.347: truncation below 2^-41 relative). For |xd| < 700.
struct ExpParts {
  double p;
  int k;
};
// exp(xd) = 2^k (1 + r q): the reduction and the polynomial before its last step.
struct ExpQ {
  double q, r;
  int k;
};
__device__ __forceinline__ ExpQ exp_taylor_q(double xd) {
  using namespace math_detail;
  const double sh = __fma_rn(xd, kInvLn2, kRoundShift);
  const int k = __double2loint(sh);  // round(xd / ln2)
  const double kd = __dsub_rn(sh, kRoundShift);
  double r = __fma_rn(kd, -kLn2Hi32, xd);
  r = __fma_rn(kd, -kLn2Lo32, r);
  double p = 0x1.27e4fb7789f5cp-22;  // 1/10!
  p = __fma_rn(p, r, 0x1.71de3a556c734p-19);
  p = __fma_rn(p, r, 0x1.a01a01a01a01ap-16);
  p = __fma_rn(p, r, 0x1.a01a01a01a01ap-13);
  p = __fma_rn(p, r, 0x1.6c16c16c16c17p-10);
  p = __fma_rn(p, r, 0x1.1111111111111p-7);
  p = __fma_rn(p, r, 0x1.5555555555555p-5);
  p = __fma_rn(p, r, 0x1.5555555555555p-3);
  p = __fma_rn(p, r, 0x1.0p-1);
  p = __fma_rn(p, r, 1.0);
  return {p, r, k};
}
__device__ __forceinline__ ExpParts exp_taylor(double xd) {
  const ExpQ e = exp_taylor_q(xd);
  return {__fma_rn(e.q, e.r, 1.0), e.k};
}
// p 2^k on the exponent bits (p 2^k a normal double).
__device__ __forceinline__ double scale_2k(double p, int k) {
  return __hiloint2double(__double2hiint(p) + k * (1 << 20), __double2loint(p));
}

// exp_f32 without branches (the same bits): the core runs on a clamped argument and
// the special cases are selected afterwards, so that a lane's exps overlap.
__device__ __forceinline__ float exp_nb(float x) {
  const bool nan = (f32_bits(x) & 0x7fffffffu) > 0x7f800000u;
  const bool big = x > 89.0f, small = x < -104.0f;
  const float xc = nan || big || small ? 0.0f : x;
  const float r = math_detail::to_float(math_detail::exp_d(static_cast<double>(xc)));
  return nan ? math_detail::quiet(x) : big ? bits_f32(0x7f800000u) : small ? 0.0f : r;
}

// exp_nb out of line (fast_or_slow).
__device__ __noinline__ inline float exp_slow(float x) { return exp_nb(x); }

// exp_f32 at about half the cost. For x in [-87, 88] (exp(x) a normal float) exp_taylor's
// p 2^k rounded to float, ok false near a boundary and outside [-87, 88] (NaN, infinities,
// subnormal results): there exp_f32 itself (exp_slow) decides. Measured: 17072 of the
// ~1.1e9 floats in [-87, 0] take that path.
__device__ __forceinline__ float exp_fast_try(float x, bool* ok) {
  const ExpParts e = exp_taylor(static_cast<double>(x));
  const uint32_t lo = static_cast<uint32_t>(__double2loint(e.p));  // scaling keeps it
  *ok = !near_float_boundary(lo) && x >= -87.0f && x <= 88.0f;
  return __double2float_rn(scale_2k(e.p, e.k));
}
__device__ __forceinline__ float exp_fast(float x) {
  return fast_or_slow<exp_fast_try, exp_slow>(x);
}

// 1 / d for d >= 1: rcp.approx, then Newton steps r += r (1 - d r), each squaring the
// relative error (two of them here; the callers take one more step).
__device__ __forceinline__ double recip_newton2(double d) {
  double r;
  asm("rcp.approx.ftz.f64 %0, %1;" : "=d"(r) : "d"(d));
  r = __fma_rn(r, __fma_rn(-d, r, 1.0), r);
  return __fma_rn(r, __fma_rn(-d, r, 1.0), r);
}
// 1 + exp(-x) in double by exp_taylor (2^-41 relative).
__device__ __forceinline__ double one_plus_exp_neg(double xd) {
  const ExpParts e = exp_taylor(-xd);
  return __dadd_rn(1.0, scale_2k(e.p, e.k));
}

__device__ __noinline__ inline float silu_slow(float x) { return silu_f32(x); }
__device__ __noinline__ inline float sigmoid_slow(float x) { return sigmoid_f32(x); }

// silu_f32 (x / (1 + exp(-x)) in double, rounded once) with about half its FP64 work:
// d = 1 + exp(-x), then x / d by recip_newton2 and one Newton step on the quotient. ok for
// x in [-80, 40] with |x| >= 2^-120 (the result a normal float) unless near a boundary;
// everything else (NaN, infinities, zeros, tiny and large |x|) goes to silu_f32 itself.
__device__ __forceinline__ float silu_fast_try(float x, bool* ok) {
  const double xd = static_cast<double>(x);
  const double d = one_plus_exp_neg(xd);
  const double r = recip_newton2(d);
  const double q0 = __dmul_rn(xd, r);
  const double q = __fma_rn(r, __fma_rn(-d, q0, xd), q0);
  const bool in = x >= -80.0f && x <= 40.0f && fabsf(x) >= 0x1p-120f;  // false for NaN
  *ok = in && !near_float_boundary(static_cast<uint32_t>(__double2loint(q)));
  return __double2float_rn(q);
}
__device__ __forceinline__ float silu_fast(float x) {
  return fast_or_slow<silu_fast_try, silu_slow>(x);
}

// sigmoid_f32 (1 / (1 + exp(-x)) in double, rounded once) the same way: 1 / d by
// recip_newton2 and a third Newton step. ok for x in [-87, 40] (the result a normal
// float) unless near a boundary; else sigmoid_f32 itself.
__device__ __forceinline__ float sigmoid_fast_try(float x, bool* ok) {
  const double d = one_plus_exp_neg(static_cast<double>(x));
  double r = recip_newton2(d);
  r = __fma_rn(r, __fma_rn(-d, r, 1.0), r);
  *ok = x >= -87.0f && x <= 40.0f && !near_float_boundary(static_cast<uint32_t>(__double2loint(r)));
  return __double2float_rn(r);
}

// tanh_f32 the same way, by one route for every argument: with m = exp(-2a) - 1 (a = |x|),
// tanh(a) = -m / (2 + m). m comes from exp_taylor's polynomial before its last step, q(r)
// with exp(r) = 1 + r q(r): where the reduction's k is 0 (a below about 0.17) m = r q(r),
// which has no cancellation, so no odd series is needed for small a; elsewhere m = 2^k (1 +
// r q) - 1 with 2^k (1 + r q) <= 0.71. Its error (2^-41 from the polynomial, at most 2.4
// times that through m) is within kTanhTol = 2^16 double ulps (2^-37 relative at the least).
// a > 9.1 gives 1 (as tanh_f32); ok is false for a NaN and for subnormal inputs (their
// results are subnormal floats, which the boundary test does not describe); there tanh_f32
// itself (tanh_slow) decides. The host emulation of this arithmetic agrees with tanh_f32 on
// every float (docs/history/runs/2026-12-07d/tanh_v2_host_check.cpp).
inline constexpr uint32_t kTanhTol = 1u << 16;
__device__ __noinline__ inline float tanh_slow(float x) { return tanh_f32(x); }
__device__ __forceinline__ float tanh_fast_try(float x, bool* ok) {
  const double a = fabs(static_cast<double>(x));
  const bool nan = (f32_bits(x) & 0x7fffffffu) > 0x7f800000u;
  const bool big = a > 9.1;
  const ExpQ e = exp_taylor_q(-2.0 * (big || nan ? 1.0 : a));
  const double rq = __dmul_rn(e.q, e.r);  // exp(r) - 1
  const double m = e.k == 0 ? rq : __dsub_rn(scale_2k(__dadd_rn(rq, 1.0), e.k), 1.0);
  const double d = __dadd_rn(2.0, m), num = -m;
  const double rc = recip_newton2(d);
  const double q0 = __dmul_rn(num, rc);
  const double q = __fma_rn(rc, __fma_rn(-d, q0, num), q0);
  const bool near = near_float_boundary(static_cast<uint32_t>(__double2loint(q)), kTanhTol);
  const bool subnormal = a != 0.0 && a < 0x1p-126;
  *ok = !nan && (big || (!near && !subnormal));
  const float mag = big ? 1.0f : __double2float_rn(q);
  return bits_f32((f32_bits(mag) & 0x7fffffffu) | (f32_bits(x) & 0x80000000u));
}

}  // namespace sparkdraft::cuda
