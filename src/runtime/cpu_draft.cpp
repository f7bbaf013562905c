// The whole draft job on the CPU backend (SPEC section 1), composed of the
// reference ops of cpu/ops.h one call per op, on the packed weights both
// backends share (runtime/packed_weights.h): the reference the CUDA eager path
// is held to, and the embedded default on a machine without a GPU.
//
// Tensor parallelism here shards only the vocabulary (lm_head and Markov w2):
// the layers stay replicated, so the backbone runs once and its output feeds
// every rank's slice; the Markov loop runs on ranks as threads (comm.h) with one
// packet all-gather per step and the cache all-gather after the loop.
#include <algorithm>
#include <chrono>
#include <cstring>
#include <memory>
#include <new>
#include <stdexcept>
#include <thread>

#include "runtime/markov_loop.h"
#include "runtime/packed_weights.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

class CpuDraft final : public DraftBackend {
 public:
  CpuDraft(std::shared_ptr<const Checkpoint> ckpt, const DraftOptions& options,
           const MatmulOps* matmul)
      : ckpt_(std::move(ckpt)), c_(ckpt_->config()), o_(options), w_(ckpt_->weights()) {
    c_.validate();
    validate_options(c_, o_);
    if (o_.threads <= 0) o_.threads = std::max(1u, std::thread::hardware_concurrency());
    if (c_.markov_rank <= 0)
      throw ConfigError("the CPU backend needs a Markov head (markov_rank > 0)");
    packed_ = PackedWeights::pack(c_, w_);
    qkv_ = QkvLayout::of(c_);
    const size_t per_layer =
        static_cast<size_t>(o_.num_pages) * o_.page_size * c_.num_kv_heads * 2 * c_.head_dim;
    try {
      kv_.assign(c_.num_layers, std::vector<bf16>(per_layer, bf16{0}));
      rope_.resize(static_cast<size_t>(o_.max_positions()) * c_.head_dim);
    } catch (const std::bad_alloc&) {
      throw InvalidArgument("DraftOptions: the KV cache (" + std::to_string(c_.num_layers) +
                            " layers x " + std::to_string(per_layer * sizeof(bf16)) +
                            " bytes for num_pages " + std::to_string(o_.num_pages) +
                            ", page_size " + std::to_string(o_.page_size) +
                            ") cannot be allocated");
    } catch (const std::length_error&) {
      throw InvalidArgument("DraftOptions: the KV cache (" + std::to_string(per_layer) +
                            " elements per layer for num_pages " + std::to_string(o_.num_pages) +
                            ", page_size " + std::to_string(o_.page_size) + ") is too large");
    }
    cpu::rope_table(c_.rope_theta, c_.head_dim, o_.max_positions(), rope_.data());
    transform_ = cpu::LogitTransform::from_config(c_);
    const int th = o_.threads;
    mm_.gemm = [th](const bf16* x, int64_t xs, const bf16* w, int M, int N, int K, bf16* y,
                    int64_t ys) { cpu::gemm(x, xs, w, M, N, K, y, ys, th); };
    mm_.attention = [th](const cpu::AttentionParams& p, const bf16* q, const bf16* cache,
                         bf16* out) { cpu::attention(p, q, cache, out, th); };
    if (matmul && matmul->gemm) mm_.gemm = matmul->gemm;
    if (matmul && matmul->attention) mm_.attention = matmul->attention;
  }

  std::string name() const override { return "cpu"; }
  const ModelConfig& config() const override { return c_; }
  const DraftOptions& options() const override { return o_; }
  StageTimings last_timings() const override { return t_; }
  std::vector<bf16> kv_cache(int layer) const override { return kv_.at(layer); }

  // fc -> hidden_norm -> (each layer's input norm) -> K/V -> K-norm -> RoPE -> insert.
  void store_context(const ContextBatch& b) override {
    validate_context(c_, o_, b);
    const auto t0 = Clock::now();
    const int T = b.num_tokens;
    if (T == 0) return;
    const int H = c_.hidden_size, kv = c_.kv_size(), L = c_.num_layers, th = o_.threads;
    const int in_width = c_.taps() * c_.target_hidden_size;
    std::vector<bf16> h(static_cast<size_t>(T) * H), normed(h.size());
    mm_.gemm(b.hidden, in_width, w_.fc, T, H, in_width, h.data(), H);
    cpu::rms_norm(h.data(), H, T, H, w_.hidden_norm, c_.norm_gain, c_.rms_norm_eps, normed.data(),
                  H, th);
    // K/V of every layer: one stacked GEMM, or one per layer after its input norm.
    const int width = c_.context_layer_norm ? 2 * kv : L * 2 * kv;
    std::vector<bf16> kvbuf(static_cast<size_t>(T) * (c_.context_layer_norm ? 2 * kv : L * 2 * kv));
    if (!c_.context_layer_norm)
      mm_.gemm(normed.data(), H, packed_.context_kv.data(), T, L * 2 * kv, H, kvbuf.data(), width);
    std::vector<bf16> layer_in(c_.context_layer_norm ? h.size() : 0);
    for (int l = 0; l < L; ++l) {
      bf16* k = kvbuf.data() + (c_.context_layer_norm ? 0 : static_cast<size_t>(l) * 2 * kv);
      if (c_.context_layer_norm) {
        cpu::rms_norm(normed.data(), H, T, H, w_.layers[l].input_norm, c_.norm_gain,
                      c_.rms_norm_eps, layer_in.data(), H, th);
        mm_.gemm(layer_in.data(), H,
                 packed_.context_kv.data() + static_cast<size_t>(l) * 2 * kv * H, T, 2 * kv, H,
                 kvbuf.data(), width);
      }
      kv_heads(k, k + kv, width, T, w_.layers[l], b.positions);
      cpu::kv_insert(k, width, k + kv, width, T, c_.num_kv_heads, c_.head_dim, b.slots,
                     kv_[l].data());
    }
    t_.context_ms = ms_since(t0);
  }

  void propose(const ProposeBatch& b, const ProposeOutputs& out) override {
    validate_propose(c_, o_, b);
    if (!out.draft_tokens || !out.draft_logits)
      throw InvalidArgument("propose: draft_tokens and draft_logits outputs must be given");
    const int R = b.num_rows, N = c_.block_size, T = R * N, H = c_.hidden_size;
    MarkovRows rows = markov_rows(b, N);

    // Query block: anchor then N-1 mask tokens at positions a .. a+N-1. Padding
    // rows insert no K/V and attend to nothing.
    auto t0 = Clock::now();
    std::vector<int64_t> ids(T), positions(T), slots(T), kv_lens(R);
    std::vector<int32_t> token_request(T);
    for (int r = 0; r < R; ++r) {
      const bool pad = b.cache_slots[r] < 0;
      const int64_t a = rows.anchor_positions[r];
      kv_lens[r] = a + N;
      for (int j = 0; j < N; ++j) {
        const int t = r * N + j;
        ids[t] = j == 0 ? rows.anchor_tokens[r] : c_.mask_token_id;
        positions[t] = a + j;
        token_request[t] = pad ? -1 : r;
        slots[t] =
            pad ? -1
                : cpu::kv_slot(b.block_tables + static_cast<int64_t>(r) * o_.max_pages_per_req,
                               o_.page_size, a + j);
      }
    }
    std::vector<bf16> x(static_cast<size_t>(T) * H);
    cpu::embed(ids.data(), T, w_.embed, H, x.data());
    t_.embed_ms = ms_since(t0);

    t0 = Clock::now();
    Block blk{
        T, positions.data(), slots.data(), token_request.data(), kv_lens.data(), b.block_tables};
    std::vector<bf16> hidden = backbone(x, blk);
    t_.backbone_ms = ms_since(t0);

    MarkovInputs in{&c_, &w_, &transform_, &rows, o_.cache_slots, o_.threads};
    in.gemm = &mm_.gemm;
    run_vocab_parallel_markov(in, o_.tp, hidden.data(), out, &t_.lm_head_ms, &t_.markov_ms);
  }

 private:
  struct Block {
    int tokens;
    const int64_t* positions;
    const int64_t* slots;
    const int32_t* token_request;
    const int64_t* kv_lens;
    const int32_t* block_tables;
  };

  // K-norm, V-norm and RoPE on K (the context chain and the block share it).
  void kv_heads(bf16* k, bf16* v, int64_t stride, int T, const LayerWeights& lw,
                const int64_t* positions) {
    const int kvh = c_.num_kv_heads, hd = c_.head_dim, th = o_.threads;
    if (c_.qk_norm)
      cpu::head_rms_norm(k, stride, T, kvh, hd, lw.k_norm, c_.norm_gain, c_.rms_norm_eps, th);
    if (c_.v_norm)
      cpu::head_rms_norm(v, stride, T, kvh, hd, nullptr, NormGain::none, c_.rms_norm_eps, th);
    cpu::rope(k, stride, T, kvh, hd, positions, rope_.data(), c_.rope_style, th);
  }

  std::vector<bf16> backbone(std::vector<bf16>& x, const Block& blk) {
    const int T = blk.tokens, H = c_.hidden_size, I = c_.intermediate_size, hd = c_.head_dim;
    const int th = o_.threads, L = c_.num_layers, W = qkv_.width, q = c_.q_size();
    const bool f32_stream = c_.stream_dtype == StreamDType::f32;
    const bool sandwich = c_.layer_style == LayerStyle::sandwich;
    // The residual stream starts as the embedding (exact in fp32).
    std::vector<float> stream_f32;
    if (f32_stream) {
      stream_f32.resize(x.size());
      for (size_t i = 0; i < x.size(); ++i) stream_f32[i] = to_f32(x[i]);
    }
    void* stream =
        f32_stream ? static_cast<void*>(stream_f32.data()) : static_cast<void*>(x.data());
    std::vector<bf16> h(static_cast<size_t>(T) * H);
    cpu::rms_norm(x.data(), H, T, H, w_.layers[0].input_norm, c_.norm_gain, c_.rms_norm_eps,
                  h.data(), H, th);

    std::vector<bf16> qkv(static_cast<size_t>(T) * W), o(static_cast<size_t>(T) * q);
    std::vector<bf16> branch(static_cast<size_t>(T) * H), gu(static_cast<size_t>(T) * 2 * I);
    std::vector<bf16> act(static_cast<size_t>(T) * I);
    cpu::AttentionParams ap;
    ap.tokens = T;
    ap.heads = c_.num_heads;
    ap.kv_heads = c_.num_kv_heads;
    ap.head_dim = hd;
    ap.page_size = o_.page_size;
    ap.max_pages = o_.max_pages_per_req;
    ap.window = c_.sliding_window;
    ap.q_stride = W;
    ap.block_tables = blk.block_tables;
    ap.token_request = blk.token_request;
    ap.positions = blk.positions;
    ap.kv_lens = blk.kv_lens;

    for (int l = 0; l < L; ++l) {
      const LayerWeights& lw = w_.layers[l];
      // Attention: QKV(+gate) GEMM, QK-norm, RoPE, KV insert, attention, o-norm/gate, o_proj.
      mm_.gemm(h.data(), H, packed_.qkv[l].data(), T, W, H, qkv.data(), W);
      bf16* qp = qkv.data() + qkv_.q;
      bf16* kp = qkv.data() + qkv_.k;
      if (c_.qk_norm)
        cpu::head_rms_norm(qp, W, T, c_.num_heads, hd, lw.q_norm, c_.norm_gain, c_.rms_norm_eps,
                           th);
      cpu::rope(qp, W, T, c_.num_heads, hd, blk.positions, rope_.data(), c_.rope_style, th);
      kv_heads(kp, qkv.data() + qkv_.v, W, T, lw, blk.positions);
      cpu::kv_insert(kp, W, qkv.data() + qkv_.v, W, T, c_.num_kv_heads, hd, blk.slots,
                     kv_[l].data());
      mm_.attention(ap, qp, kv_[l].data(), o.data());
      if (c_.o_norm || c_.output_gate)
        cpu::o_norm_gate(o.data(), T, c_.num_heads, hd, lw.o_norm, c_.o_norm, c_.norm_gain,
                         c_.rms_norm_eps, c_.output_gate ? qkv.data() + qkv_.g : nullptr, W, th);
      mm_.gemm(o.data(), q, lw.o_proj, T, H, q, branch.data(), H);
      boundary(branch.data(), stream, h.data(), T, sandwich ? lw.post_attn_norm : nullptr, sandwich,
               lw.attn_alpha, lw.attn_beta, sandwich ? lw.pre_ffn_norm : lw.post_attn_norm);
      // SwiGLU MLP.
      mm_.gemm(h.data(), H, packed_.gate_up[l].data(), T, 2 * I, H, gu.data(), 2 * I);
      cpu::silu_mul(gu.data(), T, I, act.data(), th);
      mm_.gemm(act.data(), I, lw.down_proj, T, H, I, branch.data(), H);
      const bf16* next = l + 1 < L ? w_.layers[l + 1].input_norm : w_.final_norm;
      boundary(branch.data(), stream, h.data(), T, sandwich ? lw.post_ffn_norm : nullptr, sandwich,
               lw.mlp_alpha, lw.mlp_beta, next);
    }
    return h;
  }

  void boundary(const bf16* branch, void* stream, bf16* next, int T, const bf16* post_weight,
                bool post_norm, const float* alpha, const float* beta, const bf16* pre_weight) {
    cpu::BoundaryParams p;
    p.rows = T;
    p.hidden = c_.hidden_size;
    p.stream_dtype = c_.stream_dtype;
    p.post_weight = post_weight;
    p.post_norm = post_norm;
    p.alpha = c_.residual_kind == ResidualKind::norm_preserving ? alpha : nullptr;
    p.beta = c_.residual_kind == ResidualKind::norm_preserving ? beta : nullptr;
    p.pre_weight = pre_weight;
    p.gain = c_.norm_gain;
    p.eps = c_.rms_norm_eps;
    cpu::residual_boundary(p, branch, stream, next, o_.threads);
  }

  std::shared_ptr<const Checkpoint> ckpt_;
  ModelConfig c_;
  DraftOptions o_;
  const DraftWeights& w_;
  PackedWeights packed_;
  QkvLayout qkv_;
  MatmulOps mm_;
  std::vector<std::vector<bf16>> kv_;
  std::vector<float> rope_;
  cpu::LogitTransform transform_;
  StageTimings t_;
};

}  // namespace

std::unique_ptr<DraftBackend> make_cpu_backend(std::shared_ptr<const Checkpoint> ckpt,
                                               const DraftOptions& options,
                                               const MatmulOps* matmul) {
  if (!ckpt) throw InvalidArgument("make_cpu_backend: no checkpoint");
  return std::make_unique<CpuDraft>(std::move(ckpt), options, matmul);
}

}  // namespace sparkdraft
