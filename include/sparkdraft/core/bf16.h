// bf16 storage type and its one rounding rule (contract.md section 3).
//
// bf16 = the top 16 bits of an fp32. Conversion fp32 -> bf16 rounds to nearest,
// ties to even; values past the largest finite bf16 round to +-inf exactly as
// RNE on the bit pattern does. Every NaN becomes the one canonical quiet NaN
// 0x7fc0: fp32 arithmetic on a NaN returns different bits on the GPU (always
// 0x7fffffff) and on x86 (the input's payload, or 0xffc00000 when created), so
// a rounding point that kept sign and payload would let the same NaN logit land
// in the cache as different bits on the two sides.
// bf16 -> fp32 is exact. The rule is to_bf16_rne (integer arithmetic, host and
// device). to_bf16 is that rule everywhere; on the device it is computed by the
// hardware conversion (cvt.rn.bf16.f32: round to nearest even, subnormals kept) with
// its NaN result (0x7fff) replaced by 0x7fc0, three instructions instead of about
// seven. The two are equal on all 2^32 floats, checked exhaustively on the GPU
// (CoreDevice.Bf16HardwareConversionEqualsTheRuleOnEveryFloat).
#pragma once

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "sparkdraft/core/hd.h"

namespace sparkdraft {

struct bf16 {
  uint16_t bits;
};
static_assert(sizeof(bf16) == 2);

// The bits of x read as a To of the same size, every bit kept: the device's
// reinterpret intrinsic for each of the four casts the core uses, memcpy on the host.
template <class To, class From>
SD_HD To bit_cast_hd(From x) {
  static_assert(sizeof(To) == sizeof(From));
#if SD_ON_DEVICE
  if constexpr (std::is_same_v<To, uint32_t> && std::is_same_v<From, float>) {
    return __float_as_uint(x);
  } else if constexpr (std::is_same_v<To, float> && std::is_same_v<From, uint32_t>) {
    return __uint_as_float(x);
  } else if constexpr (std::is_same_v<To, uint64_t> && std::is_same_v<From, double>) {
    return static_cast<uint64_t>(__double_as_longlong(x));
  } else {
    static_assert(std::is_same_v<To, double> && std::is_same_v<From, uint64_t>);
    return __longlong_as_double(static_cast<long long>(x));
  }
#else
  To to;
  std::memcpy(&to, &x, sizeof to);
  return to;
#endif
}

SD_HD uint32_t f32_bits(float x) { return bit_cast_hd<uint32_t>(x); }
SD_HD float bits_f32(uint32_t u) { return bit_cast_hd<float>(u); }

inline constexpr uint16_t kBf16CanonicalNan = 0x7fc0u;

// fp32 -> bf16, round to nearest even; any NaN -> kBf16CanonicalNan (the rule).
SD_HD bf16 to_bf16_rne(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{kBf16CanonicalNan};
  uint32_t lsb = (u >> 16) & 1u;
  u += 0x7fffu + lsb;
  return bf16{static_cast<uint16_t>(u >> 16)};
}

// The rule's bits (to_bf16_rne), by the hardware conversion on the device.
SD_HD bf16 to_bf16(float x) {
#if SD_ON_DEVICE
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return bf16{x != x ? kBf16CanonicalNan : static_cast<uint16_t>(h)};
#else
  return to_bf16_rne(x);
#endif
}

SD_HD float to_f32(bf16 x) { return bits_f32(static_cast<uint32_t>(x.bits) << 16); }

// Round an fp32 value to the nearest bf16 and back (the rounding point of an op).
SD_HD float round_bf16(float x) { return to_f32(to_bf16(x)); }

SD_HD bool bf16_is_nan(bf16 x) { return (x.bits & 0x7fffu) > 0x7f80u; }

}  // namespace sparkdraft
