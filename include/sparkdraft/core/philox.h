// Philox4x32-10 and the two-level Gumbel noise of the sampling contract (contract.md section 4).
//
// randint(seed, off): key (low32(seed), high32(seed)), counter (low32(off),
// high32(off), 0, 0), 10 rounds (Random123 philox4x32_10), returns word 0.
// Draft noise for vocab id v at step j of a request anchored at a:
//   p = a + j + 2^30, gs = randint(seed, p), x = int32(randint(gs, v)),
//   x = ~x if negative, u = max(float(x) * 0x1.fffffep-32f, 0x1.fffffep-32f),
//   g = -log(-log1p(-u))  (fp32, our correctly rounded log/log1p: core/math.h).
// Integer arithmetic and one fp32 multiply: identical bits on host and device.
#pragma once

#include <cstdint>

#include "sparkdraft/core/hd.h"

namespace sparkdraft {

inline constexpr int64_t kDraftNoiseSalt = int64_t{1} << 30;
inline constexpr uint32_t kPhiloxMulA = 0xD2511F53u;  // on c0
inline constexpr uint32_t kPhiloxMulB = 0xCD9E8D57u;  // on c2
inline constexpr uint32_t kPhiloxKeyBumpA = 0x9E3779B9u;
inline constexpr uint32_t kPhiloxKeyBumpB = 0xBB67AE85u;

struct Philox4 {
  uint32_t c0, c1, c2, c3;
};

SD_HD Philox4 philox4x32_10(uint32_t c0, uint32_t c1, uint32_t c2, uint32_t c3, uint32_t k0,
                            uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    const uint64_t pa = static_cast<uint64_t>(kPhiloxMulA) * c0;
    const uint64_t pb = static_cast<uint64_t>(kPhiloxMulB) * c2;
    const uint32_t hi_a = static_cast<uint32_t>(pa >> 32), lo_a = static_cast<uint32_t>(pa);
    const uint32_t hi_b = static_cast<uint32_t>(pb >> 32), lo_b = static_cast<uint32_t>(pb);
    const uint32_t n0 = hi_b ^ c1 ^ k0;
    const uint32_t n2 = hi_a ^ c3 ^ k1;
    c0 = n0;
    c1 = lo_b;
    c2 = n2;
    c3 = lo_a;
    k0 += kPhiloxKeyBumpA;
    k1 += kPhiloxKeyBumpB;
  }
  return Philox4{c0, c1, c2, c3};
}

// randint(seed, off): word 0 of Philox4x32-10.
SD_HD uint32_t philox_randint(int64_t seed, int64_t off) {
  const uint64_t s = static_cast<uint64_t>(seed);
  const uint64_t o = static_cast<uint64_t>(off);
  return philox4x32_10(static_cast<uint32_t>(o), static_cast<uint32_t>(o >> 32), 0u, 0u,
                       static_cast<uint32_t>(s), static_cast<uint32_t>(s >> 32))
      .c0;
}

// The smallest u (0x1.fffffep-32f = bits 0x2FFFFFFF): u = 0 maps here.
inline constexpr float kUniformScale = 0x1.fffffep-32f;

// u of one Philox word r: x = int32(r), x = ~x if negative,
// u = max(float(x) * 0x1.fffffep-32f, 0x1.fffffep-32f).
SD_HD float uniform_of_word(uint32_t r) {
  int32_t x = static_cast<int32_t>(r);
  if (x < 0) x = ~x;
#if SD_ON_DEVICE
  float u = __fmul_rn(__int2float_rn(x), kUniformScale);
#else
  float u = static_cast<float>(x) * kUniformScale;
#endif
  return u < kUniformScale ? kUniformScale : u;
}

// u of vocab id v under the step seed gs (the second level).
SD_HD float philox_uniform(uint32_t step_seed, int64_t vocab_id) {
  return uniform_of_word(philox_randint(static_cast<int64_t>(step_seed), vocab_id));
}

// philox_uniform for a vocab id below 2^32, written with the zero words explicit
// (counter (v, 0, 0, 0), key (gs, 0)) so that a compiler folds the first round's
// zero products: the same bits as philox_uniform(step_seed, vocab_id).
SD_HD float philox_uniform_u32(uint32_t step_seed, uint32_t vocab_id) {
  return uniform_of_word(philox4x32_10(vocab_id, 0u, 0u, 0u, step_seed, 0u).c0);
}

// The step seed gs for the token sampled at step j of a request anchored at a.
SD_HD uint32_t draft_step_seed(int64_t seed, int64_t anchor_pos, int step) {
  return philox_randint(seed, anchor_pos + step + kDraftNoiseSalt);
}

}  // namespace sparkdraft
