// Device helpers of the benchmarks and their tests (common/harness.h): seeded fills
// (Philox of core/philox.h keyed by the seed, counter = element index, so any size
// is built on the GPU in one pass), an SM clock probe and the tensor-core peak.
#include <cuda_runtime.h>

#include <cstdint>

#include <algorithm>
#include <vector>

#include "common/harness.h"
#include "cuda/common/mma_probe.h"
#include "cuda/common/ptx.cuh"
#include "cuda/common/wgmma.cuh"
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

// tensor_peak_tflops's kernel: A (64 x 16) and B (256 x 16) bf16 in shared memory, K-major
// without swizzle (core matrix (row block i, k block j) at byte 128 (2 i + j): LBO 128, SBO
// 256), seeded in [-1, 1); each warpgroup chains `groups` x 16 wgmma.m64n256k16 into its
// accumulators and stores one of them where it can never equal `never`.
constexpr int kPeakWgmmas = 16;  // a commit group
__global__ void tensor_peak_kernel(int groups, uint64_t seed, float never, float* sink) {
  __shared__ __align__(128) bf16 a[64 * 16];
  __shared__ __align__(128) bf16 b[256 * 16];
  for (int i = threadIdx.x; i < 64 * 16 + 256 * 16; i += blockDim.x) {
    const uint32_t x = philox_randint(static_cast<int64_t>(seed), static_cast<int64_t>(i));
    const bf16 v = to_bf16(__fadd_rn(-1.0f, __fmul_rn(static_cast<float>(x >> 8), 0x1p-23f)));
    if (i < 64 * 16)
      a[i] = v;
    else
      b[i - 64 * 16] = v;
  }
  fence_proxy_async();
  __syncthreads();
  const uint64_t da = wgmma_desc(smem_u32(a), 128, 256), db = wgmma_desc(smem_u32(b), 128, 256);
  float d[128];
#pragma unroll
  for (int i = 0; i < 128; ++i) d[i] = 0.0f;
  wgmma_fence_operands(d);
  wgmma_fence();
  for (int g = 0; g < groups; ++g) {
#pragma unroll
    for (int k = 0; k < kPeakWgmmas; ++k) wgmma_m64n256k16_ss(d, da, db);
    wgmma_commit();
    wgmma_wait<1>();
  }
  wgmma_wait<0>();
  wgmma_fence_operands(d);
  float sum = 0.0f;
#pragma unroll
  for (int i = 0; i < 128; ++i) sum = __fadd_rn(sum, d[i]);
  if (sum == never) sink[blockIdx.x * blockDim.x + threadIdx.x] = sum;
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

double tensor_peak_tflops(const GpuInfo& gpu, cudaStream_t stream) {
  const WgmmaStatus& wg = wgmma_self_test();
  if (!wg.usable) throw InvalidArgument("tensor_peak_tflops: no wgmma here: " + wg.why);
  // About 0.5 ms a launch on an H100 or H200 at 2 warpgroups an SM.
  constexpr int kGroups = 256;
  DeviceBuffer<float> sink(static_cast<size_t>(gpu.sm_count) * 384);
  EventPair ev;
  double best = 0;
  for (int warpgroups : {2, 3}) {
    std::vector<double> us;
    for (int i = 0; i < 11; ++i) {
      const double t = event_time_us(stream, ev, [&] {
        tensor_peak_kernel<<<gpu.sm_count, 128 * warpgroups, 0, stream>>>(kGroups, 20261206 + i,
                                                                          0x1p100f, sink.data());
        SD_CHECK_LAUNCH();
      });
      if (i >= 2) us.push_back(t);
    }
    const double flops = 2.0 * 64 * 256 * 16 * kPeakWgmmas * kGroups * warpgroups * gpu.sm_count;
    best = std::max(best, flops / (median(us) * 1e-6) / 1e12);
  }
  return best;
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
