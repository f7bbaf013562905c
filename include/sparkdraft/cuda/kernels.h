// The eager CUDA kernels: one launcher per non-matmul op of cpu/ops.h, same names,
// same arguments (device pointers instead of host ones) plus the caller's stream.
//
// Each kernel reproduces its CPU op bit for bit (SPEC section 3): the same
// rounding points (stated in cpu/ops.h), the canonical reduction order of
// core/reduce.h (one warp per normed row: lane l owns chunks l, l+32, ... of 8
// elements, one fma per term, then the xor butterfly) and the math of
// core/math.h. Only attention is held to the CPU within a bf16-ulp budget (its
// sums run in another order); it is still deterministic and independent of the
// launch (fixed context split size, fixed combine order).
//
// Launchers check their arguments (InvalidArgument naming the field) before any
// launch, launch on `stream` and check the launch (DeviceError). They never
// synchronize and never allocate, so they can be captured in a CUDA graph.
// Values behind device pointers (token ids, positions, slots, kv lengths) are
// not read on the host: the API boundary validates them (SPEC section 4).
// Zero rows / tokens is a valid empty call and launches nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "sparkdraft/config.h"
#include "sparkdraft/core/bf16.h"

namespace sparkdraft::cuda {

// ---- norms ------------------------------------------------------------------------
// cpu::rms_norm: y_i = bf16((x_i * r) * g_i), r = 1 / sqrt(ss / n + eps), ss in the
// canonical order. One warp per row, 4 rows per 128-thread block; any n >= 1.
// In place (y == x, same stride) is allowed for bf16 input.
void rms_norm(const bf16* x, int64_t x_stride, int rows, int n, const bf16* weight, NormGain gain,
              float eps, bf16* y, int64_t y_stride, cudaStream_t stream);
void rms_norm(const float* x, int64_t x_stride, int rows, int n, const bf16* weight, NormGain gain,
              float eps, bf16* y, int64_t y_stride, cudaStream_t stream);

// ---- residual boundary --------------------------------------------------------------
// cpu::residual_boundary (same fields, device pointers): post-norm of the branch,
// s' = alpha*s + beta*b (or s + b), stream kept fp32 or bf16, next = pre_norm(bf16(s')).
// Rows of `hidden` contiguous values. One warp per row.
struct BoundaryParams {
  int rows = 0;
  int hidden = 0;
  StreamDType stream_dtype = StreamDType::bf16;
  const bf16* post_weight = nullptr;
  bool post_norm = false;
  const float* alpha = nullptr;
  const float* beta = nullptr;
  const bf16* pre_weight = nullptr;
  NormGain gain = NormGain::weight;
  float eps = 1e-6f;
  // Throws InvalidArgument naming the first bad field.
  void check() const;
};
// `residual` is the stream: float* when stream_dtype is f32, else bf16*; updated in place.
void residual_boundary(const BoundaryParams& p, const bf16* branch, void* residual, bf16* next,
                       cudaStream_t stream);

// ---- RoPE ---------------------------------------------------------------------------
// cpu::rope with `table` the device copy of cpu::rope_table's host table (fp32,
// [max_positions, head_dim]); every positions[t] must lie in the table. One thread
// per rotated pair.
void rope(bf16* x, int64_t x_stride, int tokens, int heads, int head_dim, const int64_t* positions,
          const float* table, RopeStyle style, cudaStream_t stream);

// ---- KV cache -----------------------------------------------------------------------
// cpu::kv_insert: exact copies into the paged cache [slots, kv_heads, 2*head_dim];
// a negative slot (-1 = padding) writes nothing. One block per token.
void kv_insert(const bf16* k, int64_t k_stride, const bf16* v, int64_t v_stride, int tokens,
               int kv_heads, int head_dim, const int64_t* slots, bf16* cache, cudaStream_t stream);

// ---- embedding, activations -----------------------------------------------------------
// cpu::embed: out[r] = table[ids[r]]. One block per row.
void embed(const int64_t* ids, int rows, const bf16* table, int hidden, bf16* out,
           cudaStream_t stream);

// cpu::silu_mul: y = bf16(silu(f32(g)) * f32(u)), gu [rows, 2I], y [rows, I].
// One thread per output element.
void silu_mul(const bf16* gu, int rows, int inter, bf16* y, cudaStream_t stream);

// cpu::o_norm_gate (in place on o [tokens, heads*head_dim]); the gate applies when
// g is not null. One warp per (token, head).
void o_norm_gate(bf16* o, int tokens, int heads, int head_dim, const bf16* o_norm_weight,
                 bool o_norm, NormGain gain, float eps, const bf16* g, int64_t g_stride,
                 cudaStream_t stream);

// ---- attention over the paged cache -----------------------------------------------------
// cpu::attention, computed as: the context [lo, kv_len) of each query is cut at the
// fixed absolute positions k * kAttentionSplit; one block per (token, head, split)
// computes that split's max m, sum l = sum exp(s - m) and acc = sum exp(s - m) v in
// fp32; a combine kernel (one block per (token, head)) merges the splits in
// increasing order: M = max m, L = sum l * exp(m - M), o = bf16(sum acc * exp(m - M) / L).
// The splits depend only on positions, so the result is the same for any batch, any
// max_kv_len and from run to run. Padding tokens (token_request -1) write zeros.
inline constexpr int kAttentionSplit = 512;  // context positions per split block
inline constexpr int kAttentionMaxHeadDim = 256;

struct AttentionParams {
  int tokens = 0;
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;  // 1 .. kAttentionMaxHeadDim
  int page_size = 0;
  int max_pages = 0;
  int window = 0;  // 0 = full
  int64_t q_stride = 0;
  const int32_t* block_tables = nullptr;   // device [requests, max_pages]
  const int32_t* token_request = nullptr;  // device [tokens], -1 = padding
  const int64_t* positions = nullptr;      // device [tokens]
  const int64_t* kv_lens = nullptr;        // device [requests]
  // Host-side bound on every kv_lens[r] (<= max_pages * page_size): sizes the split
  // grid and the workspace. Any bound gives the same bits.
  int64_t max_kv_len = 0;
  // Throws InvalidArgument naming the first bad field.
  void check() const;
};

// Device workspace `attention` needs for these params (fp32 split partials).
size_t attention_workspace_bytes(const AttentionParams& p);

// q: [tokens, q_stride] (head h at h*head_dim), cache: [slots, kv_heads, 2*head_dim],
// out: [tokens, heads*head_dim] bf16.
void attention(const AttentionParams& p, const bf16* q, const bf16* cache, bf16* out,
               void* workspace, size_t workspace_bytes, cudaStream_t stream);

}  // namespace sparkdraft::cuda
