// The fused QKV front's per-head work (ops/front.h qkv_front), for one head held by
// a group of lanes (tile.h): decode which head it is, load it, norm it, stage it,
// rotate it, store it in place and into the paged cache.
//
// Bits: the steps of the eager kernels, in their order and with their functions:
//   norm   ss = the canonical sum (lane partial: fma per term from +0 over its chunk;
//               the group butterfly), r = rms_scale, y_i = bf16(apply_norm(x_i))
//          (cuda/common/common.cuh, what head_rms_norm runs);
//   rope   the staged bf16 values read back as f32, (x1*c - x2*s, x2*c + x1*s) with
//          separate products and one add/subtract, rounded to bf16 (eager rope);
//   insert the final bf16 values copied into the cache (kv_insert); a V head without
//          V-norm is copied bit for bit, NaN payloads included, as kv_insert does.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/common.cuh"
#include "cuda/common/vec.cuh"
#include "cuda/fused/backbone/tile.h"
#include "sparkdraft/ops/front.h"

namespace sparkdraft::cuda::backbone_detail {

// One head of the front: where it lives and what happens to it.
struct FrontHead {
  bf16* src = nullptr;           // the head in the QKV (or K/V) buffer, updated in place
  bf16* cache = nullptr;         // its place in the paged cache, null = no insert
  const bf16* weight = nullptr;  // norm weight
  NormGain gain = NormGain::none;
  bool norm = false;
  bool rotate = false;
  int64_t token = 0;
};

// Heads per token: q heads, then per layer its K heads and its V heads.
__device__ __forceinline__ FrontHead front_head(const ops::QkvFrontParams& p, int64_t unit) {
  const int per_token = p.heads + p.layers * 2 * p.kv_heads;
  FrontHead f;
  f.token = unit / per_token;
  int rem = static_cast<int>(unit - f.token * per_token);
  const int64_t row = f.token * p.token_stride;
  if (rem < p.heads) {
    f.src = p.q + row + static_cast<int64_t>(rem) * p.head_dim;
    f.weight = p.q_norm;
    f.gain = p.gain;
    f.norm = p.qk_norm;
    f.rotate = true;
    return f;
  }
  rem -= p.heads;
  const int l = rem / (2 * p.kv_heads);
  rem -= l * 2 * p.kv_heads;
  const bool is_v = rem >= p.kv_heads;
  const int h = is_v ? rem - p.kv_heads : rem;
  const ops::FrontLayer& layer = p.layer[l];
  f.src = (is_v ? layer.v : layer.k) + row + static_cast<int64_t>(h) * p.head_dim;
  f.weight = is_v ? nullptr : layer.k_norm;
  f.gain = is_v ? NormGain::none : p.gain;
  f.norm = is_v ? p.v_norm : p.qk_norm;
  f.rotate = !is_v;
  const int64_t slot = p.slots[f.token];
  if (slot >= 0)
    f.cache = layer.cache + (slot * p.kv_heads + h) * 2 * p.head_dim + (is_v ? p.head_dim : 0);
  return f;
}

// The rotated value of element i of a staged head (eager rope's two formulas).
__device__ __forceinline__ float rope_element(const bf16* staged, int i, int half, bool gptj,
                                              const float* row) {
  int pair, i1, i2;
  if (gptj) {
    pair = i / 2;
    i1 = 2 * pair;
    i2 = i1 + 1;
  } else {
    pair = i < half ? i : i - half;
    i1 = pair;
    i2 = pair + half;
  }
  const float c = row[pair], s = row[half + pair];
  const float x1 = to_f32(staged[i1]), x2 = to_f32(staged[i2]);
  return i == i1 ? __fsub_rn(__fmul_rn(x1, c), __fmul_rn(x2, s))
                 : __fadd_rn(__fmul_rn(x2, c), __fmul_rn(x1, s));
}

// The whole front of one head by a group of `group` lanes; every lane of the warp
// calls it (the butterfly shuffles over the full warp), `live` false for lanes past
// the last head. `staged` is this group's head_dim bf16 of shared memory.
__device__ __forceinline__ void front_head_run(const ops::QkvFrontParams& p, const FrontHead& f,
                                               bool live, int sub, int group, bf16* staged) {
  const int d = p.head_dim;
  const bool has = live && sub * kChunk < d;
  Chunk in{};
  float x[kChunk];
  float partial = 0.0f;
  if (has) {
    in = load_chunk(f.src + sub * kChunk);
#pragma unroll
    for (int j = 0; j < kChunk; ++j) {
      x[j] = to_f32(in.h[j]);
      partial = fma_f32(x[j], x[j], partial);
    }
  }
  for (int off = group / 2; off > 0; off /= 2)
    partial = __fadd_rn(partial, __shfl_xor_sync(0xffffffffu, partial, off));
  if (has) {
    Chunk y = in;
    if (f.norm) {
      const float r = detail::rms_scale(partial, d, p.eps);
#pragma unroll
      for (int j = 0; j < kChunk; ++j)
        y.h[j] = to_bf16(detail::apply_norm(x[j], r, f.weight, f.gain, sub * kChunk + j));
    }
    store_chunk(staged + sub * kChunk, y);
  }
  __syncwarp();
  if (!has) return;
  Chunk out = load_chunk(staged + sub * kChunk);
  if (f.rotate) {
    const float* row = p.rope_table + p.positions[f.token] * d;
    const bool gptj = p.rope_style == RopeStyle::gptj;
#pragma unroll
    for (int j = 0; j < kChunk; ++j)
      out.h[j] = to_bf16(rope_element(staged, sub * kChunk + j, d / 2, gptj, row));
  }
  if (f.rotate || f.norm) store_chunk(f.src + sub * kChunk, out);
  if (f.cache != nullptr) store_chunk(f.cache + sub * kChunk, out);
}

}  // namespace sparkdraft::cuda::backbone_detail
