// cuda::gemm: the launcher of the tensor-core GEMM (tile.cuh), its variant choice
// and its ring sizing (cuda/kernels.h states the design; ops/gemm.h the contract).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "cuda/common/launch.h"
#include "cuda/gemm/tile.cuh"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/kernels.h"
#include "sparkdraft/cuda/mma.h"
#include "sparkdraft/ops/gemm.h"

namespace sparkdraft::cuda {
namespace {

using gemm_detail::Args;
using gemm_detail::Tile;

// Shared memory one slice group's ring may take (a CTA has `slices` groups, so
// 96 KB a CTA: two CTAs an SM), before the clamp to 2..16 stages.
int ring_budget_bytes(int slices) { return (96 << 10) / slices; }

// Raises the kernel's dynamic shared memory limit once per (device, kernel).
void allow_smem(const void* kernel, size_t bytes) {
  if (bytes <= (48u << 10)) return;
  static std::mutex mu;
  static std::set<std::pair<int, const void*>> done;
  int device = 0;
  SD_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mu);
  if (done.count({device, kernel}) != 0) return;
  int optin = 0;
  SD_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  SD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
  done.insert({device, kernel});
}

template <int MT, int NT, int WT, bool kRing>
void launch(Args a, cudaStream_t stream) {
  using T = Tile<MT, NT, WT>;
  if (kRing) {
    a.stages = std::clamp(ring_budget_bytes(a.slices) / T::kStageBytes, 2, gemm_detail::kMaxStages);
    a.group_bytes = a.stages * T::kStageBytes;
  } else {
    a.stages = 0;
    a.group_bytes = a.slices > 1 ? T::kPartialBytes : 0;
  }
  const int64_t row_blocks = (static_cast<int64_t>(a.N) + T::kWRows - 1) / T::kWRows;
  ops::require(row_blocks <= 65535, "cuda::gemm",
               "N = " + std::to_string(a.N) + " needs more than 65535 row blocks");
  LaunchShape shape;
  shape.grid = dim3(static_cast<unsigned>((a.M + T::kXRows - 1) / T::kXRows),
                    static_cast<unsigned>(row_blocks));
  shape.block = dim3(static_cast<unsigned>(32 * WT * a.slices));
  shape.smem = static_cast<size_t>(a.slices) * a.group_bytes;
  shape.stream = stream;
  if constexpr (kRing) {
    allow_smem(reinterpret_cast<const void*>(&gemm_detail::gemm_ring_kernel<MT, NT, WT>),
               shape.smem);
    launch_kernel("gemm_ring_kernel", gemm_detail::gemm_ring_kernel<MT, NT, WT>, shape, a);
  } else {
    allow_smem(reinterpret_cast<const void*>(&gemm_detail::gemm_general_kernel<NT>), shape.smem);
    launch_kernel("gemm_general_kernel", gemm_detail::gemm_general_kernel<NT>, shape, a);
  }
}

}  // namespace

bool gemm_ring_ok(const bf16* x, int64_t x_stride, const bf16* w, int K) {
  return K % 8 == 0 && x_stride % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

GemmVariant gemm_pick(const bf16* x, int64_t x_stride, const bf16* w, int M, int K) {
  if (!gemm_ring_ok(x, x_stride, w, K)) return GemmVariant::general;
  if (M <= 8) return GemmVariant::ring_n8;
  if (M <= 16) return GemmVariant::ring_n16;
  if (M <= 32) return GemmVariant::ring_n32;
  return GemmVariant::ring_n64;
}

void gemm_with(GemmVariant variant, const bf16* x, int64_t x_stride, const bf16* w, int M, int N,
               int K, bf16* y, int64_t y_stride, int k_slices, cudaStream_t stream) {
  ops::check_gemm_args("cuda::gemm", x, x_stride, w, M, N, K, y, y_stride, k_slices);
  if (M == 0 || N == 0) return;
  mma_self_test();  // once per device: refuses a device the CPU twin does not reproduce
  if (variant == GemmVariant::automatic) variant = gemm_pick(x, x_stride, w, M, K);
  ops::require(variant == GemmVariant::general || gemm_ring_ok(x, x_stride, w, K), "cuda::gemm",
               "the ring variants need K % 8 == 0, x_stride % 8 == 0 and 16-byte aligned x and w");
  Args a{};
  a.x = x;
  a.x_stride = x_stride;
  a.w = w;
  a.M = M;
  a.N = N;
  a.K = K;
  a.y = y;
  a.y_stride = y_stride;
  a.slices = k_slices;
  a.slice_len = K / k_slices;
  switch (variant) {
    case GemmVariant::ring_n8: launch<1, 1, 1, true>(a, stream); break;
    case GemmVariant::ring_n16: launch<1, 2, 1, true>(a, stream); break;
    case GemmVariant::ring_n32: launch<2, 2, 2, true>(a, stream); break;
    case GemmVariant::ring_n64: launch<2, 2, 4, true>(a, stream); break;
    default: launch<1, 4, 1, false>(a, stream); break;
  }
}

void gemm(const bf16* x, int64_t x_stride, const bf16* w, int M, int N, int K, bf16* y,
          int64_t y_stride, int k_slices, cudaStream_t stream) {
  gemm_with(GemmVariant::automatic, x, x_stride, w, M, N, K, y, y_stride, k_slices, stream);
}

const char* gemm_variant_name(GemmVariant v) {
  switch (v) {
    case GemmVariant::automatic: return "automatic";
    case GemmVariant::ring_n8: return "ring_n8";
    case GemmVariant::ring_n16: return "ring_n16";
    case GemmVariant::ring_n32: return "ring_n32";
    case GemmVariant::ring_n64: return "ring_n64";
    case GemmVariant::general: return "general";
  }
  return "?";
}

}  // namespace sparkdraft::cuda
