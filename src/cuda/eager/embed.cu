// Embedding lookup, bit for bit cpu::embed.
//
// What it computes: out[r][j] = table[ids[r]][j] for j < hidden.
// Where it rounds: nowhere, exact bf16 copies.
// Launch: one 256-thread block per row, threads striding over the hidden size.
#include "cuda/kernels.h"
#include "sparkdraft/cuda/check.h"

#include "cuda/common/common.cuh"
#include "cuda/common/ptx.cuh"

namespace sparkdraft::cuda {
namespace {

constexpr int kEmbedThreads = 256;

__global__ void __launch_bounds__(kEmbedThreads)
    embed_kernel(const int64_t* ids, const bf16* table, int hidden, bf16* out) {
  pdl_enter();
  const int64_t r = blockIdx.x;
  const bf16* src = table + ids[r] * hidden;
  bf16* dst = out + r * hidden;
  for (int j = threadIdx.x; j < hidden; j += kEmbedThreads) dst[j] = src[j];
}

}  // namespace

void embed(const ops::EmbedParams& p, cudaStream_t stream) {
  p.check();
  if (p.rows == 0) return;
  launch_kernel("embed_kernel", embed_kernel,
                LaunchShape{dim3(static_cast<unsigned>(p.rows)), dim3(kEmbedThreads), 0, stream},
                p.ids, p.table, p.hidden, p.out);
}

}  // namespace sparkdraft::cuda
