// The draft step written once (see step.h): one call per op, top to bottom.
#include "runtime/step.h"

#include "sparkdraft/ops/gemm.h"

namespace sparkdraft {

DraftStep::DraftStep(const ModelConfig& c, const DraftOptions& o)
    : c_(c), o_(o), qkv_(QkvLayout::of(c)) {}

ContextSizes DraftStep::context_sizes(int tokens) const {
  const size_t t = static_cast<size_t>(tokens), H = c_.hidden_size, kv = c_.kv_size();
  const size_t width = c_.context_layer_norm ? 2 * kv : c_.num_layers * 2 * kv;
  return {t * H, t * H, c_.context_layer_norm ? t * H : 0, t * width};
}

BlockSizes DraftStep::block_sizes(int tokens) const {
  const size_t t = static_cast<size_t>(tokens), H = c_.hidden_size, I = c_.intermediate_size;
  const bool f32 = c_.stream_dtype == StreamDType::f32;
  return {t,     t * H,     t * H, t * qkv_.width, t * c_.q_size(),
          t * H, t * 2 * I, t * I, f32 ? t * H : 0};
}

void DraftStep::kv_heads(StepOps& ops, bf16* k, bf16* v, int64_t stride, int tokens,
                         const StepLayer& l, const int64_t* positions,
                         const float* rope_table) const {
  const int kvh = c_.num_kv_heads, hd = c_.head_dim;
  if (c_.qk_norm)
    ops.head_rms_norm(k, stride, tokens, kvh, hd, l.k_norm, c_.norm_gain, c_.rms_norm_eps);
  if (c_.v_norm)
    ops.head_rms_norm(v, stride, tokens, kvh, hd, nullptr, NormGain::none, c_.rms_norm_eps);
  ops.rope(k, stride, tokens, kvh, hd, positions, rope_table, c_.rope_style);
}

void DraftStep::context_chain(StepOps& ops, const StepWeights& w, const ContextBuffers& buf,
                              int tokens, const bf16* hidden, const int64_t* positions,
                              const int64_t* slots) const {
  if (tokens == 0) return;
  const int T = tokens, H = c_.hidden_size, kv = c_.kv_size(), L = c_.num_layers;
  const int in_width = c_.taps() * c_.target_hidden_size;
  ops.gemm(hidden, in_width, w.fc, T, H, in_width, buf.h, H, 1);
  ops.rms_norm(buf.h, H, T, H, w.hidden_norm, c_.norm_gain, c_.rms_norm_eps, buf.normed, H);
  // K/V of every layer: one stacked GEMM, or one per layer after its input norm.
  const int width = c_.context_layer_norm ? 2 * kv : L * 2 * kv;
  if (!c_.context_layer_norm)
    ops.gemm(buf.normed, H, w.context_kv, T, L * 2 * kv, H, buf.kv, width, 1);
  for (int l = 0; l < L; ++l) {
    const StepLayer& lw = w.layers[static_cast<size_t>(l)];
    bf16* k = buf.kv + (c_.context_layer_norm ? 0 : static_cast<size_t>(l) * 2 * kv);
    if (c_.context_layer_norm) {
      ops.rms_norm(buf.normed, H, T, H, lw.input_norm, c_.norm_gain, c_.rms_norm_eps, buf.layer_in,
                   H);
      ops.gemm(buf.layer_in, H, w.context_kv + static_cast<size_t>(l) * 2 * kv * H, T, 2 * kv, H,
               buf.kv, width, 1);
    }
    kv_heads(ops, k, k + kv, width, T, lw, positions, w.rope);
    ops.kv_insert(k, width, k + kv, width, T, c_.num_kv_heads, c_.head_dim, slots, lw.kv_cache);
  }
}

void DraftStep::boundary(StepOps& ops, const bf16* branch, void* residual, bf16* next, int tokens,
                         const bf16* post_weight, const float* alpha, const float* beta,
                         const bf16* pre_weight) const {
  const bool sandwich = c_.layer_style == LayerStyle::sandwich;
  const bool np = c_.residual_kind == ResidualKind::norm_preserving;
  ops::BoundaryParams p;
  p.rows = tokens;
  p.hidden = c_.hidden_size;
  p.residual_dtype = c_.stream_dtype;
  p.post_weight = sandwich ? post_weight : nullptr;
  p.post_norm = sandwich;
  p.alpha = np ? alpha : nullptr;
  p.beta = np ? beta : nullptr;
  p.pre_weight = pre_weight;
  p.gain = c_.norm_gain;
  p.eps = c_.rms_norm_eps;
  ops.residual_boundary(p, branch, residual, next);
}

ops::AttentionParams DraftStep::attention_params(int tokens, const int32_t* block_tables,
                                                 const BlockBuffers& buf) const {
  ops::AttentionParams ap;
  ap.tokens = tokens;
  ap.heads = c_.num_heads;
  ap.kv_heads = c_.num_kv_heads;
  ap.head_dim = c_.head_dim;
  ap.page_size = o_.page_size;
  ap.max_pages = o_.max_pages_per_req;
  ap.window = c_.sliding_window;
  ap.q_stride = qkv_.width;
  ap.block_tables = block_tables;
  ap.token_request = buf.token_request;
  ap.positions = buf.positions;
  ap.kv_lens = buf.kv_lens;
  ap.max_kv_len = o_.max_positions();
  return ap;
}

void DraftStep::block(StepOps& ops, const StepWeights& w, const BlockBuffers& buf,
                      const ProposeBatch& b) const {
  const int R = b.num_rows, N = c_.block_size, T = R * N, H = c_.hidden_size;
  const int I = c_.intermediate_size, hd = c_.head_dim, L = c_.num_layers;
  const int W = qkv_.width, q = c_.q_size();
  ops.mark(0);

  // The query block: anchor then N-1 mask tokens at positions a .. a+N-1.
  const ops::QueryBlockParams qp{.rows = R,
                                 .steps = N,
                                 .page_size = o_.page_size,
                                 .max_pages = o_.max_pages_per_req,
                                 .mask_token = c_.mask_token_id,
                                 .anchor_tokens = b.anchor_tokens,
                                 .anchor_positions = b.anchor_positions,
                                 .cache_slots = b.cache_slots,
                                 .block_tables = b.block_tables,
                                 .ids = buf.ids,
                                 .positions = buf.positions,
                                 .slots = buf.slots,
                                 .token_request = buf.token_request,
                                 .kv_lens = buf.kv_lens,
                                 .safe_anchor = buf.safe_anchor,
                                 .safe_position = buf.safe_position};
  ops.prepare_query_block(qp);
  ops.embed(buf.ids, T, w.embed, H, buf.x);
  ops.mark(1);

  // The residual starts as the embedding (exact in fp32).
  const bool f32 = c_.stream_dtype == StreamDType::f32;
  if (f32) ops.widen(buf.x, static_cast<int64_t>(T) * H, buf.residual_f32);
  void* residual = f32 ? static_cast<void*>(buf.residual_f32) : static_cast<void*>(buf.x);
  ops.rms_norm(buf.x, H, T, H, w.layers[0].input_norm, c_.norm_gain, c_.rms_norm_eps, buf.h, H);

  const ops::AttentionParams ap = attention_params(T, b.block_tables, buf);

  const bool sandwich = c_.layer_style == LayerStyle::sandwich;
  // o_proj and down_proj: the canonical K slices at every TP size (SPEC section 6).
  const int o_slices = sparkdraft::ops::canonical_k_slices(q);
  const int down_slices = sparkdraft::ops::canonical_k_slices(I);
  for (int l = 0; l < L; ++l) {
    const StepLayer& lw = w.layers[static_cast<size_t>(l)];
    // Attention: QKV(+gate) GEMM, QK-norm, RoPE, KV insert, attention, o-norm/gate, o_proj.
    ops.gemm(buf.h, H, lw.qkv, T, W, H, buf.qkv, W, 1);
    bf16* qh = buf.qkv + qkv_.q;
    bf16* kp = buf.qkv + qkv_.k;
    if (c_.qk_norm)
      ops.head_rms_norm(qh, W, T, c_.num_heads, hd, lw.q_norm, c_.norm_gain, c_.rms_norm_eps);
    ops.rope(qh, W, T, c_.num_heads, hd, buf.positions, w.rope, c_.rope_style);
    kv_heads(ops, kp, buf.qkv + qkv_.v, W, T, lw, buf.positions, w.rope);
    ops.kv_insert(kp, W, buf.qkv + qkv_.v, W, T, c_.num_kv_heads, hd, buf.slots, lw.kv_cache);
    ops.attention(ap, qh, lw.kv_cache, buf.attn);
    if (c_.o_norm || c_.output_gate)
      ops.o_norm_gate(buf.attn, T, c_.num_heads, hd, lw.o_norm, c_.o_norm, c_.norm_gain,
                      c_.rms_norm_eps, c_.output_gate ? buf.qkv + qkv_.g : nullptr, W);
    ops.gemm(buf.attn, q, lw.o_proj, T, H, q, buf.branch, H, o_slices);
    boundary(ops, buf.branch, residual, buf.h, T, lw.post_attn_norm, lw.attn_alpha, lw.attn_beta,
             sandwich ? lw.pre_ffn_norm : lw.post_attn_norm);
    // SwiGLU MLP.
    ops.gemm(buf.h, H, lw.gate_up, T, 2 * I, H, buf.gu, 2 * I, 1);
    ops.silu_mul(buf.gu, T, I, buf.act);
    ops.gemm(buf.act, I, lw.down_proj, T, H, I, buf.branch, H, down_slices);
    const bf16* next = l + 1 < L ? w.layers[static_cast<size_t>(l) + 1].input_norm : w.final_norm;
    boundary(ops, buf.branch, residual, buf.h, T, lw.post_ffn_norm, lw.mlp_alpha, lw.mlp_beta,
             next);
  }
  ops.mark(2);
}

}  // namespace sparkdraft
