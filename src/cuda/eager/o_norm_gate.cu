// Attention output norm and gate in place, bit for bit cpu::o_norm_gate.
//
// What it computes, per token t and head h over the head's d values:
//   o = o_norm ? bf16((f32(o_i) * r) * g_i) : o      (cpu::rms_norm's steps over d,
//                                                    gain from o_norm_weight [d])
//   o = gate   ? bf16(f32(o_i) * sigmoid_f32(f32(g[t][h*d + i]))) : o
// Where it rounds: after the norm (bf16), after the gate (bf16); sigmoid_f32 is
// core/math.h's, computed by common/fast_math.cuh's sigmoid_fast (the same bits on every
// float).
// Launch: one warp per (token, head) in the canonical order of the norm, 4 per
// 128-thread block; each lane rewrites only its own elements.
#include "cuda/kernels.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/cuda/check.h"

#include "cuda/common/common.cuh"
#include "cuda/common/fast_math.cuh"
#include "cuda/common/ptx.cuh"

namespace sparkdraft::cuda {
namespace {

__global__ void __launch_bounds__(detail::kRowThreads)
    o_norm_gate_kernel(bf16* o, int64_t units, int heads, int head_dim, const bf16* o_norm_weight,
                       bool o_norm, NormGain gain, float eps, const bf16* g, int64_t g_stride) {
  pdl_enter();
  const int lane = threadIdx.x % detail::kWarpSize;
  const int64_t unit =
      static_cast<int64_t>(blockIdx.x) * detail::kRowWarps + threadIdx.x / detail::kWarpSize;
  if (unit >= units) return;
  const int64_t t = unit / heads;
  const int h = static_cast<int>(unit - t * heads);
  bf16* oh = o + unit * head_dim;  // o is [tokens, heads * head_dim]
  const bf16* gh = g != nullptr ? g + t * g_stride + static_cast<int64_t>(h) * head_dim : nullptr;

  float r = 0.0f;
  if (o_norm)
    r = detail::rms_scale(
        detail::warp_sum_squares(lane, head_dim, [&](int i) { return to_f32(oh[i]); }), head_dim,
        eps);
  detail::for_lane_elements(lane, head_dim, [&](int i) {
    float v = to_f32(oh[i]);
    if (o_norm) v = round_bf16(detail::apply_norm(v, r, o_norm_weight, gain, i));
    if (gh != nullptr) v = round_bf16(__fmul_rn(v, sigmoid_fast(to_f32(gh[i]))));
    oh[i] = to_bf16(v);
  });
}

}  // namespace

void o_norm_gate(const ops::ONormGateParams& p, cudaStream_t stream) {
  p.check();
  if (p.tokens == 0 || (!p.o_norm && p.g == nullptr)) return;  // nothing to do: o stays as it is
  const int64_t units = static_cast<int64_t>(p.tokens) * p.heads;
  const unsigned blocks = detail::blocks_for(units, detail::kRowWarps, "o_norm_gate");
  launch_kernel("o_norm_gate_kernel", o_norm_gate_kernel,
                LaunchShape{dim3(blocks), dim3(detail::kRowThreads), 0, stream}, p.o, units,
                p.heads, p.head_dim, p.o_norm_weight, p.o_norm, p.gain, p.eps, p.g, p.g_stride);
}

}  // namespace sparkdraft::cuda
