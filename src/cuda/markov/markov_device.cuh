// Device pieces shared by the eager and the fused Markov kernels, so that both
// compute every value with the same code: the step logit (rounding points of
// cpu::step_logits), the candidate rule (core/sampling.h `better` on (score, id)),
// its warp reduction, and the PTX of the fused path (cp.async, programmatic
// dependent launch).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/markov/markov_internal.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/core/sampling.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/cuda/markov.h"

namespace sparkdraft::cuda::markov_detail {

inline constexpr int kWarp = 32;
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
// t = f32(s) * multiplier, cap: t = tanh_f32(t * inv_cap) * cap; l = bf16(t).
__device__ __forceinline__ bf16 step_logit(bf16 base, bf16 bias, const ops::LogitTransform& t) {
  const float s = round_bf16(__fadd_rn(to_f32(base), to_f32(bias)));
  if (!t.enabled) return to_bf16(s);
  float x = __fmul_rn(s, t.multiplier);
  if (t.has_cap) x = __fmul_rn(tanh_f32(__fmul_rn(x, t.inv_cap)), t.cap);
  return to_bf16(x);
}

// The scored candidate of logit l at global id v (core/sampling.h).
__device__ __forceinline__ MarkovCandidate score(bf16 l, float temperature, uint32_t step_seed,
                                                 int32_t v) {
  return MarkovCandidate{noised_score(to_f32(l), temperature, step_seed, v), v};
}

// ---- PTX of the fused path ---------------------------------------------------------
__device__ __forceinline__ void grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

__device__ __forceinline__ void launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// 16 bytes global -> shared, bypassing L1; src_bytes 0 fills zeros.
__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  const uint32_t s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(src_bytes)
               : "memory");
}

__device__ __forceinline__ void cp_async_commit() {
  asm volatile("cp.async.commit_group;\n" ::: "memory");
}

// Waits until at most `pending` (0..2: rings of up to kMaxStages = 4 stages)
// committed groups of this thread are in flight.
__device__ __forceinline__ void cp_async_wait(int pending) {
  if (pending <= 0)
    asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  else if (pending == 1)
    asm volatile("cp.async.wait_group 1;\n" ::: "memory");
  else
    asm volatile("cp.async.wait_group 2;\n" ::: "memory");
}

}  // namespace sparkdraft::cuda::markov_detail
