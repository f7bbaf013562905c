// The kept set of top-k / top-p (contract.md section 8.3) as the GPU selects it: a
// threshold on the 64-bit order key (every id whose key is at or above it is
// kept), found by an MSB-first radix descent, 8 bits a level: top-k by counts,
// then top-p by exact 128-bit sums over the top-k set. The kernel
// (src/cuda/verify/verify.cu) builds each level's histogram in parallel and calls
// the bucket steps below on one thread; these functions are host/device so the
// CPU tests (tests/cpu/test_verify_select.cpp) run the same steps against the
// definition by sorting.
#pragma once

#include <cstdint>

#include "sparkdraft/core/verify_math.h"

namespace sparkdraft::verify_select {

inline constexpr int kBuckets = 256;  // 8 bits a level, 8 levels

// The position of (s, id) in the order of section 8.2 as a key: a larger key comes
// first. NaN above every number, -0 as +0, ties by the lower id.
SD_HD uint64_t order_key(float s, int32_t id) {
  uint32_t o;
  if (s != s) {
    o = 0xffffffffu;
  } else {
    const uint32_t b = f32_bits(s == 0.0f ? 0.0f : s);
    o = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  }
  return (static_cast<uint64_t>(o) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
}

// law_term(s, M) of core/verify_math.h, the same bits by a shorter road: no exp where
// it cannot reach the sum (s - M < -45 gives E = exp_law(d) < 2^-64: exp(-45) is
// 2^-64.9, and the test checks every float below -45), and floor(E * 2^64) as one
// 64-bit shift of E's significand (E is normal and below 1 there, so the term is
// below 2^64; E = 1 is 2^64 itself).
SD_HD U128 sum_term(float s, float max_value) {
  const float d = fsub_rn(s, max_value);
  if (!(d >= -45.0f)) return U128{};
  const uint32_t b = f32_bits(exp_law(d));  // in [2^-66, 1]
  if (b == 0x3f800000u) return U128{0, 1};
  const uint64_t m = (b & 0x7fffffu) | 0x800000u;
  const int sh = static_cast<int>(b >> 23) - 86;  // E = m * 2^(sh - 64), sh in [-25, 40]
  return U128{sh >= 0 ? m << sh : m >> -sh, 0};
}

// The digit of `key` at the level of `shift` (56, 48, ..., 0).
SD_HD int digit(uint64_t key, int shift) { return static_cast<int>((key >> shift) & 0xff); }

// Top-k level: given the counts of the candidate range's ids by digit, the bucket
// holding the k_left-th key from the top; k_left becomes its rank in that bucket.
SD_HD int top_k_bucket(const uint32_t* count, uint32_t& k_left) {
  int b = kBuckets - 1;
  for (; b > 0 && count[b] < k_left; --b) k_left -= count[b];
  return b;
}

// Top-p level: given the counts and exact term sums of the candidate range's ids
// by digit and `above` (the sum of every top-k id before the range), the last
// bucket in the order whose first id is kept (top_p_keeps of the sum before it);
// `above` becomes the sum before that bucket. The range's own first id is kept,
// so a bucket is always found.
SD_HD int top_p_bucket(const uint32_t* count, const U128* sum, U128& above, float top_p,
                       U128 total) {
  U128 cum = above;
  int sel = -1;
  for (int b = kBuckets - 1; b >= 0; --b) {
    if (count[b] == 0) continue;
    if (!top_p_keeps(cum, top_p, total)) break;
    sel = b;
    above = cum;
    cum = u128_add(cum, sum[b]);
  }
  return sel;
}

}  // namespace sparkdraft::verify_select
