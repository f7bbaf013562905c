// Attention of the query block over the paged KV cache (cpu::attention within a
// bf16-ulp budget; deterministic and independent of the launch).
//
// What it computes: query t (request r = token_request[t], position pos) and head
// h attend to the request's positions [lo, kv_len), lo = window ? max(0, pos -
// window + 1) : 0, through KV head h / (heads / kv_heads):
//   s_j = (q . k_j) * scale, o = bf16( sum_j exp(s_j - m) v_j / sum_j exp(s_j - m) ).
// How: the range is cut at the fixed absolute positions k * kAttentionSplit.
//   split kernel, one block per (token, head, split): scores into shared memory,
//     m = max, p_j = exp_f32(s_j - m), l = sum p_j, acc_d = sum p_j v_jd (increasing
//     j), written to the workspace.
//   combine kernel, one block per (token, head): M = max m, w = exp_f32(m - M),
//     L = sum l w, o_d = bf16(sum acc_d w / L), splits in increasing order.
// Where it rounds: fp32 throughout, bf16 once at the output. The CPU sums the same
// terms in another order (one pass over the whole range), hence the budget.
// Every reduction has a fixed shape (lane strides, warp butterflies, warps in
// order), so the bits depend only on the inputs: not on max_kv_len, the batch, or
// the run. Padding tokens (token_request -1) write zeros; so does a query whose
// range is empty (lo >= kv_len), which the API boundary never lets through.
#include <cmath>

#include "sparkdraft/core/math.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/kernels.h"

#include "cuda/eager/common.cuh"

namespace sparkdraft::cuda {
namespace {

constexpr int kAttnWarps = 4;
constexpr int kAttnThreads = kAttnWarps * detail::kWarpSize;

// The device side of ops::AttentionParams.
struct AttnArgs {
  int heads, kv_heads, head_dim, page_size, max_pages, window, splits;
  int64_t q_stride;
  float scale;
  const int32_t* block_tables;
  const int32_t* token_request;
  const int64_t* positions;
  const int64_t* kv_lens;
};

// First position a query attends to.
__device__ __forceinline__ int64_t range_lo(const AttnArgs& a, int64_t pos) {
  if (a.window <= 0) return 0;
  const int64_t lo = pos - a.window + 1;
  return lo > 0 ? lo : 0;
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int off = detail::kWarpSize / 2; off > 0; off /= 2)
    v = __fadd_rn(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
  for (int off = detail::kWarpSize / 2; off > 0; off /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  return v;
}

// Block-wide sum or max: warp butterflies, then the warps' results in warp order.
// Every thread returns the same value. Contains __syncthreads (call from all threads).
template <bool kMax>
__device__ float block_reduce(float v, float* red) {
  const int lane = threadIdx.x % detail::kWarpSize, warp = threadIdx.x / detail::kWarpSize;
  v = kMax ? warp_max(v) : warp_sum(v);
  if (lane == 0) red[warp] = v;
  __syncthreads();
  float r = red[0];
  for (int w = 1; w < kAttnWarps; ++w) r = kMax ? fmaxf(r, red[w]) : __fadd_rn(r, red[w]);
  __syncthreads();  // red is reused by the next reduction
  return r;
}

__global__ void __launch_bounds__(kAttnThreads)
    attention_split_kernel(AttnArgs a, const bf16* q, const bf16* cache, float* ws_m, float* ws_l,
                           float* ws_acc) {
  const int t = blockIdx.x, h = blockIdx.y, sp = blockIdx.z;
  const int req = a.token_request[t];
  if (req < 0) return;
  const int64_t kv_len = a.kv_lens[req];
  const int64_t lo = range_lo(a, a.positions[t]);
  const int64_t split_begin = static_cast<int64_t>(sp) * kAttentionSplit;
  const int64_t begin = lo > split_begin ? lo : split_begin;
  const int64_t end =
      kv_len < split_begin + kAttentionSplit ? kv_len : split_begin + kAttentionSplit;
  if (begin >= end) return;  // the combine kernel skips this split by the same rule
  const int count = static_cast<int>(end - begin);
  const int hd = a.head_dim;
  const int kvh = h / (a.heads / a.kv_heads);
  const int lane = threadIdx.x % detail::kWarpSize, warp = threadIdx.x / detail::kWarpSize;

  __shared__ float q_s[kAttentionMaxHeadDim];
  __shared__ float p_s[kAttentionSplit];
  __shared__ int64_t slot_s[kAttentionSplit];
  __shared__ float red_s[kAttnWarps];

  const bf16* qh = q + t * a.q_stride + static_cast<int64_t>(h) * hd;
  for (int i = threadIdx.x; i < hd; i += kAttnThreads) q_s[i] = to_f32(qh[i]);
  const int32_t* table = a.block_tables + static_cast<int64_t>(req) * a.max_pages;
  for (int j = threadIdx.x; j < count; j += kAttnThreads) {
    const int64_t p = begin + j;
    slot_s[j] = static_cast<int64_t>(table[p / a.page_size]) * a.page_size + p % a.page_size;
  }
  __syncthreads();

  // Scores: warp w takes positions w, w + 4, ...; lane l dims l, l + 32, ...
  for (int j = warp; j < count; j += kAttnWarps) {
    const bf16* k = cache + (slot_s[j] * a.kv_heads + kvh) * 2 * hd;
    float part = 0.0f;
    for (int i = lane; i < hd; i += detail::kWarpSize) part = __fmaf_rn(q_s[i], to_f32(k[i]), part);
    const float dot = warp_sum(part);
    if (lane == 0) p_s[j] = __fmul_rn(dot, a.scale);
  }
  __syncthreads();

  float m = -INFINITY;
  for (int j = threadIdx.x; j < count; j += kAttnThreads) m = fmaxf(m, p_s[j]);
  m = block_reduce<true>(m, red_s);

  float l = 0.0f;
  for (int j = threadIdx.x; j < count; j += kAttnThreads) {
    const float e = exp_f32(__fsub_rn(p_s[j], m));
    p_s[j] = e;
    l = __fadd_rn(l, e);
  }
  l = block_reduce<false>(l, red_s);  // its barriers also publish p_s

  const int64_t unit = (static_cast<int64_t>(t) * a.heads + h) * a.splits + sp;
  for (int d = threadIdx.x; d < hd; d += kAttnThreads) {
    float acc = 0.0f;
    for (int j = 0; j < count; ++j) {
      const bf16* v = cache + (slot_s[j] * a.kv_heads + kvh) * 2 * hd + hd;
      acc = __fmaf_rn(p_s[j], to_f32(v[d]), acc);
    }
    ws_acc[unit * hd + d] = acc;
  }
  if (threadIdx.x == 0) {
    ws_m[unit] = m;
    ws_l[unit] = l;
  }
}

__global__ void __launch_bounds__(kAttnThreads)
    attention_combine_kernel(AttnArgs a, const float* ws_m, const float* ws_l, const float* ws_acc,
                             bf16* out) {
  const int t = blockIdx.x, h = blockIdx.y;
  const int hd = a.head_dim;
  bf16* o = out + (static_cast<int64_t>(t) * a.heads + h) * hd;
  const int req = a.token_request[t];
  int sp_begin = 0, sp_end = 0;
  if (req >= 0) {
    const int64_t kv_len = a.kv_lens[req];
    const int64_t lo = range_lo(a, a.positions[t]);
    if (lo < kv_len) {
      sp_begin = static_cast<int>(lo / kAttentionSplit);
      const int64_t last = (kv_len + kAttentionSplit - 1) / kAttentionSplit;
      sp_end = static_cast<int>(last < a.splits ? last : a.splits);
    }
  }
  if (sp_begin >= sp_end) {  // padding token (or an empty range): zeros
    for (int d = threadIdx.x; d < hd; d += kAttnThreads) o[d] = bf16{0};
    return;
  }
  const int64_t base = (static_cast<int64_t>(t) * a.heads + h) * a.splits;
  float big_m = -INFINITY;
  for (int sp = sp_begin; sp < sp_end; ++sp) big_m = fmaxf(big_m, ws_m[base + sp]);
  float big_l = 0.0f;
  for (int sp = sp_begin; sp < sp_end; ++sp)
    big_l =
        __fadd_rn(big_l, __fmul_rn(ws_l[base + sp], exp_f32(__fsub_rn(ws_m[base + sp], big_m))));
  for (int d = threadIdx.x; d < hd; d += kAttnThreads) {
    float acc = 0.0f;
    for (int sp = sp_begin; sp < sp_end; ++sp) {
      const float w = exp_f32(__fsub_rn(ws_m[base + sp], big_m));
      acc = __fadd_rn(acc, __fmul_rn(ws_acc[(base + sp) * hd + d], w));
    }
    o[d] = to_bf16(__fdiv_rn(acc, big_l));
  }
}

int64_t split_count(int64_t max_kv_len) {
  return (max_kv_len + kAttentionSplit - 1) / kAttentionSplit;
}

}  // namespace

void check_attention_limits(const ops::AttentionParams& p) {
  using detail::require;
  const char* op = "attention";
  p.check();
  require(p.heads <= 65535, op, "heads must be <= 65535 (grid y), got " + std::to_string(p.heads));
  require(p.head_dim <= kAttentionMaxHeadDim, op,
          "head_dim must be in [1, " + std::to_string(kAttentionMaxHeadDim) + "], got " +
              std::to_string(p.head_dim));
  require(split_count(p.max_kv_len) <= 65535, op,
          "max_kv_len " + std::to_string(p.max_kv_len) + " needs more than 65535 splits");
}

size_t attention_workspace_bytes(const ops::AttentionParams& p) {
  check_attention_limits(p);
  const int64_t units = static_cast<int64_t>(p.tokens) * p.heads * split_count(p.max_kv_len);
  return static_cast<size_t>(units) * (2 + static_cast<size_t>(p.head_dim)) * sizeof(float);
}

void attention(const ops::AttentionParams& p, const bf16* q, const bf16* cache, bf16* out,
               void* workspace, size_t workspace_bytes, cudaStream_t stream) {
  using detail::require;
  const size_t needed = attention_workspace_bytes(p);  // checks p
  if (p.tokens == 0) return;
  require(q != nullptr && cache != nullptr && out != nullptr, "attention",
          "q, cache and out must not be null");
  require(workspace != nullptr && workspace_bytes >= needed, "attention",
          "workspace of " + std::to_string(workspace_bytes) + " bytes, " + std::to_string(needed) +
              " needed (attention_workspace_bytes)");
  require(reinterpret_cast<uintptr_t>(workspace) % alignof(float) == 0, "attention",
          "workspace must be 4-byte aligned");

  const int splits = static_cast<int>(split_count(p.max_kv_len));
  const AttnArgs a{
      p.heads,        p.kv_heads,      p.head_dim,
      p.page_size,    p.max_pages,     p.window,
      splits,         p.q_stride,      1.0f / std::sqrt(static_cast<float>(p.head_dim)),
      p.block_tables, p.token_request, p.positions,
      p.kv_lens};
  const int64_t units = static_cast<int64_t>(p.tokens) * p.heads * splits;
  float* ws_m = static_cast<float*>(workspace);
  float* ws_l = ws_m + units;
  float* ws_acc = ws_l + units;

  const dim3 split_grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>(p.heads),
                        static_cast<unsigned>(splits));
  attention_split_kernel<<<split_grid, kAttnThreads, 0, stream>>>(a, q, cache, ws_m, ws_l, ws_acc);
  SD_CHECK_LAUNCH();
  const dim3 combine_grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>(p.heads));
  attention_combine_kernel<<<combine_grid, kAttnThreads, 0, stream>>>(a, ws_m, ws_l, ws_acc, out);
  SD_CHECK_LAUNCH();
}

}  // namespace sparkdraft::cuda
