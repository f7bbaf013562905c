// Device helpers of the benchmarks and their tests (common/harness.h): seeded fills
// (Philox of core/philox.h keyed by the seed, counter = element index, so any size
// is built on the GPU in one pass) and an SM clock probe.
#include <cuda_runtime.h>

#include <cstdint>

#include "common/harness.h"
#include "sparkdraft/core/philox.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {
namespace {

__global__ void fill_bf16_kernel(bf16* dst, size_t n, uint64_t seed, float lo, float span) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint32_t x = philox_randint(static_cast<int64_t>(seed), static_cast<int64_t>(i));
    const float u = __fmul_rn(static_cast<float>(x >> 8), 0x1p-24f);
    dst[i] = to_bf16(__fadd_rn(lo, __fmul_rn(span, u)));
  }
}

__global__ void fill_ids_kernel(int64_t* dst, size_t n, uint64_t seed, int64_t lo, int64_t span) {
  for (size_t i = blockIdx.x * static_cast<size_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<size_t>(gridDim.x) * blockDim.x) {
    const uint32_t x = philox_randint(static_cast<int64_t>(seed), static_cast<int64_t>(i));
    dst[i] = lo + static_cast<int64_t>(x % static_cast<uint64_t>(span));
  }
}

__global__ void clock_kernel(int64_t spin_ns, long long* cycles, unsigned long long* ns) {
  unsigned long long t0, t1;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  const long long c0 = clock64();
  do {
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t1));
  } while (t1 - t0 < static_cast<unsigned long long>(spin_ns));
  *cycles = clock64() - c0;
  *ns = t1 - t0;
}

int fill_blocks(size_t n) {
  const size_t blocks = (n + 255) / 256;
  return static_cast<int>(blocks < 4096 ? (blocks > 0 ? blocks : 1) : 4096);
}

}  // namespace

void fill_uniform_bf16(bf16* dst, size_t n, uint64_t seed, float lo, float hi,
                       cudaStream_t stream) {
  if (n == 0) return;
  fill_bf16_kernel<<<fill_blocks(n), 256, 0, stream>>>(dst, n, seed, lo, hi - lo);
  SD_CHECK_LAUNCH();
}

void fill_uniform_ids(int64_t* dst, size_t n, uint64_t seed, int64_t lo, int64_t span,
                      cudaStream_t stream) {
  if (span < 1) throw InvalidArgument("fill_uniform_ids: span must be >= 1");
  if (n == 0) return;
  fill_ids_kernel<<<fill_blocks(n), 256, 0, stream>>>(dst, n, seed, lo, span);
  SD_CHECK_LAUNCH();
}

int measure_sm_clock_mhz(int64_t spin_ns) {
  long long* cycles = nullptr;
  unsigned long long* ns = nullptr;
  SD_CUDA_CHECK(cudaMalloc(&cycles, sizeof(long long)));
  SD_CUDA_CHECK(cudaMalloc(&ns, sizeof(unsigned long long)));
  clock_kernel<<<1, 1>>>(spin_ns, cycles, ns);
  SD_CHECK_LAUNCH();
  long long c = 0;
  unsigned long long t = 0;
  SD_CUDA_CHECK(cudaMemcpy(&c, cycles, sizeof(c), cudaMemcpyDeviceToHost));
  SD_CUDA_CHECK(cudaMemcpy(&t, ns, sizeof(t), cudaMemcpyDeviceToHost));
  cudaFree(cycles);
  cudaFree(ns);
  return t > 0 ? static_cast<int>(static_cast<double>(c) * 1000.0 / static_cast<double>(t)) : 0;
}

}  // namespace sparkdraft::cuda
