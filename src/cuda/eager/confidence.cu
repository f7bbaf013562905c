// The confidence head, bit for bit cpu::confidence (see cuda/kernels.h).
//
// What it computes: per (row r, step j), c = sigmoid_f32(d + f32(b)) (divided by the
// step's calibration temperature first when the params carry them) with d the
// canonical dot product of [h ; w1[prev]] and w (prev: the anchor at j = 0, else
// the token of step j - 1); a padding row (cache slot -1) writes +0.
// Where it rounds: the fma of each term (fp32), the butterfly's fp32 adds, the
// bias add, the sigmoid's one rounding (core/confidence.h); inputs widen exactly.
#include "cuda/kernels.h"
#include "sparkdraft/core/confidence.h"
#include "sparkdraft/cuda/check.h"

#include "cuda/common/common.cuh"
#include "cuda/common/launch.h"
#include "cuda/common/ptx.cuh"

namespace sparkdraft::cuda {
namespace {

__global__ void __launch_bounds__(detail::kRowThreads)
    confidence_kernel(ops::ConfidenceParams p, int64_t values) {
  pdl_enter();
  const int lane = threadIdx.x % detail::kWarpSize;
  const int64_t t =
      static_cast<int64_t>(blockIdx.x) * detail::kRowWarps + threadIdx.x / detail::kWarpSize;
  if (t >= values) return;  // whole warps leave together
  const int64_t r = t / p.steps, j = t % p.steps;
  if (!p.runs(r, j)) {
    if (lane == 0) p.out[t] = 0.0f;
    return;
  }
  const int64_t prev = j == 0 ? p.anchor_tokens[r] : p.draft_tokens[t - 1];
  const bf16* e = p.rank > 0 ? p.w1 + prev * p.rank : nullptr;
  const float partial =
      confidence_lane_partial(lane, p.hidden_states + t * p.hidden, p.hidden, e, p.rank, p.weight);
  const float d = warp_canonical_combine(partial);
  if (lane == 0) p.out[t] = confidence_finish(d, *p.bias, p.temperature(static_cast<int>(j)));
}

}  // namespace

void confidence(const ops::ConfidenceParams& p, cudaStream_t stream) {
  p.check();
  const int64_t values = static_cast<int64_t>(p.rows) * p.steps;
  if (values == 0) return;
  const unsigned blocks = detail::blocks_for(values, detail::kRowWarps, "confidence");
  launch_kernel("confidence_kernel", confidence_kernel,
                LaunchShape{dim3(blocks), dim3(detail::kRowThreads), 0, stream}, p, values);
}

}  // namespace sparkdraft::cuda
