// Attention output norm and gate in place, bit for bit cpu::o_norm_gate.
//
// What it computes, per token t and head h over the head's d values:
//   o = o_norm ? bf16((f32(o_i) * r) * g_i) : o      (cpu::rms_norm's steps over d,
//                                                    gain from o_norm_weight [d])
//   o = gate   ? bf16(f32(o_i) * sigmoid_f32(f32(g[t][h*d + i]))) : o
// Where it rounds: after the norm (bf16), after the gate (bf16); sigmoid_f32 is
// core/math.h's, computed by common/fast_math.cuh's sigmoid_fast (the same bits on every
// float).
// Launch: a warp holds 32 / S heads, S = the power of two >= the head's 8-element chunks
// (at most 32: a head of 64 is 8 chunks, four heads a warp), 4 warps a 128-thread block.
// Lane s of a head's S lanes is the norm's canonical lane s (chunks s, s + 32, ...); every
// canonical lane from S on holds +0 (it owns no chunk), so the canonical butterfly's steps
// 16 .. S add +0 to the sums of squares (>= +0: exact) and its steps S / 2 .. 1 are the
// group's own xor shuffles (group_canonical_combine, as the fused QKV front's heads): the
// same bits as a warp a head. Then the head's S lanes rewrite its elements s, s + S, ...
// (elementwise: any lane may take any element once every lane's reads of the sum are done,
// which the butterfly orders), two at a time so that their two sigmoid chains overlap.
// (2026-12-06c run 3: one warp a head of 64 on all 32 lanes, 84 us a step at 32 requests of
// muse, bound by its 433 instructions a head, run 4.)
#include "cuda/kernels.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/cuda/check.h"

#include "cuda/common/common.cuh"
#include "cuda/common/fast_math.cuh"
#include "cuda/common/ptx.cuh"

namespace sparkdraft::cuda {
namespace {

__global__ void __launch_bounds__(detail::kRowThreads)
    o_norm_gate_kernel(bf16* o, int64_t units, int heads, int head_dim, int seg_log2,
                       const bf16* o_norm_weight, bool o_norm, NormGain gain, float eps,
                       const bf16* g, int64_t g_stride) {
  pdl_enter();
  const int lane = threadIdx.x % detail::kWarpSize, seg = 1 << seg_log2;
  const int sl = lane & (seg - 1);  // the lane's canonical lane in its head
  const int64_t warp =
      static_cast<int64_t>(blockIdx.x) * detail::kRowWarps + threadIdx.x / detail::kWarpSize;
  const int64_t unit = (warp << (5 - seg_log2)) + (lane >> seg_log2);
  if ((warp << (5 - seg_log2)) >= units) return;  // the whole warp: no head of it is real
  const bool real = unit < units;                 // else the lane only joins the shuffles
  const int64_t t = real ? unit / heads : 0;
  const int h = real ? static_cast<int>(unit - t * heads) : 0;
  bf16* oh = o + (real ? unit : 0) * head_dim;  // o is [tokens, heads * head_dim]
  const bf16* gh = g != nullptr ? g + t * g_stride + static_cast<int64_t>(h) * head_dim : nullptr;

  float r = 0.0f;
  if (o_norm) {
    float ss = real ? canonical_lane_partial(sl, head_dim,
                                             [&](int i, float& a, float& b) {
                                               a = to_f32(oh[i]);
                                               b = a;
                                             })
                    : 0.0f;
    r = detail::rms_scale(detail::group_canonical_combine(ss, seg), head_dim, eps);
  }
  if (!real) return;
  for (int i0 = sl; i0 < head_dim; i0 += 2 * seg) {
    const bool two = i0 + seg < head_dim;  // this lane's second element, i0 + seg
    float v[2], x[2], s[2];
    bool ok[2];
#pragma unroll
    for (int u = 0; u < 2; ++u) {
      const int i = u == 0 || two ? i0 + u * seg : i0;  // a lane without a second redoes i0
      v[u] = to_f32(oh[i]);
      if (o_norm) v[u] = round_bf16(detail::apply_norm(v[u], r, o_norm_weight, gain, i));
      if (gh != nullptr) {
        x[u] = to_f32(gh[i]);
        s[u] = sigmoid_fast_try(x[u], &ok[u]);
      }
    }
    if (gh != nullptr) {
#pragma unroll
      for (int u = 0; u < 2; ++u) {
        if (!ok[u]) s[u] = sigmoid_slow(x[u]);
        v[u] = round_bf16(__fmul_rn(v[u], s[u]));
      }
    }
    oh[i0] = to_bf16(v[0]);
    if (two) oh[i0 + seg] = to_bf16(v[1]);
  }
}

}  // namespace

void o_norm_gate(const ops::ONormGateParams& p, cudaStream_t stream) {
  p.check();
  if (p.tokens == 0 || (!p.o_norm && p.g == nullptr)) return;  // nothing to do: o stays as it is
  const int64_t units = static_cast<int64_t>(p.tokens) * p.heads;
  const int chunks = (p.head_dim + kReduceChunk - 1) / kReduceChunk;
  int seg_log2 = 0;
  while ((1 << seg_log2) < chunks && seg_log2 < 5) ++seg_log2;
  const int64_t warps = (units + (int64_t{32} >> seg_log2) - 1) >> (5 - seg_log2);
  const unsigned blocks = detail::blocks_for(warps, detail::kRowWarps, "o_norm_gate");
  launch_kernel("o_norm_gate_kernel", o_norm_gate_kernel,
                LaunchShape{dim3(blocks), dim3(detail::kRowThreads), 0, stream}, p.o, units,
                p.heads, p.head_dim, seg_log2, p.o_norm_weight, p.o_norm, p.gain, p.eps, p.g,
                p.g_stride);
}

}  // namespace sparkdraft::cuda
