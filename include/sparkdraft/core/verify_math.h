// The verifier's element arithmetic (contract.md section 8), host and device.
//
// Every function here is one rounding point of section 8, written once for the
// CPU reference and the kernels: integer operations and IEEE fp32/fp64 basic
// operations (explicit _rn intrinsics on the device, -ffp-contract=off on the
// host), our exp/log (core/math.h) and our Philox (core/philox.h).
//
//   s      = T > 0 ? f32(l) / T : f32(l)                      verify_scaled
//   E      = exp_law(s - M)           (fp32 subtract, then    law_exp
//                                      the fp32 sequence below)
//   e      = floor(E * 2^64)          (exact, 128-bit)        fixed64_of_unit
//   Z      = f32(sum e * 2^-64)       (nearest even)          f32_of_fixed64
//   prob   = E / Z                    (fp32 divide)           law_prob
//   accept = u * q < p                (exact, in double)      accept_standard
//   e      = -log_law(u)              (fp32, the sequence     race_noise
//                                      below)
//   z      = w / e                    (fp32 divide; w the     race_score
//                                      residual r = max(p - q, 0), the block
//                                      mass or the target's E)
#pragma once

#include <cstdint>

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/hd.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/core/packet.h"
#include "sparkdraft/core/philox.h"
#include "sparkdraft/core/sampling.h"

namespace sparkdraft {

// The verifier's Philox offsets (contract.md section 8.4): the target sampler
// uses 0 and the draft 2^30; a row whose a + N exceeds 2^60 is refused.
inline constexpr int64_t kVerifyAcceptSalt = int64_t{1} << 61;
inline constexpr int64_t kVerifyDrawSalt = int64_t{1} << 62;
inline constexpr int64_t kVerifyPositionLimit = int64_t{1} << 60;

// ---- exact 128-bit sums ------------------------------------------------------

struct U128 {
  uint64_t lo = 0, hi = 0;
};

SD_HD U128 u128_add(U128 a, U128 b) {
  U128 r;
  r.lo = a.lo + b.lo;
  r.hi = a.hi + b.hi + (r.lo < a.lo ? 1u : 0u);
  return r;
}

SD_HD bool u128_less(U128 a, U128 b) { return a.hi != b.hi ? a.hi < b.hi : a.lo < b.lo; }
SD_HD bool u128_zero(U128 a) { return (a.lo | a.hi) == 0; }

SD_HD int clz64(uint64_t x) {  // x != 0
#if SD_ON_DEVICE
  return __clzll(static_cast<long long>(x));
#else
  return __builtin_clzll(x);
#endif
}

// Bits needed for a (0 for 0).
SD_HD int u128_bit_length(U128 a) {
  if (a.hi) return 128 - clz64(a.hi);
  if (a.lo) return 64 - clz64(a.lo);
  return 0;
}

// a << s for 0 <= s < 128 (bits past 128 are lost: callers check the length).
SD_HD U128 u128_shl(U128 a, int s) {
  if (s == 0) return a;
  if (s >= 64) return U128{0, a.lo << (s - 64)};
  return U128{a.lo << s, (a.hi << s) | (a.lo >> (64 - s))};
}

// a * m, exact while the product is below 2^128.
SD_HD U128 u128_mul_u32(U128 a, uint32_t m) {
  const uint64_t a0 = a.lo & 0xffffffffu, a1 = a.lo >> 32, a2 = a.hi & 0xffffffffu, a3 = a.hi >> 32;
  const uint64_t p0 = a0 * m;
  const uint64_t p1 = a1 * m + (p0 >> 32);
  const uint64_t p2 = a2 * m + (p1 >> 32);
  const uint64_t p3 = a3 * m + (p2 >> 32);
  return U128{(p0 & 0xffffffffu) | (p1 << 32), (p2 & 0xffffffffu) | (p3 << 32)};
}

// floor(e * 2^64) for an fp32 e in [0, 1] (a NaN or a value above 1 never
// reaches here: E = exp(s - M) with s <= M). Exact: a scaling by a power of
// two and a truncation of the bits below 2^-64.
SD_HD U128 fixed64_of_unit(float e) {
  const uint32_t b = f32_bits(e) & 0x7fffffffu;
  const int ex = static_cast<int>(b >> 23);
  if (ex == 0) return U128{};  // zero or subnormal: below 2^-126, truncated to 0
  const uint64_t m = (b & 0x7fffffu) | 0x800000u;
  const int sh = ex - 86;  // e = m * 2^(ex - 150), times 2^64
  if (sh <= -64) return U128{};
  if (sh < 0) return U128{m >> (-sh), 0};
  return u128_shl(U128{m, 0}, sh);
}

// f32(x * 2^-64), rounded to nearest even.
SD_HD float f32_of_fixed64(U128 x) {
  const int len = u128_bit_length(x);
  if (len == 0) return 0.0f;
  const int sh = len - 24;  // keep 24 significant bits
  uint64_t mant;
  int scale = sh;  // result = mant * 2^(scale - 64)
  if (sh <= 0) {
    mant = x.lo << (-sh);
  } else {
    // mant = x >> sh, rest = the sh bits shifted out
    const U128 q = sh >= 64 ? U128{x.hi >> (sh - 64), 0}
                            : U128{(x.lo >> sh) | (x.hi << (64 - sh)), x.hi >> sh};
    mant = q.lo;
    // Compare the rest with half an ulp: rest = x - (q << sh).
    const U128 back = u128_shl(q, sh);
    const uint64_t r_lo = x.lo - back.lo;
    const uint64_t r_hi = x.hi - back.hi - (x.lo < back.lo ? 1u : 0u);
    const U128 rest{r_lo, r_hi};
    const U128 half = u128_shl(U128{1, 0}, sh - 1);
    const bool up = u128_less(half, rest) || (!u128_less(rest, half) && (mant & 1u));
    if (up) {
      ++mant;
      if (mant == (uint64_t{1} << 24)) {
        mant >>= 1;
        ++scale;
      }
    }
  }
  // mant in [2^23, 2^24): value = 1.f * 2^(scale - 64 + 23).
  const uint32_t biased = static_cast<uint32_t>(scale - 64 + 23 + 127);
  return bits_f32((biased << 23) | (static_cast<uint32_t>(mant) & 0x7fffffu));
}

// ---- the law L(s) of section 8.2 -----------------------------------------------

// s = f32(l) / T for T > 0, f32(l) at T = 0 (section 4's division).
SD_HD float verify_scaled(float logit, float temperature) {
  return temperature > 0.0f ? fdiv_rn(logit, temperature) : logit;
}

// The combined statistics of one law: the first id of the order (core/packet.h:
// the sampling rule's winner) and the exact sum of the terms over the kept set.
struct LawStats {
  MarkovPacket first{bits_f32(0xff800000u), 0, 0};  // -inf at id 0 until folded
  U128 sum;
  // Degenerate: a point mass at first.id (NaN, +inf or every value -inf).
  SD_HD bool degenerate() const {
    const uint32_t b = f32_bits(first.value) & 0x7fffffffu;
    return first.nan != 0 || b == 0x7f800000u;
  }
};

// Folds one id into a first-id packet (the order of section 8.2).
SD_HD void fold_first(MarkovPacket& acc, float s, int32_t id) {
  const MarkovPacket c = make_packet(s, id);
  if (packet_wins(c, acc)) acc = c;
}
// Folds two packets: the result is the first of the two.
SD_HD MarkovPacket first_of(const MarkovPacket& a, const MarkovPacket& b) {
  return packet_wins(a, b) ? a : b;
}

// The steps of exp_law before the scaling by 2^kf, for d in [-87, 0]: p, kf, and tt =
// t + 0x1.8p23 (whose bits are 0x4b400000 + kf: kf is an integer of [-126, 0] and
// tt's ulp is 1).
SD_HD float exp_law_poly(float d, float& tt, float& kf) {
  const float t = fmul_rn(d, 0x1.715476p+0f);
  tt = fadd_rn(t, 0x1.8p23f);
  kf = fsub_rn(tt, 0x1.8p23f);
  float r = ffma_rn(kf, -0x1.62e43p-1f, d);
  r = ffma_rn(kf, 0x1.05c61p-29f, r);
  float p = 0x1.a01a02p-13f;
  p = ffma_rn(p, r, 0x1.6c16c2p-10f);
  p = ffma_rn(p, r, 0x1.111112p-7f);
  p = ffma_rn(p, r, 0x1.555556p-5f);
  p = ffma_rn(p, r, 0x1.555556p-3f);
  p = ffma_rn(p, r, 0.5f);
  p = ffma_rn(p, r, 1.0f);
  p = ffma_rn(p, r, 1.0f);
  return p;
}

// exp(d) for the law (contract.md section 8.2), d = s - M <= 0 (or -inf), in fp32,
// every step one IEEE rounding (the fmas fused):
//   d < -87 (or -inf): 0
//   t  = d * L2E                          L2E = 0x1.715476p+0 (fp32 log2(e))
//   kf = (t + 0x1.8p23) - 0x1.8p23        t rounded to an integer, ties to even
//   r  = fma(kf, -LN2_HI, d)              LN2_HI = 0x1.62e43p-1 (fp32 ln 2)
//   r  = fma(kf, -LN2_LO, r)              LN2_LO = -0x1.05c61p-29 (fp32 of ln 2 - LN2_HI)
//   p  = fma(..fma(fma(C7, r, C6), r, C5).., r, C0)   C_i = fp32(1 / i!)
//   E  = p * 2^kf                         exact: kf in [-126, 0], E normal
// E(0) = 1 and 0 <= E <= 1; within 0.89 ulp of exp(d) (tests/cpu/test_verify_select.cpp
// bounds it by 1 ulp over every 61st float of [-87, 0]). Cheap on the GPU (11 fp32
// operations), where the double exp_f32 of core/math.h costs the vocabulary passes
// most of their time.
SD_HD float exp_law(float d) {
  if (!(d >= -87.0f)) return 0.0f;
  float tt, kf;
  const float p = exp_law_poly(d, tt, kf);
  const int k = static_cast<int>(kf);
  return fmul_rn(p, bits_f32(static_cast<uint32_t>(k + 127) << 23));
}

// The bits of exp_law(d) for d in [-87, 0], by a shorter road: p * 2^kf is exact (E
// is normal), so its bits are p's with kf added to the exponent field, and kf << 23
// is tt's bits << 23 (mod 2^32: 0x4b400000 << 23 is 0). No conversion, no multiply.
// tests/cpu/test_verify_select.cpp checks it against exp_law over [-87, 0].
SD_HD uint32_t exp_law_bits(float d) {
  float tt, kf;
  const float p = exp_law_poly(d, tt, kf);
  return f32_bits(p) + (f32_bits(tt) << 23);
}

// E = exp_law(s - M): s = -inf gives 0.
SD_HD float law_exp(float s, float max_value) { return exp_law(fsub_rn(s, max_value)); }

// One id's term of Zi (section 8.2): floor(exp_law(s - M) * 2^64).
SD_HD U128 law_term(float s, float max_value) { return fixed64_of_unit(law_exp(s, max_value)); }

// L(s)[v] for an id of the kept set with scaled logit s (0 for ids outside it).
// z = f32_of_fixed64(stats.sum), computed once per law.
// law_prob_of_exp takes E = law_exp(s, M) already computed.
SD_HD float law_prob_of_exp(const LawStats& st, float z, float e, int64_t id) {
  if (st.degenerate()) return id == st.first.id ? 1.0f : 0.0f;
  return fdiv_rn(e, z);
}
SD_HD float law_prob(const LawStats& st, float z, float s, int64_t id) {
  return law_prob_of_exp(st, z, st.degenerate() ? 0.0f : law_exp(s, st.first.value), id);
}

// ---- top-p (section 8.3) ------------------------------------------------------

// True when an id whose predecessors in the order carry `before` of the total
// `total` stays under top-p `top_p` in (0, 1): before < top_p * total, exactly.
SD_HD bool top_p_keeps(U128 before, float top_p, U128 total) {
  if (u128_zero(before)) return true;
  const uint32_t b = f32_bits(top_p);
  const int ex = static_cast<int>(b >> 23);
  const uint32_t m = ex == 0 ? (b & 0x7fffffu) : ((b & 0x7fffffu) | 0x800000u);
  const int s = ex == 0 ? 149 : 150 - ex;               // top_p = m * 2^-s, s >= 24
  const U128 rhs = u128_mul_u32(total, m);              // < 2^119 for V < 2^31
  if (u128_bit_length(before) + s > 127) return false;  // lhs >= 2^127 > rhs
  return u128_less(u128_shl(before, s), rhs);
}

// ---- randomness (section 8.4) ------------------------------------------------

// log(x) for a normal x > 0 in fp32 (contract.md section 8.4), every step one IEEE
// rounding, no fma (musl's logf reduction and polynomial, written out):
//   i = bits(x) + 0x3f800000 - 0x3f3504f3;  k = (i >> 23) - 127
//   m = float((i & 0x7fffff) + 0x3f3504f3)  (x = 2^k m, m in [sqrt(1/2), sqrt(2)))
//   f = m - 1 (exact);  s = f / (2 + f);  z = s s;  w = z z
//   R = z (Lg1 + w Lg3) + w (Lg2 + w Lg4);  h = (0.5 f) f
//   log = (((s (h + R) + k LN2_LO) - h) + f) + k LN2_HI
// Lg1..4 = 0xaaaaaa.0p-24, 0xccce13.0p-25, 0x91e9ee.0p-25, 0xf89e26.0p-26,
// LN2_HI = 0x1.62e3p-1, LN2_LO = 0x1.2fefa2p-17. Within 1 ulp of log over the
// verifier's uniforms (tests/cpu/test_verify_select.cpp).
SD_HD float log_law(float x) {
  uint32_t i = f32_bits(x) + (0x3f800000u - 0x3f3504f3u);
  const int k = static_cast<int>(i >> 23) - 0x7f;
  i = (i & 0x007fffffu) + 0x3f3504f3u;
  const float f = fsub_rn(bits_f32(i), 1.0f);
  const float s = fdiv_rn(f, fadd_rn(2.0f, f));
  const float z = fmul_rn(s, s);
  const float w = fmul_rn(z, z);
  const float t1 = fmul_rn(w, fadd_rn(0xccce13.0p-25f, fmul_rn(w, 0xf89e26.0p-26f)));
  const float t2 = fmul_rn(z, fadd_rn(0xaaaaaa.0p-24f, fmul_rn(w, 0x91e9ee.0p-25f)));
  const float R = fadd_rn(t2, t1);
  const float h = fmul_rn(fmul_rn(0.5f, f), f);
  const float dk = static_cast<float>(k);
  const float a = fadd_rn(fmul_rn(s, fadd_rn(h, R)), fmul_rn(dk, 0x1.2fefa2p-17f));
  return fadd_rn(fadd_rn(fsub_rn(a, h), f), fmul_rn(dk, 0x1.62e3p-1f));
}

// The verifier's draw noise of id v (section 8.4): an Exp(1) variable
// e = -log_law(u), u = philox_uniform(gd, v) in [2^-32, 1 - 2^-24], so 0 < e < 23.
SD_HD float race_noise(uint32_t gd, int64_t v) { return -log_law(philox_uniform(gd, v)); }

// The draw score of an id of weight w >= 0 (section 8.5): w / e. The first id of the
// order over the scores is a draw from w / sum(w) (the exponential race: the
// Gumbel-max rule of section 4 written as argmax w / e, with e = exp(-g)).
SD_HD float race_score(float w, float e) { return fdiv_rn(w, e); }

// The first-level seed of a verifier stream at position pos (= a + j).
SD_HD uint32_t verify_step_seed(int64_t seed, int64_t pos, int64_t salt) {
  const uint64_t off = static_cast<uint64_t>(pos) + static_cast<uint64_t>(salt);
  return philox_randint(seed, static_cast<int64_t>(off));
}

// The accept uniform of position pos for draft token `token`.
SD_HD float accept_uniform(int64_t seed, int64_t pos, int64_t salt, int64_t token) {
  return philox_uniform(verify_step_seed(seed, pos, salt), token);
}

// ---- decisions (sections 8.5, 8.6) ----------------------------------------------

// Accept iff u * q < p as real numbers (exact in double: 24-bit significands,
// u >= 2^-32 keeps the product normal).
SD_HD bool accept_standard(float u, float q, float p) {
  using namespace math_detail;
  return dmul(static_cast<double>(u), static_cast<double>(q)) < static_cast<double>(p);
}

// The residual weight of an id: max(p - q, 0) (fp32 subtract).
SD_HD float residual_weight(float p, float q) {
  const float r = fsub_rn(p, q);
  return r > 0.0f ? r : 0.0f;
}

// Block verification: w_i from w_{i-1}, P = p(x), Q = q(x).
SD_HD float block_weight_next(float w, float p, float q) {
  if (w == 0.0f || p == 0.0f) return 0.0f;
  const float t = fmul_rn(w, fdiv_rn(p, q));  // Q = 0: +inf
  return t < 1.0f ? t : 1.0f;
}

// Block verification: m = max(w * p - q, 0) (two roundings, no fma).
SD_HD float block_mass(float w, float p, float q) {
  const float m = fsub_rn(fmul_rn(w, p), q);
  return m > 0.0f ? m : 0.0f;
}

// Block verification: h = R / (R + (1 - w)), 1 when the denominator is 0.
SD_HD float block_h(float residual_mass, float w) {
  const float den = fadd_rn(residual_mass, fsub_rn(1.0f, w));
  return den == 0.0f ? 1.0f : fdiv_rn(residual_mass, den);
}

}  // namespace sparkdraft
