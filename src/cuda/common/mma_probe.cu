// mma_probe and mma_self_test (include/sparkdraft/cuda/mma.h): one warp per case
// loads the case's A, B and C into the instruction's fragments (common/mma.cuh),
// runs one mma.sync and stores D; the host compares every element with the twin.
#include <cuda_runtime.h>

#include <cinttypes>
#include <cstdio>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "cuda/common/mma.cuh"
#include "sparkdraft/core/mma.h"
#include "sparkdraft/core/mma_probe.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/mma.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {
namespace {

__device__ __forceinline__ uint32_t pack2(bf16 lo, bf16 hi) {
  return static_cast<uint32_t>(lo.bits) | (static_cast<uint32_t>(hi.bits) << 16);
}

__global__ void mma_probe_kernel(const MmaCase* cases, int64_t count, uint32_t* d_out) {
  const int64_t i = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32;
  const int lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  if (i >= count) return;  // whole warps
  const MmaCase& cs = cases[i];
  const uint32_t a[4] = {pack2(cs.a[g][2 * t], cs.a[g][2 * t + 1]),
                         pack2(cs.a[g + 8][2 * t], cs.a[g + 8][2 * t + 1]),
                         pack2(cs.a[g][2 * t + 8], cs.a[g][2 * t + 9]),
                         pack2(cs.a[g + 8][2 * t + 8], cs.a[g + 8][2 * t + 9])};
  const uint32_t b[2] = {pack2(cs.b[g][2 * t], cs.b[g][2 * t + 1]),
                         pack2(cs.b[g][2 * t + 8], cs.b[g][2 * t + 9])};
  const float c[4] = {__uint_as_float(cs.c[g][2 * t]), __uint_as_float(cs.c[g][2 * t + 1]),
                      __uint_as_float(cs.c[g + 8][2 * t]), __uint_as_float(cs.c[g + 8][2 * t + 1])};
  float d[4];
  mma_bf16_16816(d, a, b, c);
  uint32_t* out = d_out + i * 128;
  out[g * 8 + 2 * t] = __float_as_uint(d[0]);
  out[g * 8 + 2 * t + 1] = __float_as_uint(d[1]);
  out[(g + 8) * 8 + 2 * t] = __float_as_uint(d[2]);
  out[(g + 8) * 8 + 2 * t + 1] = __float_as_uint(d[3]);
}

std::string describe(MmaDist dist, int64_t index, const MmaCase& cs, int m, int n, uint32_t dev,
                     uint32_t twin) {
  std::ostringstream os;
  os << mma_dist_name(dist) << " case " << index << " d[" << m << "][" << n << "]: device 0x"
     << std::hex << dev << ", twin 0x" << twin << "; c 0x" << cs.c[m][n] << "; a";
  for (int k = 0; k < 16; ++k) os << " " << cs.a[m][k].bits;
  os << "; b";
  for (int k = 0; k < 16; ++k) os << " " << cs.b[n][k].bits;
  return os.str();
}

}  // namespace

MmaProbeResult mma_probe(MmaDist dist, uint64_t seed, int64_t first, int64_t count,
                         std::vector<uint32_t>* device_bits) {
  if (count < 1) throw InvalidArgument("cuda::mma_probe: count must be >= 1");
  std::vector<MmaCase> cases(static_cast<size_t>(count));
  for (int64_t i = 0; i < count; ++i)
    make_mma_case(dist, seed, first + i, cases[static_cast<size_t>(i)]);
  DeviceBuffer<MmaCase> d_cases(cases);
  DeviceBuffer<uint32_t> d_out(static_cast<size_t>(count) * 128);
  const int threads = 256;
  const int64_t blocks = (count * 32 + threads - 1) / threads;
  mma_probe_kernel<<<static_cast<unsigned>(blocks), threads>>>(d_cases.data(), count, d_out.data());
  SD_CHECK_LAUNCH();
  SD_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<uint32_t> dev = d_out.download();
  MmaProbeResult res;
  for (int64_t i = 0; i < count; ++i) {
    const MmaCase& cs = cases[static_cast<size_t>(i)];
    uint32_t twin[16][8];
    mma_case_twin(cs, twin);
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 8; ++n) {
        const uint32_t got = dev[static_cast<size_t>(i * 128 + m * 8 + n)];
        ++res.outputs;
        if (got != twin[m][n]) {
          if (res.mismatches == 0) res.first = describe(dist, first + i, cs, m, n, got, twin[m][n]);
          ++res.mismatches;
        }
      }
  }
  if (device_bits != nullptr) *device_bits = std::move(dev);
  return res;
}

void mma_self_test() {
  static std::mutex mutex;
  static std::set<int> passed;
  int device = 0;
  SD_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  if (passed.count(device) != 0) return;
  for (int d = 0; d < kMmaDistCount; ++d) {
    const MmaDist dist = static_cast<MmaDist>(d);
    const MmaProbeResult r = mma_probe(dist, 0x5eedu, 0, 16);
    if (r.mismatches != 0)
      throw DeviceError(
          "the tensor-core instruction (mma.sync.m16n8k16 bf16 -> f32) on device " +
          std::to_string(device) + " does not match its CPU twin (core/mma.h) in " +
          std::to_string(r.mismatches) + " of " + std::to_string(r.outputs) +
          " outputs of the start-up self-test; first: " + r.first +
          ". No product computed here could be reproduced on the CPU: refusing to run.");
  }
  passed.insert(device);
}

}  // namespace sparkdraft::cuda
