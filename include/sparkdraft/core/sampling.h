// The sampling rule of the contract (contract.md section 4), host and device.
//
//   T > 0: z = f32(l) / T + g   (IEEE fp32 division, then fp32 add)
//   T = 0: z = f32(l)            (no noise)
//   token = the lowest id whose z is NaN, if any; else the lowest id of the maximum.
//
// `better` is a total preference on (z, id) pairs that is associative and
// commutative, so a reduction in any tree shape, block size or vocab split
// returns the same winner.
#pragma once

#include <cstdint>

#include "sparkdraft/core/hd.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/core/philox.h"

namespace sparkdraft {

// Gumbel noise of one uniform: g = -log(-log1p(-u)), our correctly rounded log/log1p.
SD_HD float gumbel_noise(float u) { return -log_f32(-log1p_f32(-u)); }

// The range of the noise. u lies in [kUniformScale, 0x1.fffffep-1] (philox.h) and g is
// non-increasing in u (log_f32 and log1p_f32 are correctly rounded, hence monotone), so
// every g the sampler draws lies in [kGumbelMin, kGumbelMax], the noise of the two ends
// (tests/core/test_sampling.cpp computes both with gumbel_noise and checks these bits).
inline constexpr float kGumbelMax = 0x1.57cd0ep+4f;   // gumbel_noise(0x1.fffffep-32), 21.49
inline constexpr float kGumbelMin = -0x1.67e092p+1f;  // gumbel_noise(0x1.fffffep-1), -2.81

// Noise of vocab id v at a step (gs = draft_step_seed(seed, a, j)).
SD_HD float draft_noise(uint32_t step_seed, int64_t vocab_id) {
  return gumbel_noise(philox_uniform(step_seed, vocab_id));
}

// The noised score of a logit.
SD_HD float noised_score(float logit, float temperature, uint32_t step_seed, int64_t vocab_id) {
  if (!(temperature > 0.0f)) return logit;
#if SD_ON_DEVICE
  return __fadd_rn(__fdiv_rn(logit, temperature), draft_noise(step_seed, vocab_id));
#else
  const float scaled = logit / temperature;
  return scaled + draft_noise(step_seed, vocab_id);
#endif
}

SD_HD bool is_nan_f32(float x) { return x != x; }

// True when (va, ia) wins over (vb, ib): NaN first (lower id among NaNs), then the
// larger value, then the lower id. ia != ib for distinct entries.
SD_HD bool better(float va, int64_t ia, float vb, int64_t ib) {
  const bool an = is_nan_f32(va), bn = is_nan_f32(vb);
  if (an || bn) return an && bn ? ia < ib : an;
  if (va != vb) return va > vb;
  return ia < ib;
}

}  // namespace sparkdraft
