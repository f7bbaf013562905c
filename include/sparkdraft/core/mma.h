// The tensor-core twin (contract.md section 3, "Matrix products"): the bits of Hopper's
// mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32, computed on the host (and,
// for tests, on the device) with integer arithmetic only.
//
// One output element of one instruction is d = mma_step(c, a[0..15], b[0..15]):
//   1. each product a_i * b_i is exact: the 8-bit significands multiplied, exponent
//      ea + eb, where a bf16's exponent is that of its binade and subnormal values
//      count at exponent -126 (significand 0.m, not normalized); a product's
//      significand is in [0, 4);
//   2. c takes part with its own exponent (a subnormal c counts at -126);
//   3. E = the largest of: the exponents of the NONZERO products, c's exponent if
//      c is nonzero, and -133 (the binade of the smallest bf16 subnormal);
//   4. every term is truncated toward zero to a multiple of 2^(E - 25) (25 fraction
//      bits relative to 2^E; so never finer than 2^-158);
//   5. the truncated terms are added exactly;
//   6. the sum is normalized and truncated toward zero to fp32: subnormal results
//      are kept (truncated to a multiple of 2^-149), an exponent past 127 gives
//      +-infinity; a sum that is zero, or truncates to zero, gives +0;
//   7. a NaN input, inf - inf, or 0 * inf gives NaN (0x7fffffff, the GPU's NaN);
//      otherwise an infinite product or c gives that infinity.
// The published models (contract.md section 3) count zero and subnormal values at -126
// everywhere; the H200 differs in rule 3 (a zero product or a zero c does not set
// E, and E may go below -126 down to -133) and rule 6 (a negative sum that
// truncates to zero gives +0). Found by the device sweep of 2026-11-30
// (docs/mma-twin.md).
// tests/cuda/test_mma.cu holds this against the instruction on the device, and
// tests/core/test_mma.cpp against a fixture of device results recorded on an H200
// (tests/fixtures/), so CI checks it without a GPU.
//
// A chain (mma_chain) is the product of one row a and one column b over K: K/16
// steps in increasing k from c = +0, step i adding k = 16i .. 16i+15. When K is not
// a multiple of 16, the last step pads both operands with +0 (a product of two
// zeros has exponent -252 and never sets E, so padding changes nothing).
#pragma once

#include <cstdint>

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/hd.h"

namespace sparkdraft {

inline constexpr int kMmaK = 16;  // the instruction's k
inline constexpr uint32_t kMmaNan = 0x7fffffffu;
inline constexpr int kMmaMinExp = -133;  // the alignment exponent E never goes below

namespace mma_detail {

// Unbiased exponent of a bf16 (binade; zero and subnormal: -126) and its 8-bit
// integer significand (1.m or 0.m, 7 fraction bits).
SD_HD int bf16_exp(uint16_t x) {
  const int e = (x >> 7) & 0xff;
  return (e == 0 ? 1 : e) - 127;
}
SD_HD uint32_t bf16_sig(uint16_t x) {
  const uint32_t e = (x >> 7) & 0xffu, m = x & 0x7fu;
  return e == 0 ? m : (m | 0x80u);
}

// Index of the highest set bit of a nonzero 64-bit value.
SD_HD int top_bit(uint64_t m) {
#if SD_ON_DEVICE
  return 63 - __clzll(static_cast<long long>(m));
#else
  return 63 - __builtin_clzll(m);
#endif
}

// The rare path: some input is inf or NaN (exponent field 0xff).
SD_HD uint32_t special_step(uint32_t c, const bf16* a, const bf16* b) {
  bool nan = (c & 0x7fffffffu) > 0x7f800000u;
  bool pos_inf = c == 0x7f800000u, neg_inf = c == 0xff800000u;
  for (int i = 0; i < kMmaK; ++i) {
    const uint16_t x = a[i].bits, y = b[i].bits;
    const bool x_nan = (x & 0x7fffu) > 0x7f80u, y_nan = (y & 0x7fffu) > 0x7f80u;
    const bool x_inf = (x & 0x7fffu) == 0x7f80u, y_inf = (y & 0x7fffu) == 0x7f80u;
    const bool x_zero = (x & 0x7fffu) == 0, y_zero = (y & 0x7fffu) == 0;
    if (x_nan || y_nan || (x_inf && y_zero) || (y_inf && x_zero)) {
      nan = true;
    } else if (x_inf || y_inf) {
      if (((x ^ y) & 0x8000u) != 0)
        neg_inf = true;
      else
        pos_inf = true;
    }
  }
  if (nan || (pos_inf && neg_inf)) return kMmaNan;
  if (pos_inf) return 0x7f800000u;
  if (neg_inf) return 0xff800000u;
  return 0xffffffffu;  // no special value: the caller runs the finite path
}

// sum * 2^(E - 25), truncated toward zero to fp32 bits.
SD_HD uint32_t to_f32_trunc(int64_t sum, int E) {
  if (sum == 0) return 0u;  // +0, whatever the signs of the terms
  const uint32_t sign = sum < 0 ? 0x80000000u : 0u;
  const uint64_t m = sum < 0 ? static_cast<uint64_t>(-sum) : static_cast<uint64_t>(sum);
  const int p = top_bit(m);
  const int exp = p + E - 25;  // the binade of the exact sum
  if (exp > 127) return sign | 0x7f800000u;
  if (exp >= -126) {
    const uint64_t mant = p > 23 ? m >> (p - 23) : m << (23 - p);
    return sign | (static_cast<uint32_t>(exp + 127) << 23) |
           (static_cast<uint32_t>(mant) & 0x7fffffu);
  }
  // Subnormal: a multiple of 2^-149; m is in units of 2^(E - 25).
  const int s = E + 124;  // log2(2^(E - 25) / 2^-149)
  const uint64_t mant = s >= 0 ? m << s : (-s >= 64 ? 0 : m >> -s);
  return mant == 0 ? 0u : sign | static_cast<uint32_t>(mant);  // truncated to zero: +0
}

}  // namespace mma_detail

// One instruction step for one output element: fp32 bits of c + sum a_i * b_i
// (i < 16) as the tensor core computes it (rules at the top of this file).
SD_HD uint32_t mma_step_bits(uint32_t c, const bf16* a, const bf16* b) {
  using namespace mma_detail;
  bool special = (c & 0x7f800000u) == 0x7f800000u;
  for (int i = 0; i < kMmaK; ++i)
    special = special || (a[i].bits & 0x7f80u) == 0x7f80u || (b[i].bits & 0x7f80u) == 0x7f80u;
  if (special) {
    const uint32_t s = special_step(c, a, b);
    if (s != 0xffffffffu) return s;
  }
  const int ce = static_cast<int>((c >> 23) & 0xffu);
  const int ec = (ce == 0 ? 1 : ce) - 127;
  int E = (c & 0x7fffffffu) != 0 && ec > kMmaMinExp ? ec : kMmaMinExp;
  int pe[kMmaK];
  uint32_t P[kMmaK];
  for (int i = 0; i < kMmaK; ++i) {
    pe[i] = bf16_exp(a[i].bits) + bf16_exp(b[i].bits);
    P[i] = bf16_sig(a[i].bits) * bf16_sig(b[i].bits);
    if (P[i] != 0) E = pe[i] > E ? pe[i] : E;  // a zero product does not set E
  }
  // Products in units of 2^(E - 25): P * 2^(pe - 14) / 2^(E - 25) = P << (11 - d).
  int32_t sum32 = 0;  // |sum| <= 16 * 65025 * 2^11 < 2^31
  for (int i = 0; i < kMmaK; ++i) {
    const int d = E - pe[i];  // < 0 only for zero products (T = 0 then)
    const uint32_t T = d < 0     ? 0u
                       : d <= 11 ? P[i] << (11 - d)
                                 : (d - 11 >= 16 ? 0u : P[i] >> (d - 11));
    const bool neg = ((a[i].bits ^ b[i].bits) & 0x8000u) != 0;
    sum32 += neg ? -static_cast<int32_t>(T) : static_cast<int32_t>(T);
  }
  // c in units of 2^(E - 25): sig * 2^(ec - 23) / 2^(E - 25) = sig << (2 - dc)
  // (dc < 0 only for c = 0).
  const uint32_t csig = ce == 0 ? (c & 0x7fffffu) : ((c & 0x7fffffu) | 0x800000u);
  const int dc = E - ec > 0 ? E - ec : 0;
  const uint32_t Tc = dc <= 2 ? csig << (2 - dc) : (dc - 2 >= 32 ? 0u : csig >> (dc - 2));
  const int64_t sum =
      static_cast<int64_t>(sum32) +
      ((c & 0x80000000u) != 0 ? -static_cast<int64_t>(Tc) : static_cast<int64_t>(Tc));
  return to_f32_trunc(sum, E);
}

SD_HD float mma_step(float c, const bf16* a, const bf16* b) {
  return bits_f32(mma_step_bits(f32_bits(c), a, b));
}

// The chain of one output element over K (a: one row, b: one column, both
// contiguous in k), from c0 (+0 for every product of the job).
SD_HD float mma_chain(const bf16* a, const bf16* b, int K, float c0 = 0.0f) {
  uint32_t c = f32_bits(c0);
  int k = 0;
  for (; k + kMmaK <= K; k += kMmaK) c = mma_step_bits(c, a + k, b + k);
  if (k < K) {
    bf16 pa[kMmaK], pb[kMmaK];
    for (int i = 0; i < kMmaK; ++i) {
      pa[i] = k + i < K ? a[k + i] : bf16{0};
      pb[i] = k + i < K ? b[k + i] : bf16{0};
    }
    c = mma_step_bits(c, pa, pb);
  }
  return bits_f32(c);
}

}  // namespace sparkdraft
