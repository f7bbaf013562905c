// cuda::gemm: the launcher of the tensor-core GEMM (tile.cuh), its variant choice
// and its ring sizing (cp.async ring and bulk-copy ring) (cuda/kernels.h states the design;
// ops/gemm.h the contract).
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

int sm_count() {
  int device = 0, sms = 0;
  SD_CUDA_CHECK(cudaGetDevice(&device));
  SD_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return std::max(sms, 1);
}

// The bulk kernel: the ring sized so that every CTA of the grid can be resident
// at once (up to 4 a SM; 2 for bulk_big): the widest stage (256, 128 or 64 k)
// that leaves at least 4 stages (3 for bulk_big) in the share of shared memory a
// CTA gets, up to kBulkMaxStages.
template <int MT, int NT, int WG, int LEVELS>
void launch_bulk(Args a, cudaStream_t stream) {
  using B = gemm_detail::Bulk<MT, NT, WG, LEVELS>;
  ops::require(a.slices <= B::kMaxSlices, "cuda::gemm", "too many K slices for this variant");
  const int64_t row_blocks = (static_cast<int64_t>(a.N) + B::kWRows - 1) / B::kWRows;
  ops::require(row_blocks <= 65535, "cuda::gemm",
               "N = " + std::to_string(a.N) + " needs more than 65535 row blocks");
  const int64_t token_blocks = (a.M + B::kTokens - 1) / B::kTokens;
  const int64_t ctas = row_blocks * token_blocks;
  const int sms = sm_count();
  // Two m16 tiles a warp (bulk_big) are tensor-bound: 2 CTAs a SM and 3 stages do.
  constexpr int kMaxPerSm = MT >= 2 ? 2 : 4, kMinStages = MT >= 2 ? 3 : 4;
  const int per_sm = static_cast<int>(std::clamp<int64_t>((ctas + sms - 1) / sms, 1, kMaxPerSm));
  const int budget = (227 << 10) / per_sm - gemm_detail::kBulkHeader - (1 << 10);
  for (int stage_k : {256, 128, 64}) {
    a.stage_k = stage_k;
    a.pitch = 2 * stage_k + 16;
    a.stage_bytes = B::kRows * a.pitch;
    a.stages = std::min(gemm_detail::kBulkMaxStages, budget / a.stage_bytes);
    if (a.stages >= kMinStages) break;
  }
  a.stages = std::max(a.stages, 2);
  a.slice_chunks = (a.slice_len + a.stage_k - 1) / a.stage_k;
  LaunchShape shape;
  shape.grid = dim3(static_cast<unsigned>(token_blocks), static_cast<unsigned>(row_blocks));
  shape.block = dim3(static_cast<unsigned>(B::kThreads));
  shape.smem =
      static_cast<size_t>(gemm_detail::kBulkHeader) + static_cast<size_t>(a.stages) * a.stage_bytes;
  shape.stream = stream;
  const auto kernel = gemm_detail::gemm_bulk_kernel<MT, NT, WG, LEVELS>;
  allow_smem(reinterpret_cast<const void*>(kernel), shape.smem);
  launch_kernel("gemm_bulk_kernel", kernel, shape, a);
}

}  // namespace

bool gemm_ring_ok(const bf16* x, int64_t x_stride, const bf16* w, int K) {
  return K % 8 == 0 && x_stride % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

// Measured on the H200 (GemmSpeed.EveryVariant, docs/runs/2026-12-01b run 19): the
// bulk kernel streams one weight slice per warp fastest at M <= 8 with one K slice;
// with K slices the ring runs the slices in parallel warps, and at M > 8 the ring's
// tiles win: ring_big (64 x 64 per CTA) past 64 tokens, or past 32 tokens when N is
// large enough to fill the GPU with its 64-row blocks (lm_head 664 vs 943 us at M 56;
// qkv, N 6144, is faster on ring_n64 there).
GemmVariant gemm_pick(const bf16* x, int64_t x_stride, const bf16* w, int M, int N, int K,
                      int k_slices) {
  if (!gemm_ring_ok(x, x_stride, w, K)) return GemmVariant::general;
  if (M <= 8) return k_slices == 1 ? GemmVariant::bulk_n8 : GemmVariant::ring_n8;
  if (M <= 16) return GemmVariant::ring_n16;
  if (M <= 32) return GemmVariant::ring_n32;
  if (k_slices <= 4 && (M > 64 || N >= 8192)) return GemmVariant::ring_big;
  return GemmVariant::ring_n64;
}

void gemm_with(GemmVariant variant, const bf16* x, int64_t x_stride, const bf16* w, int M, int N,
               int K, bf16* y, int64_t y_stride, int k_slices, cudaStream_t stream) {
  ops::check_gemm_args("cuda::gemm", x, x_stride, w, M, N, K, y, y_stride, k_slices);
  if (M == 0 || N == 0) return;
  mma_self_test();  // once per device: refuses a device the CPU twin does not reproduce
  if (variant == GemmVariant::automatic) variant = gemm_pick(x, x_stride, w, M, N, K, k_slices);
  ops::require(
      variant == GemmVariant::general || gemm_ring_ok(x, x_stride, w, K), "cuda::gemm",
      "the ring and bulk variants need K % 8 == 0, x_stride % 8 == 0 and 16-byte aligned x and w");
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
    case GemmVariant::ring_big:  // at most 4 slices (8 groups of its ring exceed the
                                 // shared memory): 8-sliced calls run as ring_n64
      if (k_slices <= 4)
        launch<4, 4, 2, true>(a, stream);
      else
        launch<2, 2, 4, true>(a, stream);
      break;
    case GemmVariant::bulk_n8: launch_bulk<1, 1, 1, 3>(a, stream); break;
    case GemmVariant::bulk_n16: launch_bulk<1, 2, 1, 3>(a, stream); break;
    case GemmVariant::bulk_n32: launch_bulk<1, 4, 2, 3>(a, stream); break;
    case GemmVariant::bulk_n64: launch_bulk<1, 8, 2, 3>(a, stream); break;
    case GemmVariant::bulk_big:  // one slice only: K-sliced calls run as bulk_n64
      if (k_slices == 1)
        launch_bulk<2, 8, 2, 0>(a, stream);
      else
        launch_bulk<1, 8, 2, 3>(a, stream);
      break;
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
    case GemmVariant::ring_big: return "ring_big";
    case GemmVariant::bulk_n8: return "bulk_n8";
    case GemmVariant::bulk_n16: return "bulk_n16";
    case GemmVariant::bulk_n32: return "bulk_n32";
    case GemmVariant::bulk_n64: return "bulk_n64";
    case GemmVariant::bulk_big: return "bulk_big";
    case GemmVariant::general: return "general";
  }
  return "?";
}

}  // namespace sparkdraft::cuda
