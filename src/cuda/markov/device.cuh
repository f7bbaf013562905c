// Device pieces shared by the eager and the fused Markov kernels, so that both
// compute every value with the same code: the step logit (rounding points of
// cpu::step_logits), the candidate rule (core/sampling.h `better` on (score, id)),
// and its warp reduction. (The PTX of the fused path is in cuda/common/ptx.cuh.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/fast_math.cuh"
#include "cuda/markov/detail.h"
#include "cuda/markov/markov.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/core/sampling.h"
#include "sparkdraft/ops/markov.h"

namespace sparkdraft::cuda::markov_detail {

inline constexpr int kThreads = 256;  // every Markov kernel block but the per-row ones
inline constexpr int kWarps = kThreads / kWarp;

// Loses to every real candidate: -inf with an id past any vocabulary.
__device__ __forceinline__ MarkovCandidate no_candidate() {
  return MarkovCandidate{__int_as_float(static_cast<int>(0xff800000u)), 0x7fffffff};
}

__device__ __forceinline__ bool wins(const MarkovCandidate& a, const MarkovCandidate& b) {
  return better(a.value, a.id, b.value, b.id);
}

// Best of the 32 lanes' candidates; every lane gets it. `better` is a total
// order on distinct ids, so the xor butterfly gives every lane the same winner.
__device__ __forceinline__ MarkovCandidate warp_best(MarkovCandidate c) {
  for (int off = kWarp / 2; off > 0; off /= 2) {
    MarkovCandidate o;
    o.value = __shfl_xor_sync(0xffffffffu, c.value, off);
    o.id = __shfl_xor_sync(0xffffffffu, c.id, off);
    if (wins(o, c)) c = o;
  }
  return c;
}

// cpu::step_logits for one entry: s = bf16(base + bias); with the transform
// t = f32(s) * multiplier, cap: t = tanh_f32(t * inv_cap) * cap; l = bf16(t). Without
// it l = bf16(f32(s)) = s: to_bf16 returns a canonical NaN or a value bf16 holds
// exactly, and converting that back and forth keeps its bits.
// Its two halves: the sum s (step_sum) and, where the transform is enabled, l from s
// (step_transform), for callers that run the transform of several entries under one
// branch.
__device__ __forceinline__ bf16 step_sum(bf16 base, bf16 bias) {
  return to_bf16(__fadd_rn(to_f32(base), to_f32(bias)));
}
__device__ __forceinline__ bf16 step_transform(bf16 sb, const ops::LogitTransform& t) {
  const float s = to_f32(sb);
  float x = __fmul_rn(s, t.multiplier);
  if (t.has_cap) x = __fmul_rn(tanh_f32(__fmul_rn(x, t.inv_cap)), t.cap);
  return to_bf16(x);
}
// step_transform of E entries at once (the transform enabled), its tanh by tanh_fast_try
// and fast_or_slow_n: the same bits (CudaFastMath).
template <int E>
__device__ __forceinline__ void step_transform_n(bf16 (&l)[E], const ops::LogitTransform& t) {
  float x[E];
#pragma unroll
  for (int i = 0; i < E; ++i) x[i] = __fmul_rn(to_f32(l[i]), t.multiplier);
  if (t.has_cap) {
    float arg[E], th[E];
#pragma unroll
    for (int i = 0; i < E; ++i) arg[i] = __fmul_rn(x[i], t.inv_cap);
    fast_or_slow_n<tanh_fast_try, tanh_slow>(arg, th);
#pragma unroll
    for (int i = 0; i < E; ++i) x[i] = __fmul_rn(th[i], t.cap);
  }
#pragma unroll
  for (int i = 0; i < E; ++i) l[i] = to_bf16(x[i]);
}
__device__ __forceinline__ bf16 step_logit(bf16 base, bf16 bias, const ops::LogitTransform& t) {
  const bf16 sb = step_sum(base, bias);
  return t.enabled ? step_transform(sb, t) : sb;
}

// The scored candidate of logit l at global id v (core/sampling.h).
__device__ __forceinline__ MarkovCandidate score(bf16 l, float temperature, uint32_t step_seed,
                                                 int32_t v) {
  return MarkovCandidate{noised_score(to_f32(l), temperature, step_seed, v), v};
}

}  // namespace sparkdraft::cuda::markov_detail
