// The confidence head's element arithmetic (contract.md section 9), host and device:
// the CPU reference (src/cpu/confidence.cpp) and the GPU kernels call these, so the
// bits are the same by construction.
//
//   x = [h ; e]   h: the final-normed hidden row (bf16, H), e = w1[prev] (bf16, r'),
//                 both widened to fp32 (exact); r' = 0 for a head without the Markov part
//   d = canonical_dot(H + r', x, w)      core/reduce.h: 32 lanes of 8-element chunks,
//                 one fma per term from +0 in increasing i, the butterfly over lanes
//   z = d + f32(b)                       one fp32 addition (nearest even)
//   c = sigmoid_f32(z)                   core/math.h (one rounding of a double evaluation)
//   with per-position calibration (STS, T_j finite > 0):
//   c = sigmoid_f32(z / T_j)             one IEEE fp32 division (nearest even) first
// Survival products: a_0 = c_0, a_j = a_{j-1} * c_j (fp32 multiply, nearest even).
#pragma once

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/hd.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/core/reduce.h"

namespace sparkdraft {

// Lane `lane`'s partial of d over n = hidden + rank inputs (h [hidden], e [rank],
// w [hidden + rank]).
SD_HD float confidence_lane_partial(int lane, const bf16* h, int hidden, const bf16* e, int rank,
                                    const bf16* w) {
  return canonical_lane_partial(lane, hidden + rank, [&](int i, float& x, float& y) {
    x = to_f32(i < hidden ? h[i] : e[i - hidden]);
    y = to_f32(w[i]);
  });
}

// c from the combined dot product d and the bias; `temperature` > 0 calibrates (z / T),
// 0 means none (no division: the uncalibrated head's bits).
SD_HD float confidence_finish(float d, bf16 bias, float temperature = 0.0f) {
  const float z = fadd_rn(d, to_f32(bias));
  return sigmoid_f32(temperature > 0.0f ? fdiv_rn(z, temperature) : z);
}

// The whole value on one thread (the CPU reference).
SD_HD float confidence_value(const bf16* h, int hidden, const bf16* e, int rank, const bf16* w,
                             bf16 bias, float temperature = 0.0f) {
  float p[kReduceLanes];
  for (int l = 0; l < kReduceLanes; ++l) p[l] = confidence_lane_partial(l, h, hidden, e, rank, w);
  return confidence_finish(canonical_combine(p), bias, temperature);
}

// a[j] = c[0] * ... * c[j], left to right in fp32.
SD_HD void survival_products(const float* c, int n, float* a) {
  float run = 1.0f;
  for (int j = 0; j < n; ++j) {
    run = j == 0 ? c[0] : fmul_rn(run, c[j]);
    a[j] = run;
  }
}

// The static threshold (contract.md section 9.3): the number of leading c[j] >= t
// (a NaN fails the comparison).
SD_HD int threshold_length(const float* c, int n, float t) {
  int k = 0;
  while (k < n && c[k] >= t) ++k;
  return k;
}

}  // namespace sparkdraft
