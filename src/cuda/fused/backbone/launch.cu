// The fused backbone kernels (cuda/fused/backbone/backbone.h): the kernels, assembled
// from front.cuh and embed_norm.cuh, their refusals and their launches
// (common/launch.h). Constants in tile.h.
//
// qkv_front launch: kFrontWarps warps per block, each warp 32 / group heads (tile.h),
// heads ordered token by token (q heads, then per layer K heads and V heads); one
// launch covers every token and every layer of the call.
// embed_norm launch: one block per row, the row staged in shared memory.
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "cuda/common/launch.h"
#include "cuda/common/ptx.cuh"
#include "cuda/fused/backbone/backbone.h"
#include "cuda/fused/backbone/embed_norm.cuh"
#include "cuda/fused/backbone/front.cuh"
#include "cuda/fused/backbone/tile.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {
namespace backbone_detail {
namespace {

__global__ void __launch_bounds__(kFrontThreads)
    qkv_front_kernel(const ops::QkvFrontParams p, int group, int64_t heads_total) {
  pdl_enter();
  __shared__ __align__(16) bf16 stage[kFrontWarps][kFrontStage];
  const int lane = threadIdx.x % kWarp, warp = threadIdx.x / kWarp;
  const int per_warp = kWarp / group;
  const int64_t unit =
      (static_cast<int64_t>(blockIdx.x) * kFrontWarps + warp) * per_warp + lane / group;
  const bool live = unit < heads_total;
  const FrontHead f = live ? front_head(p, unit) : FrontHead{};
  front_head_run(p, f, live, lane % group, group, stage[warp] + (lane / group) * p.head_dim);
}

__global__ void __launch_bounds__(kEmbedNormThreads)
    embed_norm_kernel(const ops::EmbedNormParams p) {
  pdl_enter();
  extern __shared__ __align__(16) bf16 staged_row[];
  embed_norm_row(p, blockIdx.x, staged_row);
}

bool aligned16(const void* ptr) { return reinterpret_cast<uintptr_t>(ptr) % 16 == 0; }

unsigned grid_for(int64_t items, int per_block, const char* op) {
  const int64_t blocks = (items + per_block - 1) / per_block;
  require(blocks <= 0x7fffffffLL, op, std::to_string(items) + " work items exceed one grid");
  return static_cast<unsigned>(blocks);
}

}  // namespace
}  // namespace backbone_detail

using namespace backbone_detail;

std::string qkv_front_refusal(int head_dim) {
  if (head_dim % kChunk != 0)
    return "head_dim " + std::to_string(head_dim) + " is not a multiple of 8";
  if (head_dim > kFrontMaxHeadDim)
    return "head_dim " + std::to_string(head_dim) + " exceeds the fused front's " +
           std::to_string(kFrontMaxHeadDim);
  return "";
}

std::string embed_norm_refusal(int hidden) {
  if (hidden % kChunk != 0)
    return "hidden size " + std::to_string(hidden) + " is not a multiple of 8";
  return "";
}

void qkv_front(const ops::QkvFrontParams& p, cudaStream_t stream) {
  const char* op = "qkv_front";
  p.check();
  const std::string refusal = qkv_front_refusal(p.head_dim);
  require(refusal.empty(), op, refusal);
  require(p.token_stride % kChunk == 0, op,
          "token_stride " + std::to_string(p.token_stride) + " is not a multiple of 8");
  require(p.q == nullptr || aligned16(p.q), op, "q is not 16-byte aligned");
  for (int l = 0; l < p.layers; ++l)
    require(aligned16(p.layer[l].k) && aligned16(p.layer[l].v) && aligned16(p.layer[l].cache), op,
            "layer " + std::to_string(l) + ": k, v or cache is not 16-byte aligned");
  if (p.tokens == 0) return;
  const int group = front_group(p.head_dim);
  const int64_t per_token = p.heads + static_cast<int64_t>(p.layers) * 2 * p.kv_heads;
  const int64_t heads_total = per_token * p.tokens;
  const int per_block = kFrontWarps * (kWarp / group);
  LaunchShape shape;
  shape.grid = dim3(grid_for(heads_total, per_block, op));
  shape.block = dim3(kFrontThreads);
  shape.stream = stream;
  launch_kernel("qkv_front_kernel", qkv_front_kernel, shape, p, group, heads_total);
}

void embed_norm(const ops::EmbedNormParams& p, cudaStream_t stream) {
  const char* op = "embed_norm";
  p.check();
  const std::string refusal = embed_norm_refusal(p.hidden);
  require(refusal.empty(), op, refusal);
  require(aligned16(p.table) && aligned16(p.x) && aligned16(p.y) &&
              (p.residual_f32 == nullptr || aligned16(p.residual_f32)) &&
              (p.gain == NormGain::none || aligned16(p.weight)),
          op, "table, x, y, residual_f32 and weight must be 16-byte aligned");
  if (p.rows == 0) return;
  LaunchShape shape;
  shape.grid = dim3(grid_for(p.rows, 1, op));
  shape.block = dim3(kEmbedNormThreads);
  shape.smem = static_cast<size_t>(p.hidden) * sizeof(bf16);
  shape.stream = stream;
  if (shape.smem > 48 * 1024) {
    int device = 0, optin = 0;
    SD_CUDA_CHECK(cudaGetDevice(&device));
    SD_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    require(shape.smem <= static_cast<size_t>(optin), op,
            "hidden " + std::to_string(p.hidden) + " needs " + std::to_string(shape.smem) +
                " bytes of shared memory; this device allows " + std::to_string(optin));
    SD_CUDA_CHECK(cudaFuncSetAttribute(embed_norm_kernel,
                                       cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(shape.smem)));
  }
  launch_kernel("embed_norm_kernel", embed_norm_kernel, shape, p);
}

}  // namespace sparkdraft::cuda
