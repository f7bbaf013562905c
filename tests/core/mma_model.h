// An independent model of the tensor-core step in fp64 for tests (the rules of
// core/mma.h: zero products and a zero c do not set E, E >= -133, zero is +0) (finite inputs;
// steps with an inf or NaN defer to the twin, whose special values are pinned by
// tests/core/test_mma.cpp and the device fixture): products exact in double,
// alignment by scaling and trunc, the final truncation through the nearest float.
#pragma once

#include <algorithm>
#include <cfloat>
#include <cmath>
#include <cstdint>

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/mma.h"

namespace sparkdraft::test {

inline uint32_t mma_step_f64(uint32_t c, const bf16* a, const bf16* b) {
  bool special = (c & 0x7f800000u) == 0x7f800000u;
  for (int i = 0; i < 16; ++i)
    special = special || (a[i].bits & 0x7f80u) == 0x7f80u || (b[i].bits & 0x7f80u) == 0x7f80u;
  if (special) return mma_step_bits(c, a, b);
  auto expo = [](float x) { return (x == 0.0f || std::fabs(x) < FLT_MIN) ? -126 : std::ilogb(x); };
  const float cf = bits_f32(c);
  int E = cf != 0.0f ? std::max(expo(cf), kMmaMinExp) : kMmaMinExp;
  double p[16];
  for (int i = 0; i < 16; ++i) {
    const float x = to_f32(a[i]), y = to_f32(b[i]);
    p[i] = static_cast<double>(x) * static_cast<double>(y);
    if (p[i] != 0.0) E = std::max(E, expo(x) + expo(y));  // zero products do not set E
  }
  double sum = std::trunc(std::ldexp(static_cast<double>(cf), 25 - E));
  for (int i = 0; i < 16; ++i) sum += std::trunc(std::ldexp(p[i], 25 - E));
  const double v = std::ldexp(sum, E - 25);
  if (v == 0.0) return 0u;
  if (std::fabs(v) >= std::ldexp(1.0, 128)) return v > 0 ? 0x7f800000u : 0xff800000u;
  float f = static_cast<float>(v);
  if (std::isinf(f) || std::fabs(static_cast<double>(f)) > std::fabs(v))
    f = std::nextafter(f, 0.0f);
  return f == 0.0f ? 0u : f32_bits(f);  // truncated to zero: +0
}

// The chain over K of two contiguous rows, steps of 16 in increasing k (or in
// decreasing step order when `reverse`, to show a test sees the order), zero
// padded at the end.
inline float mma_chain_f64(const bf16* a, const bf16* b, int K, bool reverse = false) {
  const int steps = (K + 15) / 16;
  uint32_t c = 0;
  for (int s = 0; s < steps; ++s) {
    const int st = reverse ? steps - 1 - s : s;
    bf16 pa[16], pb[16];
    for (int i = 0; i < 16; ++i) {
      const int k = st * 16 + i;
      pa[i] = k < K ? a[k] : bf16{0};
      pb[i] = k < K ? b[k] : bf16{0};
    }
    c = mma_step_f64(c, pa, pb);
  }
  return bits_f32(c);
}

}  // namespace sparkdraft::test
