// The draft step written once (see step.h): one call per op, top to bottom.
#include "runtime/step.h"

#include <algorithm>

#include "sparkdraft/error.h"
#include "sparkdraft/ops/gemm.h"

namespace sparkdraft {

namespace {

LayerShard checked(const ModelConfig& c, LayerShard shard) {
  if (shard.tp_size < 1 || shard.tp_rank < 0 || shard.tp_rank >= shard.tp_size)
    throw InvalidArgument("DraftStep: TP rank " + std::to_string(shard.tp_rank) + " of " +
                          std::to_string(shard.tp_size) + " ranks");
  const std::string why = layer_shard_refusal(c, shard.tp_size);
  if (!why.empty())
    throw InvalidArgument("DraftStep: the layers do not shard over " +
                          std::to_string(shard.tp_size) + " ranks: " + why);
  return shard;
}

}  // namespace

void StepOps::gemm_all_reduce(const ops::GemmParams& p) {
  if (layer_tp_size() != 1 || p.w_row_stride() != p.K)
    throw InvalidArgument(
        "gemm_all_reduce: this op table runs replicated layers (one rank, w_stride == K)");
  gemm(p);
}

void StepOps::gemm_all_reduce_boundary(const ops::GemmParams& p, const ops::BoundaryParams& b,
                                       void* residual, bf16* next) {
  gemm_all_reduce(p);
  residual_boundary(b, p.y_bf16(), residual, next);
}

void StepOps::confidence(const ops::ConfidenceParams&) {
  throw Unavailable("this op table has no confidence head op (contract.md section 9)");
}

DraftStep::DraftStep(const ModelConfig& c, const DraftOptions& o, LayerShard shard)
    : c_(c),
      o_(o),
      shard_(checked(c, shard)),
      heads_(shard_.heads(c)),
      kv_heads_(shard_.kv_heads(c)),
      inter_(shard_.intermediate(c)),
      q_(heads_ * c.head_dim),
      kv_(kv_heads_ * c.head_dim),
      o_slices_(shard_.o_slices(c)),
      down_slices_(shard_.down_slices(c)),
      qkv_(QkvLayout::of(c, heads_, kv_heads_)) {}

ContextSizes DraftStep::context_sizes(int tokens) const {
  const size_t t = static_cast<size_t>(tokens), H = c_.hidden_size, kv = kv_;
  const size_t width = c_.context_layer_norm ? 2 * kv : c_.num_layers * 2 * kv;
  return {t * H, t * H, c_.context_layer_norm ? t * H : 0, t * width};
}

BlockSizes DraftStep::block_sizes(int tokens) const {
  const size_t t = static_cast<size_t>(tokens), H = c_.hidden_size, I = inter_;
  const bool f32 = c_.stream_dtype == StreamDType::f32;
  return {t,     t * H,     t * H, t * qkv_.width, t * static_cast<size_t>(q_),
          t * H, t * 2 * I, t * I, f32 ? t * H : 0};
}

void eager_qkv_front(StepOps& ops, const ops::QkvFrontParams& p) {
  p.check();
  const int T = p.tokens, hd = p.head_dim, kvh = p.kv_heads;
  const int64_t ts = p.token_stride;
  if (p.heads > 0) {
    if (p.qk_norm)
      ops.head_rms_norm(ops::head_norm(p.q, ts, T, p.heads, hd, p.q_norm, p.gain, p.eps));
    ops.rope(ops::rope_heads(p.q, ts, T, p.heads, hd, p.positions, p.rope_table, p.rope_style));
  }
  for (int l = 0; l < p.layers; ++l) {
    const ops::FrontLayer& f = p.layer[l];
    if (p.qk_norm) ops.head_rms_norm(ops::head_norm(f.k, ts, T, kvh, hd, f.k_norm, p.gain, p.eps));
    if (p.v_norm)
      ops.head_rms_norm(ops::head_norm(f.v, ts, T, kvh, hd, nullptr, NormGain::none, p.eps));
    ops.rope(ops::rope_heads(f.k, ts, T, kvh, hd, p.positions, p.rope_table, p.rope_style));
    ops.kv_insert(p.kv_insert(l));
  }
}

void eager_embed_norm(StepOps& ops, const ops::EmbedNormParams& p) {
  p.check();
  const int T = p.rows, H = p.hidden;
  ops.embed(p.embed());
  if (p.residual_f32) ops.widen(p.widen());
  ops.rms_norm(ops::rms_norm_of(p.x, H, T, H, p.weight, p.gain, p.eps, p.y, H));
}

void eager_gate_up_swiglu(StepOps& ops, const ops::GateUpParams& p) {
  p.check();
  ops::require(p.y_stride == p.inter, "gate_up_swiglu",
               "the eager composition writes y contiguous (y_stride == inter)");
  ops.gemm(p.gate_up());
  ops.silu_mul(p.silu());
}

ops::QkvFrontParams DraftStep::front_params(const StepWeights& w, int first, int layers, bf16* k,
                                            int64_t layer_step, int64_t stride, int tokens,
                                            const int64_t* positions, const int64_t* slots) const {
  ops::QkvFrontParams p;
  p.tokens = tokens;
  p.kv_heads = kv_heads_;
  p.head_dim = c_.head_dim;
  p.token_stride = stride;
  p.layers = layers;
  for (int i = 0; i < layers; ++i) {
    const StepLayer& lw = w.layers[static_cast<size_t>(first + i)];
    bf16* ki = k + static_cast<int64_t>(i) * layer_step;
    p.layer[i] = {ki, ki + kv_, lw.k_norm, lw.kv_cache};
  }
  p.qk_norm = c_.qk_norm;
  p.v_norm = c_.v_norm;
  p.gain = c_.norm_gain;
  p.eps = c_.rms_norm_eps;
  p.positions = positions;
  p.rope_table = w.rope;
  p.rope_style = c_.rope_style;
  p.slots = slots;
  return p;
}

void DraftStep::context_chain(StepOps& ops, const StepWeights& w, const ContextBuffers& buf,
                              int tokens, const bf16* hidden, const int64_t* positions,
                              const int64_t* slots) const {
  if (tokens == 0) return;
  const int T = tokens, H = c_.hidden_size, kv = kv_, L = c_.num_layers;
  ops.gemm(fc_gemm(w, hidden, T, buf.h));
  ops.rms_norm(ops::rms_norm_of(buf.h, H, T, H, w.hidden_norm, c_.norm_gain, c_.rms_norm_eps,
                                buf.normed, H));
  // K/V of every layer: one stacked GEMM and one front for all of them, or per layer
  // its input norm, its K/V GEMM and its front.
  const int width = c_.context_layer_norm ? 2 * kv : L * 2 * kv;
  if (!c_.context_layer_norm) {
    ops.gemm(context_kv_gemm(w, -1, buf.normed, T, buf.kv, width));
    for (int l = 0; l < L; l += ops::kMaxFrontLayers)
      ops.qkv_front(front_params(w, l, std::min(ops::kMaxFrontLayers, L - l),
                                 buf.kv + static_cast<size_t>(l) * 2 * kv, 2 * kv, width, T,
                                 positions, slots));
    return;
  }
  for (int l = 0; l < L; ++l) {
    const StepLayer& lw = w.layers[static_cast<size_t>(l)];
    ops.rms_norm(ops::rms_norm_of(buf.normed, H, T, H, lw.input_norm, c_.norm_gain, c_.rms_norm_eps,
                                  buf.layer_in, H));
    ops.gemm(context_kv_gemm(w, l, buf.layer_in, T, buf.kv, width));
    ops.qkv_front(front_params(w, l, 1, buf.kv, 0, width, T, positions, slots));
  }
}

ops::GemmParams DraftStep::fc_gemm(const StepWeights& w, const bf16* x, int T, bf16* y) const {
  const int H = c_.hidden_size, in_width = c_.taps() * c_.target_hidden_size;
  return ops::gemm_of(x, in_width, w.fc, T, H, in_width, y, H);
}

ops::GemmParams DraftStep::context_kv_gemm(const StepWeights& w, int layer, const bf16* x, int T,
                                           bf16* y, int ldy) const {
  const int H = c_.hidden_size, kv = kv_;
  if (layer < 0) return ops::gemm_of(x, H, w.context_kv, T, c_.num_layers * 2 * kv, H, y, ldy);
  return ops::gemm_of(x, H, w.context_kv + static_cast<size_t>(layer) * 2 * kv * H, T, 2 * kv, H, y,
                      ldy);
}

ops::GemmParams DraftStep::qkv_gemm(const StepLayer& lw, const bf16* x, int T, bf16* y) const {
  const int H = c_.hidden_size, W = qkv_.width;
  return ops::gemm_of(x, H, lw.qkv, T, W, H, y, W);
}

ops::GemmParams DraftStep::o_proj_gemm(const StepLayer& lw, const bf16* x, int T, bf16* y) const {
  const int H = c_.hidden_size;
  ops::GemmParams p = ops::gemm_of(x, q_, lw.o_proj, T, H, q_, y, H, o_slices_);
  p.w_stride = lw.o_proj_stride;
  return p;
}

ops::GateUpParams DraftStep::gate_up(const StepLayer& lw, const bf16* x, int T, bf16* gu,
                                     bf16* y) const {
  const int H = c_.hidden_size;
  return ops::gate_up_of(x, H, lw.gate_up, T, inter_, H, gu, y);
}

ops::GemmParams DraftStep::down_gemm(const StepLayer& lw, const bf16* x, int T, bf16* y) const {
  const int H = c_.hidden_size;
  ops::GemmParams p = ops::gemm_of(x, inter_, lw.down_proj, T, H, inter_, y, H, down_slices_);
  p.w_stride = lw.down_proj_stride;
  return p;
}

std::vector<ops::GemmParams> DraftStep::weight_gemms(const StepWeights& w) const {
  std::vector<ops::GemmParams> g{fc_gemm(w, nullptr, 0, nullptr)};
  // context_chain's K/V: one stacked GEMM, or one per layer (ldy: as context_chain's).
  const int L = c_.num_layers, kv = kv_;
  if (!c_.context_layer_norm)
    g.push_back(context_kv_gemm(w, -1, nullptr, 0, nullptr, L * 2 * kv));
  else
    for (int l = 0; l < L; ++l) g.push_back(context_kv_gemm(w, l, nullptr, 0, nullptr, 2 * kv));
  // block's per layer: qkv, o_proj, gate_up, down_proj.
  for (const StepLayer& lw : w.layers) {
    g.push_back(qkv_gemm(lw, nullptr, 0, nullptr));
    g.push_back(o_proj_gemm(lw, nullptr, 0, nullptr));
    g.push_back(gate_up(lw, nullptr, 0, nullptr, nullptr).gate_up());
    g.push_back(down_gemm(lw, nullptr, 0, nullptr));
  }
  return g;
}

ops::BoundaryParams DraftStep::boundary_params(int tokens, const bf16* post_weight,
                                               const float* alpha, const float* beta,
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
  return p;
}

void DraftStep::confidence(StepOps& ops, const ProposeBatch& b, const bf16* hidden,
                           const int64_t* anchors, const int64_t* tokens, const bf16* w1,
                           const bf16* weight, const bf16* bias, float* out) const {
  if (!c_.confidence_head)
    throw InvalidArgument("DraftStep::confidence: the config has no confidence head");
  ops::ConfidenceParams p;
  p.rows = b.num_rows;
  p.steps = c_.block_size;
  p.hidden = c_.hidden_size;
  p.rank = c_.confidence_head_with_markov ? c_.markov_rank : 0;
  p.hidden_states = hidden;
  p.anchor_tokens = anchors;
  p.draft_tokens = tokens;
  p.cache_slots = b.cache_slots;
  p.lengths = b.lengths;
  p.w1 = w1;
  p.weight = weight;
  p.bias = bias;
  p.out = out;
  if (!c_.confidence_temperatures.empty()) {  // STS (contract.md 9.1)
    p.calibrated = true;
    std::copy(c_.confidence_temperatures.begin(), c_.confidence_temperatures.end(), p.temperatures);
  }
  ops.confidence(p);
}

ops::AttentionParams DraftStep::attention_params(int rows, int layer, const int32_t* block_tables,
                                                 const BlockBuffers& buf) const {
  const LayerAttention la = c_.attention_of(layer);
  ops::AttentionParams ap;
  ap.tokens = rows * c_.query_slots();
  ap.requests = rows;
  ap.heads = heads_;
  ap.kv_heads = kv_heads_;
  ap.head_dim = c_.head_dim;
  ap.page_size = o_.page_size;
  ap.max_pages = o_.max_pages_per_req;
  ap.window = la.window;
  ap.causal = la.causal;
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
  const int R = b.num_rows, Q = c_.query_slots(), T = R * Q, H = c_.hidden_size;
  const int hd = c_.head_dim, L = c_.num_layers, W = qkv_.width;
  if (ops.layer_tp_size() != shard_.tp_size)
    throw InvalidArgument("DraftStep: a step of " + std::to_string(shard_.tp_size) +
                          " layer ranks on an op table of " + std::to_string(ops.layer_tp_size()));
  ops.mark(0);

  // The query block: anchor then Q-1 mask tokens at positions a .. a+Q-1.
  const ops::QueryBlockParams qp{.rows = R,
                                 .steps = Q,
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
  // The embedding, the residual's start (exact in fp32) and layer 0's input norm.
  const bool f32 = c_.stream_dtype == StreamDType::f32;
  ops::EmbedNormParams ep;
  ep.rows = T;
  ep.hidden = H;
  ep.ids = buf.ids;
  ep.table = w.embed;
  ep.x = buf.x;
  ep.residual_f32 = f32 ? buf.residual_f32 : nullptr;
  ep.weight = w.layers[0].input_norm;
  ep.gain = c_.norm_gain;
  ep.eps = c_.rms_norm_eps;
  ep.y = buf.h;
  ops.embed_norm(ep);
  ops.mark(1);
  void* residual = f32 ? static_cast<void*>(buf.residual_f32) : static_cast<void*>(buf.x);

  const bool sandwich = c_.layer_style == LayerStyle::sandwich;
  for (int l = 0; l < L; ++l) {
    const StepLayer& lw = w.layers[static_cast<size_t>(l)];
    // Attention: QKV(+gate) GEMM, QK-norm, RoPE, KV insert, attention, o-norm/gate, o_proj.
    ops.gemm(qkv_gemm(lw, buf.h, T, buf.qkv));
    bf16* qh = buf.qkv + qkv_.q;
    ops::QkvFrontParams fp =
        front_params(w, l, 1, buf.qkv + qkv_.k, 0, W, T, buf.positions, buf.slots);
    fp.heads = heads_;
    fp.q = qh;
    fp.q_norm = lw.q_norm;
    ops.qkv_front(fp);
    ops.attention(attention_params(R, l, b.block_tables, buf), qh, lw.kv_cache, buf.attn);
    if (c_.o_norm || c_.output_gate)
      ops.o_norm_gate(ops::o_norm_gate_of(buf.attn, T, heads_, hd, c_.o_norm, lw.o_norm,
                                          c_.o_norm_gain(), c_.rms_norm_eps,
                                          c_.output_gate ? buf.qkv + qkv_.g : nullptr, W));
    // o_proj and down_proj: this rank's canonical K slices, the tree completed over
    // the ranks (contract.md section 6), one bf16 rounding; the boundary on every rank.
    ops.gemm_all_reduce_boundary(o_proj_gemm(lw, buf.attn, T, buf.branch),
                                 boundary_params(T, lw.post_attn_norm, lw.attn_alpha, lw.attn_beta,
                                                 sandwich ? lw.pre_ffn_norm : lw.post_attn_norm),
                                 residual, buf.h);
    // SwiGLU MLP.
    ops.gate_up_swiglu(gate_up(lw, buf.h, T, buf.gu, buf.act));
    const bf16* next = l + 1 < L ? w.layers[static_cast<size_t>(l) + 1].input_norm : w.final_norm;
    ops.gemm_all_reduce_boundary(
        down_gemm(lw, buf.act, T, buf.branch),
        boundary_params(T, lw.post_ffn_norm, lw.mlp_alpha, lw.mlp_beta, next), residual, buf.h);
  }
  // The fill-in layout: slots 1 .. N of each request are the drafted rows.
  if (!c_.sample_from_anchor) {
    if (!buf.drafted) throw InvalidArgument("DraftStep: the fill-in layout needs buf.drafted");
    ops.select_drafted_rows(ops::DraftedRowsParams{.rows = R,
                                                   .slots = Q,
                                                   .drafted = c_.block_size,
                                                   .first = c_.first_drafted_slot(),
                                                   .hidden = H,
                                                   .in = buf.h,
                                                   .out = buf.drafted});
  }
  ops.mark(2);
}

}  // namespace sparkdraft
