// Attention output norm and gate in place, bit for bit cpu::o_norm_gate.
//
// What it computes, per token t and head h over the head's d values:
//   o = o_norm ? bf16((f32(o_i) * r) * g_i) : o      (cpu::rms_norm's steps over d,
//                                                    gain from o_norm_weight [d])
//   o = gate   ? bf16(f32(o_i) * sigmoid_f32(f32(g[t][h*d + i]))) : o
// Where it rounds: after the norm (bf16), after the gate (bf16); sigmoid_f32 is
// core/math.h's, by common/fast_math.cuh's fast_or_slow_n of sigmoid_fast_try (the same
// bits on every float).
// Launch: one warp per (token, head), 4 per 128-thread block: the norm's sum of squares
// in its canonical order (lane l: chunks l, l + 32, ...), then every lane rewrites
// elements lane, lane + 32, ... (elementwise: any lane may take any element once every
// lane's reads of the sum are done, which the sum's butterfly orders), two at a time so
// that their two sigmoid chains overlap (a head of 64 on 32 lanes, not 8 lanes x 8 in
// sequence: 2026-12-06c run 3).
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
  constexpr int kW = detail::kWarpSize;
  for (int i0 = lane; i0 < head_dim; i0 += 2 * kW) {
    const bool two = i0 + kW < head_dim;  // this lane's second element, i0 + 32
    float v[2], x[2], s[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int i = u == 0 || two ? i0 + u * kW : i0;  // a lane without a second redoes i0
      v[u] = to_f32(oh[i]);
      if (o_norm) v[u] = round_bf16(detail::apply_norm(v[u], r, o_norm_weight, gain, i));
      x[u] = gh != nullptr ? to_f32(gh[i]) : 0.0f;
    }
    if (gh != nullptr) {
      fast_or_slow_n<sigmoid_fast_try, sigmoid_slow>(x, s);
#pragma unroll
      for (int u = 0; u < 2; ++u) v[u] = round_bf16(__fmul_rn(v[u], s[u]));
    }
    oh[i0] = to_bf16(v[0]);
    if (two) oh[i0 + kW] = to_bf16(v[1]);
  }
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
