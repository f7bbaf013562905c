// Rotary position embedding in place, bit for bit cpu::rope.
//
// What it computes: for each token, head and frequency i < d/2, with
// c = table[pos][i], s = table[pos][d/2 + i] (the fp32 table cpu::rope_table
// computed on the host, uploaded unchanged):
//   (x1, x2) -> (x1*c - x2*s, x2*c + x1*s)
// over the pair (i, i + d/2) (NeoX) or (2i, 2i + 1) (GPT-J).
// Where it rounds: the two outputs, once each, to bf16; the products and the
// subtract/add are separate fp32 operations (no fma), as on the CPU.
// Launch: one thread per pair, 256 threads per block; pairs are disjoint, so the
// update in place needs no synchronization.
#include "cuda/kernels.h"
#include "sparkdraft/cuda/check.h"

#include "cuda/common/common.cuh"
#include "cuda/common/ptx.cuh"

namespace sparkdraft::cuda {
namespace {

constexpr int kRopeThreads = 256;

__global__ void __launch_bounds__(kRopeThreads)
    rope_kernel(bf16* x, int64_t x_stride, int64_t pairs, int heads, int head_dim,
                const int64_t* positions, const float* table, bool gptj) {
  pdl_enter();
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * kRopeThreads + threadIdx.x;
  if (idx >= pairs) return;
  const int half = head_dim / 2;
  const int i = static_cast<int>(idx % half);
  const int64_t head_index = idx / half;
  const int h = static_cast<int>(head_index % heads);
  const int64_t t = head_index / heads;

  const float* row = table + positions[t] * head_dim;
  const float c = row[i];
  const float s = row[half + i];
  bf16* head = x + t * x_stride + static_cast<int64_t>(h) * head_dim;
  const int i1 = gptj ? 2 * i : i;
  const int i2 = gptj ? 2 * i + 1 : i + half;
  const float x1 = to_f32(head[i1]);
  const float x2 = to_f32(head[i2]);
  head[i1] = to_bf16(__fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s)));
  head[i2] = to_bf16(__fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s)));
}

}  // namespace

void rope(const ops::RopeParams& p, cudaStream_t stream) {
  p.check();
  if (p.tokens == 0) return;
  const int64_t pairs = static_cast<int64_t>(p.tokens) * p.heads * (p.head_dim / 2);
  const unsigned blocks = detail::blocks_for(pairs, kRopeThreads, "rope");
  launch_kernel("rope_kernel", rope_kernel,
                LaunchShape{dim3(blocks), dim3(kRopeThreads), 0, stream}, p.x, p.x_stride, pairs,
                p.heads, p.head_dim, p.positions, p.table, p.style == RopeStyle::gptj);
}

}  // namespace sparkdraft::cuda
