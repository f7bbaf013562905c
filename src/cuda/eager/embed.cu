// Embedding lookup, bit for bit cpu::embed.
//
// What it computes: out[r][j] = table[ids[r]][j] for j < hidden.
// Where it rounds: nowhere, exact bf16 copies.
// Launch: one 256-thread block per row, threads striding over the hidden size.
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/kernels.h"

#include "cuda/eager/common.cuh"

namespace sparkdraft::cuda {
namespace {

constexpr int kEmbedThreads = 256;

__global__ void __launch_bounds__(kEmbedThreads)
    embed_kernel(const int64_t* ids, const bf16* table, int hidden, bf16* out) {
  const int64_t r = blockIdx.x;
  const bf16* src = table + ids[r] * hidden;
  bf16* dst = out + r * hidden;
  for (int j = threadIdx.x; j < hidden; j += kEmbedThreads) dst[j] = src[j];
}

}  // namespace

void embed(const int64_t* ids, int rows, const bf16* table, int hidden, bf16* out,
           cudaStream_t stream) {
  using detail::require;
  require(rows >= 0, "embed", "rows must be >= 0, got " + std::to_string(rows));
  require(hidden >= 1, "embed", "hidden must be >= 1, got " + std::to_string(hidden));
  if (rows == 0) return;
  require(ids != nullptr && table != nullptr && out != nullptr, "embed",
          "ids, table and out must not be null");
  embed_kernel<<<static_cast<unsigned>(rows), kEmbedThreads, 0, stream>>>(ids, table, hidden, out);
  SD_CHECK_LAUNCH();
}

}  // namespace sparkdraft::cuda
