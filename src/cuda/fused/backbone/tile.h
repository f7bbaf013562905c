// Every constant of the fused backbone kernels, defined once (host and device).
//
// qkv_front: one warp holds 32 / group heads, `group` lanes per head (the smallest
// power of two >= head_dim / 8); lane `sub` of a group owns the head's 16-byte chunk
// `sub`, which is exactly the canonical order of core/reduce.h for head_dim <= 256
// (lane l owns chunk l; the lanes without a chunk hold +0, and adding +0 to a sum of
// squares changes nothing, so the group butterfly equals the 32-lane one).
#pragma once

#include "cuda/fused/backbone/backbone.h"
#include "sparkdraft/core/hd.h"

namespace sparkdraft::cuda::backbone_detail {

inline constexpr int kWarp = 32;
inline constexpr int kChunk = 8;  // bf16 per 16-byte chunk (core/reduce.h kReduceChunk)

inline constexpr int kFrontWarps = 4;
inline constexpr int kFrontThreads = kFrontWarps * kWarp;
// Staged heads per warp: (32 / group) * head_dim <= 32 * kChunk bf16.
inline constexpr int kFrontStage = kWarp * kChunk;
static_assert(kFrontMaxHeadDim == kWarp * kChunk);

inline constexpr int kEmbedNormThreads = 256;  // one block per row

// Lanes per head: the smallest power of two >= head_dim / 8.
SD_HD constexpr int front_group(int head_dim) {
  int g = 1;
  while (g * kChunk < head_dim) g *= 2;
  return g;
}

}  // namespace sparkdraft::cuda::backbone_detail
