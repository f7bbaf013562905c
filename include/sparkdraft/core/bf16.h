// bf16 storage type and its one rounding rule (SPEC section 3).
//
// bf16 = the top 16 bits of an fp32. Conversion fp32 -> bf16 rounds to nearest,
// ties to even; values past the largest finite bf16 round to +-inf exactly as
// RNE on the bit pattern does. Every NaN becomes the one canonical quiet NaN
// 0x7fc0: fp32 arithmetic on a NaN returns different bits on the GPU (always
// 0x7fffffff) and on x86 (the input's payload, or 0xffc00000 when created), so
// a rounding point that kept sign and payload would let the same NaN logit land
// in the cache as different bits on the two sides.
// bf16 -> fp32 is exact. The same code runs on host and device: the bits are
// identical by construction (integer arithmetic only).
#pragma once

#include <cstdint>
#include <cstring>

#include "sparkdraft/core/hd.h"

namespace sparkdraft {

struct bf16 {
  uint16_t bits;
};
static_assert(sizeof(bf16) == 2);

SD_HD uint32_t f32_bits(float x) {
#if SD_ON_DEVICE
  return __float_as_uint(x);
#else
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
#endif
}

SD_HD float bits_f32(uint32_t u) {
#if SD_ON_DEVICE
  return __uint_as_float(u);
#else
  float x;
  std::memcpy(&x, &u, 4);
  return x;
#endif
}

inline constexpr uint16_t kBf16CanonicalNan = 0x7fc0u;

// fp32 -> bf16, round to nearest even; any NaN -> kBf16CanonicalNan.
SD_HD bf16 to_bf16(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{kBf16CanonicalNan};
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return bf16{static_cast<uint16_t>(u >> 16)};
}

SD_HD float to_f32(bf16 x) { return bits_f32(static_cast<uint32_t>(x.bits) << 16); }

// Round an fp32 value to the nearest bf16 and back (the rounding point of an op).
SD_HD float round_bf16(float x) { return to_f32(to_bf16(x)); }

SD_HD bool bf16_is_nan(bf16 x) { return (x.bits & 0x7fffu) > 0x7f80u; }

}  // namespace sparkdraft
