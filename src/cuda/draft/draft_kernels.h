// Small kernels of the GPU draft step: the query-block bookkeeping and the fp32
// widening of the embedding into the residual stream (no cpu/ops.h op: the CPU
// backend does both inline in runtime/cpu_draft.cpp), plus the per-head norm the
// QKV front uses (the twin of cpu::head_rms_norm).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "sparkdraft/config.h"
#include "sparkdraft/core/bf16.h"

namespace sparkdraft::cuda {

// Per row r and step j (t = r*N + j), from the device batch:
//   ids[t] = j == 0 ? anchor : mask; positions[t] = a + j;
//   slots[t] = padding ? -1 : block_table[(a+j) / page] * page + (a+j) % page;
//   token_request[t] = padding ? -1 : r; kv_lens[r] = a + N;
// with padding rows (cache slot -1) run as anchor 0 at position 0
// (safe_anchor/safe_position, what the Markov loop reads).
struct QueryBlockParams {
  int rows = 0, steps = 0, page_size = 0, max_pages = 0;
  int64_t mask_token = 0;
  const int64_t* anchor_tokens = nullptr;
  const int64_t* anchor_positions = nullptr;
  const int64_t* cache_slots = nullptr;
  const int32_t* block_tables = nullptr;
  int64_t* ids = nullptr;
  int64_t* positions = nullptr;
  int64_t* slots = nullptr;
  int32_t* token_request = nullptr;
  int64_t* kv_lens = nullptr;
  int64_t* safe_anchor = nullptr;
  int64_t* safe_position = nullptr;
};
void prepare_query_block(const QueryBlockParams& p, cudaStream_t stream);

// out[i] = f32(x[i]) (exact).
void widen_bf16(const bf16* x, int64_t n, float* out, cudaStream_t stream);

// cpu::head_rms_norm (cpu/ops.h) on the device: RMSNorm of `heads` heads of
// head_dim values of every token in place (token t, head h at
// x + t*token_stride + h*head_dim); the arithmetic of cuda::rms_norm (one warp per
// head, canonical order).
void head_rms_norm(bf16* x, int64_t token_stride, int tokens, int heads, int head_dim,
                   const bf16* weight, NormGain gain, float eps, cudaStream_t stream);

}  // namespace sparkdraft::cuda
