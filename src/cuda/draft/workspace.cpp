#include "cuda/draft/workspace.h"

#include <algorithm>

#include "cuda/kernels.h"
#include "sparkdraft/cuda/check.h"

namespace sparkdraft::cuda {

namespace {

template <class T>
void grow(DeviceBuffer<T>& buf, size_t size) {
  if (buf.size() < size) buf = DeviceBuffer<T>(size);
}

}  // namespace

DraftWorkspace::DraftWorkspace(const ModelConfig& c, const DraftOptions& o, const DraftStep& step,
                               const WorkspaceShape& shape, cudaStream_t stream)
    : max_tokens_(static_cast<int>(o.max_reqs) * c.query_slots()) {
  // T: the query block's tokens (Q a request); D: the drafted rows (N a request), what
  // lm_head, the loop and the outputs hold (contract.md section 14).
  const size_t R = o.max_reqs, N = c.block_size;
  const int T = max_tokens_;
  const size_t D = R * N;
  const BlockSizes n = step.block_sizes(T);
  ids = DeviceBuffer<int64_t>(n.per_token);
  positions = DeviceBuffer<int64_t>(n.per_token);
  slots = DeviceBuffer<int64_t>(n.per_token);
  token_request = DeviceBuffer<int32_t>(n.per_token);
  kv_lens = DeviceBuffer<int64_t>(R);
  safe_anchor = DeviceBuffer<int64_t>(R);
  safe_position = DeviceBuffer<int64_t>(R);
  x = DeviceBuffer<bf16>(n.x);
  h = DeviceBuffer<bf16>(n.h);
  qkv_out = DeviceBuffer<bf16>(n.qkv);
  attn_out = DeviceBuffer<bf16>(n.attn);
  branch = DeviceBuffer<bf16>(n.branch);
  gu = DeviceBuffer<bf16>(n.gu);
  act = DeviceBuffer<bf16>(n.act);
  if (n.residual_f32) residual_f32 = DeviceBuffer<float>(n.residual_f32);
  if (shape.layer_tp > 1) reduce_f32 = DeviceBuffer<float>(static_cast<size_t>(T) * c.hidden_size);
  block =
      BlockBuffers{ids.data(),     positions.data(),   slots.data(),         token_request.data(),
                   kv_lens.data(), safe_anchor.data(), safe_position.data(), x.data(),
                   h.data(),       qkv_out.data(),     attn_out.data(),      branch.data(),
                   gu.data(),      act.data(),         residual_f32.data()};
  if (const size_t n_drafted = step.drafted_size(static_cast<int>(R))) {
    drafted = DeviceBuffer<bf16>(n_drafted);
    block.drafted = drafted.data();
  }
  base = DeviceBuffer<bf16>(D * shape.vocab_shard);
  in_tables = DeviceBuffer<int32_t>(R * o.max_pages_per_req);
  for (int rows = 1; rows <= static_cast<int>(R); ++rows)
    for (int l = 0; l < c.num_layers; ++l)
      attn_bytes = std::max(attn_bytes, attention_workspace_bytes(step.attention_params(
                                            rows, l, in_tables.data(), block)));
  attn = DeviceBuffer<unsigned char>(attn_bytes);
  in_anchor = DeviceBuffer<int64_t>(R);
  in_pos = DeviceBuffer<int64_t>(R);
  in_seed = DeviceBuffer<int64_t>(R);
  in_slot = DeviceBuffer<int64_t>(R);
  in_temp = DeviceBuffer<float>(R);
  in_len = DeviceBuffer<int32_t>(R);
  out_tokens = DeviceBuffer<int64_t>(D);
  cache = DeviceBuffer<bf16>(static_cast<size_t>(o.cache_slots) * N * c.vocab_size);
  if (c.confidence_head) conf = DeviceBuffer<float>(D);
  SD_CUDA_CHECK(cudaMemsetAsync(cache.data(), 0, cache.bytes(), stream));

  const ContextSizes cn = step.context_sizes(shape.max_context_tokens);
  dev_ctx_h = DeviceBuffer<bf16>(cn.h);
  dev_ctx_normed = DeviceBuffer<bf16>(cn.normed);
  dev_ctx_in = DeviceBuffer<bf16>(cn.layer_in);
  dev_ctx_kv = DeviceBuffer<bf16>(cn.kv);

  verify = std::make_unique<VerifyWorkspace>(o.max_reqs, c.block_size, c.vocab_size);
  v_tokens = DeviceBuffer<int64_t>(R * N);
  v_anchor = DeviceBuffer<int64_t>(R);
  v_seed = DeviceBuffer<int64_t>(R);
  v_slot = DeviceBuffer<int64_t>(R);
  v_out_tokens = DeviceBuffer<int64_t>(R * (N + 1));
  v_temp = DeviceBuffer<float>(R);
  v_top_p = DeviceBuffer<float>(R);
  v_top_k = DeviceBuffer<int32_t>(R);
  v_lengths = DeviceBuffer<int32_t>(R);
  v_accepted = DeviceBuffer<int32_t>(R);
}

ContextBuffers DraftWorkspace::device_context() {
  return ContextBuffers{dev_ctx_h.data(), dev_ctx_normed.data(), dev_ctx_in.data(),
                        dev_ctx_kv.data()};
}

void DraftWorkspace::reserve_context(const ContextSizes& n, int tokens, size_t in_width) {
  grow(ctx_hidden, static_cast<size_t>(tokens) * in_width);
  grow(ctx_h, n.h);
  grow(ctx_normed, n.normed);
  grow(ctx_in, n.layer_in);
  grow(ctx_kv, n.kv);
  grow(ctx_pos, static_cast<size_t>(tokens));
  grow(ctx_slots, static_cast<size_t>(tokens));
}

ContextBuffers DraftWorkspace::host_context() {
  return ContextBuffers{ctx_h.data(), ctx_normed.data(), ctx_in.data(), ctx_kv.data()};
}

void DraftWorkspace::reserve_target(size_t bytes) { grow(v_target, bytes); }

}  // namespace sparkdraft::cuda
