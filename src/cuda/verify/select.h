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

// The first pass's fold of one thread: the largest order key over the ids it visits,
// in increasing order (the vocabulary loops of the kernels), one 32-bit comparison an
// id: the key's high word o (NaN as 0xffffffff, -0 as +0: fadd(x, 0) is x for every
// other x) and, for the first id of the largest o, its id (a later id of the same o
// has the smaller key). key() is the 64-bit order key of that id, 0 when none came.
struct FirstKey {
  uint32_t o = 0;  // every id's o is above 0 (-inf's is 0x007fffff)
  int32_t id = 0;
  SD_HD void add(float x, int32_t v) {
    const uint32_t b = f32_bits(fadd_rn(x, 0.0f));
    uint32_t k = b ^ (static_cast<uint32_t>(static_cast<int32_t>(b) >> 31) | 0x80000000u);
    if (x != x) k = 0xffffffffu;
    if (k > o) {
      o = k;
      id = v;
    }
  }
  SD_HD uint64_t key() const {
    return o == 0 ? 0
                  : (static_cast<uint64_t>(o) << 32) | (0xffffffffu - static_cast<uint32_t>(id));
  }
};

// x >> s for a shift of any size (0 from 64 on): PTX's shr.b64 clamps the shift.
SD_HD uint64_t shr64_clamped(uint64_t x, uint32_t s) {
#if SD_ON_DEVICE
  uint64_t r;
  asm("shr.b64 %0, %1, %2;" : "=l"(r) : "l"(x), "r"(s));
  return r;
#else
  return s >= 64 ? 0 : x >> s;
#endif
}

// One term floor(E * 2^64) of section 8.2, E = exp_law(d), as one * 2^64 + lo.
struct LawTerm {
  uint64_t lo;
  uint32_t one;  // 1 for E = 1 (then lo is 0)
};

// law_term of core/verify_math.h for d = s - M (<= 0 or -inf; never NaN: a law with a
// NaN is degenerate and has no sums), the same bits by a shorter road without a
// branch:
// - d below -87 (or -inf) is clamped to -87: every d below -45 gives a zero term
//   (exp(-45) is 2^-64.9; the test checks every float of [-87, -45)), so the clamp
//   changes nothing, and exp_law_bits (no conversion, no multiply) applies;
// - E = m * 2^(ex - 150) (normal, m the 24-bit significand), so the term is
//   (m << 40) >> (126 - ex): one 64-bit shift, 0 from a shift of 64 on (E below
//   2^-64), and E = 1 (ex 127, the only E at or above 1) is the shift -1 as an
//   unsigned (clamped: lo 0) whose top bit is `one`.
SD_HD LawTerm law_term_of_diff(float d) {
  const uint32_t b = exp_law_bits(d >= -87.0f ? d : -87.0f);
  const uint32_t shift = 126u - (b >> 23);
  const uint64_t m = static_cast<uint64_t>((b | 0x800000u) << 8) << 32;
  return LawTerm{shr64_clamped(m, shift), shift >> 31};
}

// law_term(s, M) of core/verify_math.h (law_term_of_diff of fsub(s, M)).
SD_HD U128 sum_term(float s, float max_value) {
  const LawTerm t = law_term_of_diff(fsub_rn(s, max_value));
  return U128{t.lo, t.one};
}

// A thread's exact sum of terms, 96 bits: fewer than 2^31 terms (ids of one row), each
// at most 2^64, sum below 2^95. On the device one carry chain (three 32-bit adds) a
// term; widened to the 128-bit U128 only for the folds across threads.
struct TermSum {
  uint32_t w0 = 0, w1 = 0, w2 = 0;  // the sum is w2 * 2^64 + w1 * 2^32 + w0
  SD_HD void add(LawTerm t) {
#if SD_ON_DEVICE
    const uint32_t t0 = static_cast<uint32_t>(t.lo), t1 = static_cast<uint32_t>(t.lo >> 32);
    asm("add.cc.u32 %0, %0, %3;\n\taddc.cc.u32 %1, %1, %4;\n\taddc.u32 %2, %2, %5;"
        : "+r"(w0), "+r"(w1), "+r"(w2)
        : "r"(t0), "r"(t1), "r"(t.one));
#else
    const uint64_t lo = (static_cast<uint64_t>(w1) << 32 | w0) + t.lo;
    w2 += t.one + (lo < t.lo ? 1u : 0u);
    w0 = static_cast<uint32_t>(lo);
    w1 = static_cast<uint32_t>(lo >> 32);
#endif
  }
  SD_HD U128 wide() const { return U128{static_cast<uint64_t>(w1) << 32 | w0, w2}; }
};

// The draw kernel's fold of id v of weight w > 0 into a thread's draw packet `win` (the
// race of section 8.5): the packet of fold_first(win, race_score(w, race_noise(gd, v)),
// v), the noise skipped where the id cannot win. v must be above every id folded into
// win before (a thread's ids come in increasing order), so an id
// whose score is at most win's value loses to it (a tie goes to the lower id). Every
// noise e = -log_law(u) is at least 2^-25 and at least fsub(1, u) (tests/cpu/
// test_verify_select.cpp checks every float u the uniform can return), so the score
// w / e is at most w * 2^25 (exact: no Philox when that is below win's value) and below
// win's value when fmul(win's value, fsub(1, u)) > w (no log, no division: that
// product rounded above w means the real product is above w). The uniform by
// philox_uniform_u32 (the same bits for an id below 2^32). race_fold_u: the same
// fold given id v's uniform u (a caller that draws it before it knows w, so that the
// Philox rounds overlap the law's arithmetic).
SD_HD void race_fold_u(MarkovPacket& win, float w, float u, int v) {
  if (fmul_rn(win.value, fsub_rn(1.0f, u)) > w) return;
  fold_first(win, race_score(w, -log_law(u)), v);
}
SD_HD void race_fold(MarkovPacket& win, float w, uint32_t gd, int v) {
  if (fmul_rn(w, 0x1p25f) < win.value) return;
  race_fold_u(win, w, philox_uniform_u32(gd, static_cast<uint32_t>(v)), v);
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
