// The eager kernels of the query block (ops/query_block.h), the residual's fp32
// widening (ops/embed.h) and the per-head norm (ops/norm.h). The head norm rounds
// where cuda::rms_norm and cpu::rms_norm do: only the output, once, to bf16.
#include "cuda/common/common.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/kernels.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/ops/kv.h"

namespace sparkdraft::cuda {
namespace {

__global__ void prepare_kernel(ops::QueryBlockParams p) {
  pdl_enter();
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  if (t >= p.rows * p.steps) return;
  const int r = t / p.steps, j = t % p.steps;
  const bool pad = p.cache_slots[r] < 0;
  const int64_t a = pad ? 0 : p.anchor_positions[r];
  const int64_t anchor = pad ? 0 : p.anchor_tokens[r];
  const int64_t pos = a + j;
  p.ids[t] = j == 0 ? anchor : p.mask_token;
  p.positions[t] = pos;
  p.token_request[t] = pad ? -1 : r;
  p.slots[t] =
      pad ? -1
          : ops::kv_slot(p.block_tables + static_cast<int64_t>(r) * p.max_pages, p.page_size, pos);
  if (j == 0) {
    p.kv_lens[r] = a + p.steps;
    p.safe_anchor[r] = anchor;
    p.safe_position[r] = a;
  }
}

// One block per drafted row (r, j): a plain copy, so any word size gives the same bits.
__global__ void drafted_rows_kernel(ops::DraftedRowsParams p) {
  pdl_enter();
  const int r = blockIdx.x / p.drafted, j = blockIdx.x % p.drafted;
  const int64_t H = p.hidden;
  const bf16* src = p.in + (static_cast<int64_t>(r) * p.slots + p.first + j) * H;
  bf16* dst = p.out + static_cast<int64_t>(blockIdx.x) * H;
  if (H % 4 == 0 && reinterpret_cast<uintptr_t>(src) % 8 == 0 &&
      reinterpret_cast<uintptr_t>(dst) % 8 == 0) {
    const uint2* s = reinterpret_cast<const uint2*>(src);
    uint2* d = reinterpret_cast<uint2*>(dst);
    for (int64_t i = threadIdx.x; i < H / 4; i += blockDim.x) d[i] = s[i];
  } else {
    for (int64_t i = threadIdx.x; i < H; i += blockDim.x) dst[i] = src[i];
  }
}

__global__ void widen_kernel(const bf16* x, int64_t n, float* out) {
  pdl_enter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = to_f32(x[i]);
}

__global__ void narrow_kernel(const float* x, int64_t n, bf16* out) {
  pdl_enter();
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) out[i] = to_bf16(x[i]);
}

__global__ void __launch_bounds__(detail::kRowThreads)
    head_norm_kernel(bf16* x, int64_t token_stride, int tokens, int heads, int head_dim,
                     const bf16* weight, NormGain gain, float eps) {
  pdl_enter();
  const int lane = threadIdx.x % detail::kWarpSize;
  const int row = blockIdx.x * detail::kRowWarps + threadIdx.x / detail::kWarpSize;
  if (row >= tokens * heads) return;
  bf16* xr = x + static_cast<int64_t>(row / heads) * token_stride +
             static_cast<int64_t>(row % heads) * head_dim;
  const float ss = detail::warp_sum_squares(lane, head_dim, [&](int i) { return to_f32(xr[i]); });
  const float r = detail::rms_scale(ss, head_dim, eps);
  detail::for_lane_elements(lane, head_dim, [&](int i) {
    xr[i] = to_bf16(detail::apply_norm(to_f32(xr[i]), r, weight, gain, i));
  });
}

}  // namespace

void prepare_query_block(const ops::QueryBlockParams& p, cudaStream_t stream) {
  p.check();
  const int total = p.rows * p.steps;
  launch_kernel("query_block_prepare_kernel", prepare_kernel,
                LaunchShape{dim3(detail::blocks_for(total, 128, "prepare_query_block")), dim3(128),
                            0, stream},
                p);
}

void select_drafted_rows(const ops::DraftedRowsParams& p, cudaStream_t stream) {
  p.check();
  const int64_t blocks = static_cast<int64_t>(p.rows) * p.drafted;
  detail::require(blocks <= 2147483647, "select_drafted_rows", "too many rows");
  launch_kernel("drafted_rows_kernel", drafted_rows_kernel,
                LaunchShape{dim3(static_cast<unsigned>(blocks)), dim3(128), 0, stream}, p);
}

void widen(const ops::WidenParams& p, cudaStream_t stream) {
  p.check();
  if (p.n == 0) return;
  launch_kernel("widen_kernel", widen_kernel,
                LaunchShape{dim3(detail::blocks_for(p.n, 256, "widen")), dim3(256), 0, stream}, p.x,
                p.n, p.out);
}

void narrow(const float* x, int64_t n, bf16* out, cudaStream_t stream) {
  detail::require(n >= 0, "narrow", "needs n >= 0");
  if (n == 0) return;
  launch_kernel("narrow_kernel", narrow_kernel,
                LaunchShape{dim3(detail::blocks_for(n, 256, "narrow")), dim3(256), 0, stream}, x, n,
                out);
}

void head_rms_norm(const ops::HeadNormParams& p, cudaStream_t stream) {
  p.check();
  if (p.tokens == 0) return;
  const int rows = p.tokens * p.heads;
  launch_kernel("head_norm_kernel", head_norm_kernel,
                LaunchShape{dim3(detail::blocks_for(rows, detail::kRowWarps, "head_rms_norm")),
                            dim3(detail::kRowThreads), 0, stream},
                p.x, p.token_stride, p.tokens, p.heads, p.head_dim, p.weight, p.gain, p.eps);
}

}  // namespace sparkdraft::cuda
