// mma_probe and mma_self_test (cuda/common/mma_probe.h): one warp per case
// loads the case's A, B and C into the instruction's fragments (common/mma.cuh),
// runs one mma.sync and stores D; the host compares every element with the twin.
#include <cuda_runtime.h>

#include <cinttypes>
#include <cstdio>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "cuda/common/launch.h"
#include "cuda/common/mma.cuh"
#include "cuda/common/mma_probe.h"
#include "cuda/common/ptx.cuh"
#include "cuda/common/wgmma.cuh"
#include "sparkdraft/core/mma.h"
#include "sparkdraft/core/mma_probe.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
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

__global__ void wgmma_compiled_kernel(int* out) { *out = wgmma_compiled() ? 1 : 0; }

// Tile `tile` (one CTA of 128 threads) of the wgmma self-test for wgmma.m64nNk16 (N 64,
// 128, 160, 192, 224 or 256: every form the GEMM's wg tiles issue), with C = N / 8 cases a tile: A
// rows 16 i .. 16 i + 15 = case C tile + i's a (i < 4), B tokens 8 j .. 8 j + 7 = case C tile
// + j's b (j < N / 8), C block (i, j) = case C tile + j's c; D [64][N] = one wgmma from
// C, both operands in shared memory in the no-swizzle layout of wgmma_core_offset.
template <int N>
__global__ void __launch_bounds__(128) wgmma_probe_kernel(const MmaCase* cases, uint32_t* d_out) {
  constexpr int kCases = N / 8;
  __shared__ __align__(1024) unsigned char sm[(64 + N) * 128];
  const int tile = blockIdx.x, tid = threadIdx.x, w = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const MmaCase* cs = cases + kCases * tile;
  bf16* const e = reinterpret_cast<bf16*>(sm);
  for (int i = tid; i < (64 + N) * 16; i += 128) {  // row r, k 0..15: chunks 0 and 1
    const int r = i / 16, k = i % 16;
    const bf16 v = r < 64 ? cs[r / 16].a[r % 16][k] : cs[(r - 64) / 8].b[(r - 64) % 8][k];
    e[(wgmma_core_offset(r, k / 8) + 2 * (k % 8)) / 2] = v;
  }
  fence_proxy_async();
  __syncthreads();
  float d[N / 2];
  for (int x = 0; x < N / 2; ++x) {
    const int i = x % 4, j = x / 4, row = 16 * w + g + 8 * (i >> 1), col = 8 * j + 2 * t + (i & 1);
    d[x] = __uint_as_float(cs[j].c[row % 16][col % 8]);
  }
  const uint32_t base = smem_u32(sm);
  const uint64_t da = wgmma_desc(base, kWgmmaLbo, kWgmmaSbo);
  const uint64_t db = wgmma_desc(base + wgmma_core_offset(64, 0), kWgmmaLbo, kWgmmaSbo);
  wgmma_fence();
  if constexpr (N == 64)
    wgmma_m64n64k16_ss(d, da, db);
  else if constexpr (N == 128)
    wgmma_m64n128k16_ss(d, da, db);
  else if constexpr (N == 160)
    wgmma_m64n160k16_ss(d, da, db);
  else if constexpr (N == 192)
    wgmma_m64n192k16_ss(d, da, db);
  else if constexpr (N == 224)
    wgmma_m64n224k16_ss(d, da, db);
  else
    wgmma_m64n256k16_ss(d, da, db);
  wgmma_commit();
  wgmma_wait<0>();
  for (int x = 0; x < N / 2; ++x) {
    const int i = x % 4, j = x / 4, row = 16 * w + g + 8 * (i >> 1), col = 8 * j + 2 * t + (i & 1);
    d_out[static_cast<size_t>(tile) * 64 * N + row * N + col] = __float_as_uint(d[x]);
  }
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
  launch_kernel("mma_probe_kernel", mma_probe_kernel,
                LaunchShape{dim3(static_cast<unsigned>(blocks)), dim3(threads), 0, nullptr},
                d_cases.data(), count, d_out.data());
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

const WgmmaStatus& wgmma_self_test() {
  static std::mutex mutex;
  static std::map<int, WgmmaStatus> done;
  int device = 0;
  SD_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mutex);
  auto it = done.find(device);
  if (it != done.end()) return it->second;
  WgmmaStatus st;
  cudaDeviceProp p{};
  SD_CUDA_CHECK(cudaGetDeviceProperties(&p, device));
  DeviceBuffer<int> flag(std::vector<int>{0});
  if (p.major == 9 && p.minor == 0) {
    launch_kernel("wgmma_compiled_kernel", wgmma_compiled_kernel,
                  LaunchShape{dim3(1), dim3(1), 0, nullptr}, flag.data());
  }
  if (p.major != 9 || p.minor != 0) {
    st.why = "wgmma is an sm_90 instruction; device " + std::to_string(device) + " is sm_" +
             std::to_string(p.major) + std::to_string(p.minor);
  } else if (flag.download()[0] != 1) {
    st.why = "this build has no sm_90a code (SPARKDRAFT_CUDA_ARCH=90a gives it)";
  } else {
    // Every form the wg tiles issue, two tiles of each case family.
    constexpr int kTiles = 2;
    int64_t outputs = 0, mismatches = 0;
    std::string first;
    auto probe = [&](auto n_tag) {
      constexpr int N = decltype(n_tag)::value, kCases = N / 8;
      for (int dd = 0; dd < kMmaDistCount && mismatches == 0; ++dd) {
        const MmaDist dist = static_cast<MmaDist>(dd);
        std::vector<MmaCase> cases(static_cast<size_t>(kCases) * kTiles);
        for (size_t i = 0; i < cases.size(); ++i) make_mma_case(dist, 0x5eedu, i, cases[i]);
        DeviceBuffer<MmaCase> d_cases(cases);
        DeviceBuffer<uint32_t> d_out(static_cast<size_t>(kTiles) * 64 * N);
        launch_kernel("wgmma_probe_kernel", wgmma_probe_kernel<N>,
                      LaunchShape{dim3(kTiles), dim3(128), 0, nullptr}, d_cases.data(),
                      d_out.data());
        SD_CUDA_CHECK(cudaDeviceSynchronize());
        const std::vector<uint32_t> dev = d_out.download();
        for (int tile = 0; tile < kTiles; ++tile)
          for (int row = 0; row < 64; ++row)
            for (int col = 0; col < N; ++col) {
              const MmaCase& ca = cases[static_cast<size_t>(kCases * tile + row / 16)];
              const MmaCase& cb = cases[static_cast<size_t>(kCases * tile + col / 8)];
              const uint32_t twin =
                  mma_step_bits(cb.c[row % 16][col % 8], ca.a[row % 16], cb.b[col % 8]);
              const uint32_t got = dev[static_cast<size_t>(tile) * 64 * N + row * N + col];
              ++outputs;
              if (got != twin && mismatches++ == 0) {
                std::ostringstream os;
                os << "m64n" << N << "k16, " << mma_dist_name(dist) << " tile " << tile << " d["
                   << row << "][" << col << "]: wgmma 0x" << std::hex << got << ", twin 0x" << twin;
                first = os.str();
              }
            }
      }
    };
    probe(std::integral_constant<int, 64>{});
    probe(std::integral_constant<int, 128>{});
    probe(std::integral_constant<int, 160>{});
    probe(std::integral_constant<int, 192>{});
    probe(std::integral_constant<int, 224>{});
    probe(std::integral_constant<int, 256>{});
    if (mismatches == 0) {
      st.usable = true;
      st.why = "wgmma.m64n{64,128,160,192,224,256}k16 equal the twin on " +
               std::to_string(outputs) + " outputs of the start-up self-test";
    } else {
      st.why = "wgmma differs from the twin in " + std::to_string(mismatches) +
               " outputs of the start-up self-test (first: " + first +
               "); the GEMM runs the mma.sync variants";
    }
  }
  return done.emplace(device, st).first->second;
}

}  // namespace sparkdraft::cuda
