// KV insert into the paged cache, bit for bit cpu::kv_insert.
//
// What it computes: for token t with slot s = slots[t] >= 0, head h and j < d:
//   cache[s][h][j] = k[t][h*d + j],  cache[s][h][d + j] = v[t][h*d + j]
// (cache layout [slots, kv_heads, 2*d]); a negative slot (-1 = padding) writes
// nothing. Where it rounds: nowhere, these are exact bf16 copies.
// Launch: one 128-thread block per token, threads striding over kv_heads * d.
#include "cuda/kernels.h"
#include "sparkdraft/cuda/check.h"

#include "cuda/common/common.cuh"
#include "cuda/common/ptx.cuh"

namespace sparkdraft::cuda {
namespace {

constexpr int kKvThreads = 128;

__global__ void __launch_bounds__(kKvThreads)
    kv_insert_kernel(const bf16* k, int64_t k_stride, const bf16* v, int64_t v_stride, int kv_heads,
                     int head_dim, const int64_t* slots, bf16* cache) {
  pdl_enter();
  const int64_t t = blockIdx.x;
  const int64_t slot = slots[t];
  if (slot < 0) return;
  const int width = kv_heads * head_dim;
  const bf16* kt = k + t * k_stride;
  const bf16* vt = v + t * v_stride;
  bf16* dst = cache + slot * width * 2;
  for (int e = threadIdx.x; e < width; e += kKvThreads) {
    const int h = e / head_dim;
    const int j = e - h * head_dim;
    bf16* head = dst + static_cast<int64_t>(h) * 2 * head_dim;
    head[j] = kt[e];
    head[head_dim + j] = vt[e];
  }
}

}  // namespace

void kv_insert(const ops::KvInsertParams& p, cudaStream_t stream) {
  p.check();
  if (p.tokens == 0) return;
  launch_kernel("kv_insert_kernel", kv_insert_kernel,
                LaunchShape{dim3(static_cast<unsigned>(p.tokens)), dim3(kKvThreads), 0, stream},
                p.k, p.k_stride, p.v, p.v_stride, p.kv_heads, p.head_dim, p.slots, p.cache);
}

}  // namespace sparkdraft::cuda
