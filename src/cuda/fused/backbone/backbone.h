// The fused backbone kernels (contract.md section 5), each bit for bit the composition of
// eager ops that ops/front.h defines (runtime/step.h eager_qkv_front,
// eager_embed_norm run that composition on any backend):
//   * qkv_front: after the QKV projection (or the context chain's stacked K/V
//     projection), ONE kernel for every head's QK-norm / V-norm, RoPE and the insert
//     into the paged cache, for any token count and up to ops::kMaxFrontLayers layers;
//   * embed_norm: the embedding lookup, the fp32 residual's widening and the first
//     layer's input norm as one kernel.
// The residual boundary and the o-norm + gate are single eager kernels already
// (cuda/kernels.h).
//
// The plan (cuda::make_plan) asks the *_refusal functions whether a config can run
// them; a non-empty reason sends that part to the eager ops. The launchers check
// the params (their check()), then the kernel's own limits (the same reasons, plus
// 16-byte alignment of every pointer and stride: InvalidArgument naming it), launch
// on `stream` and check the launch. No synchronization, no allocation: graph-safe.
#pragma once

#include <cuda_runtime.h>

#include <string>

#include "sparkdraft/ops/front.h"

namespace sparkdraft::cuda {

inline constexpr int kFrontMaxHeadDim = 256;

// Why the fused qkv_front cannot run heads of head_dim ("" = it can): head_dim
// must be a multiple of 8 (a head is whole 16-byte chunks) and at most
// kFrontMaxHeadDim (one chunk per lane).
std::string qkv_front_refusal(int head_dim);
// Why the fused embed_norm cannot run rows of `hidden` ("" = it can): hidden must
// be a multiple of 8 (16-byte chunks).
std::string embed_norm_refusal(int hidden);

void qkv_front(const ops::QkvFrontParams& p, cudaStream_t stream);
void embed_norm(const ops::EmbedNormParams& p, cudaStream_t stream);

}  // namespace sparkdraft::cuda
