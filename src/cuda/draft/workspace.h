// The GPU backend's workspace: every device buffer of one CudaDraft rank that is not a weight,
// sized once from the config and the options when the backend is built (no call of the device
// API allocates, so a call can be captured in a graph). The host API's context staging and the
// verifier's target logits are the two exceptions: their size is the call's (the host
// store_context has no token bound), so they grow on demand, outside any graph.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <memory>

#include "cuda/verify/verify.h"
#include "runtime/step.h"
#include "sparkdraft/config.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/draft.h"

namespace sparkdraft::cuda {

// What the workspace is sized from besides the config, the options and the step.
struct WorkspaceShape {
  int vocab_shard = 0;         // this rank's lm_head rows (V / tp)
  int layer_tp = 1;            // ranks the layers shard over (> 1: the fp32 reduce buffer)
  int max_context_tokens = 0;  // CudaDraftOptions::max_context_tokens
};

class DraftWorkspace {
 public:
  // Allocates every buffer; the draft-logits cache is zeroed on `stream`.
  DraftWorkspace(const ModelConfig& c, const DraftOptions& o, const DraftStep& step,
                 const WorkspaceShape& shape, cudaStream_t stream);
  DraftWorkspace(const DraftWorkspace&) = delete;
  DraftWorkspace& operator=(const DraftWorkspace&) = delete;

  int max_tokens() const { return max_tokens_; }  // max_reqs * query slots

  // The query block's scratch for max_tokens tokens (`block` points into it; the drafted
  // rows of the fill-in layout, contract.md section 14), the lm_head
  // output and, where the layers shard, gemm_all_reduce's fp32 partials [T, H].
  DeviceBuffer<int64_t> ids, positions, slots, kv_lens, safe_anchor, safe_position;
  DeviceBuffer<int32_t> token_request;
  DeviceBuffer<bf16> x, h, qkv_out, attn_out, branch, gu, act;
  DeviceBuffer<bf16> drafted;  // [max_reqs * N, H], the fill-in layout's drafted rows
  DeviceBuffer<float> residual_f32;
  DeviceBuffer<float> reduce_f32;
  BlockBuffers block;
  DeviceBuffer<bf16> base;  // [max_reqs * N, vocab_shard]
  // Attention's split-K scratch: the most any batch of 1 .. max_reqs rows needs at the
  // longest context, over every layer.
  DeviceBuffer<unsigned char> attn;
  size_t attn_bytes = 0;

  // The host API's staging: device copies of a propose batch and its outputs.
  DeviceBuffer<int64_t> in_anchor, in_pos, in_seed, in_slot, out_tokens;
  DeviceBuffer<float> in_temp;
  DeviceBuffer<int32_t> in_tables;
  DeviceBuffer<int32_t> in_len;  // the batch's lengths (contract.md 9.5), when it has them
  DeviceBuffer<bf16> cache;      // the draft-logits cache [cache_slots, N, V], zeroed
  DeviceBuffer<float> conf;      // [max_reqs * N] confidences, with the confidence head

  // The device context chain's scratch (max_context_tokens tokens).
  DeviceBuffer<bf16> dev_ctx_h, dev_ctx_normed, dev_ctx_in, dev_ctx_kv;
  ContextBuffers device_context();

  // The host context chain's staging, grown to `tokens` tokens of `in_width` inputs.
  DeviceBuffer<bf16> ctx_hidden, ctx_h, ctx_normed, ctx_in, ctx_kv;
  DeviceBuffer<int64_t> ctx_pos, ctx_slots;
  void reserve_context(const ContextSizes& n, int tokens, size_t in_width);
  ContextBuffers host_context();

  // The verifier's scratch (max_reqs rows) and its host API's staging; v_target grows to
  // the call's target logits (reserve_target).
  std::unique_ptr<VerifyWorkspace> verify;
  DeviceBuffer<int64_t> v_tokens, v_anchor, v_seed, v_slot, v_out_tokens;
  DeviceBuffer<float> v_temp, v_top_p;
  DeviceBuffer<int32_t> v_top_k, v_lengths, v_accepted;
  DeviceBuffer<unsigned char> v_target;
  void reserve_target(size_t bytes);

 private:
  int max_tokens_ = 0;
};

}  // namespace sparkdraft::cuda
