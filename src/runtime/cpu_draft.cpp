// The whole draft job on the CPU backend (SPEC section 1): the step of
// runtime/step.h over the reference ops of cpu/ops.h (every part eager), on the
// packed weights both backends share (runtime/packed_weights.h): the reference the
// CUDA eager path is held to, and the embedded default on a machine without a GPU.
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
#include "runtime/step.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The CPU op table: the reference ops on host buffers (the matrix products on the
// tensor-core twin), stage clocks for the timings.
class CpuOps final : public StepOps {
 public:
  explicit CpuOps(int threads) : th_(threads) {}
  Clock::time_point marks[3];

  void gemm(const bf16* x, int64_t xs, const bf16* w, int M, int N, int K, bf16* y, int64_t ys,
            int k_slices) override {
    cpu::gemm(x, xs, w, M, N, K, y, ys, k_slices, th_);
  }
  void rms_norm(const bf16* x, int64_t xs, int rows, int n, const bf16* weight, NormGain gain,
                float eps, bf16* y, int64_t ys) override {
    cpu::rms_norm(x, xs, rows, n, weight, gain, eps, y, ys, th_);
  }
  void head_rms_norm(bf16* x, int64_t ts, int tokens, int heads, int hd, const bf16* weight,
                     NormGain gain, float eps) override {
    cpu::head_rms_norm(x, ts, tokens, heads, hd, weight, gain, eps, th_);
  }
  void rope(bf16* x, int64_t xs, int tokens, int heads, int hd, const int64_t* positions,
            const float* table, RopeStyle style) override {
    cpu::rope(x, xs, tokens, heads, hd, positions, table, style, th_);
  }
  void kv_insert(const bf16* k, int64_t ks, const bf16* v, int64_t vs, int tokens, int kv_heads,
                 int hd, const int64_t* slots, bf16* cache) override {
    cpu::kv_insert(k, ks, v, vs, tokens, kv_heads, hd, slots, cache);
  }
  void prepare_query_block(const ops::QueryBlockParams& p) override { cpu::prepare_query_block(p); }
  void embed(const int64_t* ids, int rows, const bf16* table, int hidden, bf16* out) override {
    cpu::embed(ids, rows, table, hidden, out);
  }
  void widen(const bf16* x, int64_t n, float* out) override { cpu::widen(x, n, out); }
  void attention(const ops::AttentionParams& p, const bf16* q, const bf16* cache,
                 bf16* out) override {
    cpu::attention(p, q, cache, out, th_);
  }
  void o_norm_gate(bf16* o, int tokens, int heads, int hd, const bf16* o_norm_weight, bool o_norm,
                   NormGain gain, float eps, const bf16* g, int64_t g_stride) override {
    cpu::o_norm_gate(o, tokens, heads, hd, o_norm_weight, o_norm, gain, eps, g, g_stride, th_);
  }
  void residual_boundary(const ops::BoundaryParams& p, const bf16* branch, void* residual,
                         bf16* next) override {
    cpu::residual_boundary(p, branch, residual, next, th_);
  }
  void silu_mul(const bf16* gu, int rows, int inter, bf16* y) override {
    cpu::silu_mul(gu, rows, inter, y, th_);
  }
  void gate_up_swiglu(const bf16* x, int64_t x_stride, const bf16* w, int rows, int inter, int K,
                      bf16* gu, bf16* y) override {
    eager_gate_up_swiglu(*this, x, x_stride, w, rows, inter, K, gu, y);
  }
  void qkv_front(const ops::QkvFrontParams& p) override { eager_qkv_front(*this, p); }
  void embed_norm(const ops::EmbedNormParams& p) override { eager_embed_norm(*this, p); }
  void mark(int stage) override { marks[stage] = Clock::now(); }

 private:
  int th_;
};

class CpuDraft final : public DraftBackend {
 public:
  CpuDraft(std::shared_ptr<const Checkpoint> ckpt, const DraftOptions& options)
      : ckpt_(std::move(ckpt)),
        c_(ckpt_->config()),
        o_(options),
        w_(ckpt_->weights()),
        step_(c_, o_) {
    c_.validate();
    validate_options(c_, o_);
    if (o_.threads <= 0) o_.threads = std::max(1u, std::thread::hardware_concurrency());
    if (ckpt_->nonfinite_scan_pending()) ckpt_->scan_nonfinite_on_host(o_.threads);
    if (c_.markov_rank <= 0)
      throw ConfigError("the CPU backend needs a Markov head (markov_rank > 0)");
    packed_ = PackedWeights::pack(c_, w_);
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
    transform_ = ops::LogitTransform::from_config(c_);
    sw_.embed = w_.embed;
    sw_.fc = w_.fc;
    sw_.hidden_norm = w_.hidden_norm;
    sw_.final_norm = w_.final_norm;
    sw_.context_kv = packed_.context_kv.data();
    sw_.rope = rope_.data();
    for (int l = 0; l < c_.num_layers; ++l) {
      const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
      StepLayer s;
      s.qkv = packed_.qkv[static_cast<size_t>(l)].data();
      s.gate_up = packed_.gate_up[static_cast<size_t>(l)].data();
      s.o_proj = lw.o_proj;
      s.down_proj = lw.down_proj;
      s.input_norm = lw.input_norm;
      s.post_attn_norm = lw.post_attn_norm;
      s.pre_ffn_norm = lw.pre_ffn_norm;
      s.post_ffn_norm = lw.post_ffn_norm;
      s.q_norm = lw.q_norm;
      s.k_norm = lw.k_norm;
      s.o_norm = lw.o_norm;
      s.attn_alpha = lw.attn_alpha;
      s.attn_beta = lw.attn_beta;
      s.mlp_alpha = lw.mlp_alpha;
      s.mlp_beta = lw.mlp_beta;
      s.kv_cache = kv_[static_cast<size_t>(l)].data();
      sw_.layers.push_back(s);
    }
  }

  std::string name() const override { return "cpu"; }
  const ModelConfig& config() const override { return c_; }
  const DraftOptions& options() const override { return o_; }
  StageTimings last_timings() const override { return t_; }
  std::vector<bf16> kv_cache(int layer) const override { return kv_.at(layer); }
  const StepPlan& plan() const override { return plan_; }

  void store_context(const ContextBatch& b) override {
    validate_context(c_, o_, b);
    const auto t0 = Clock::now();
    if (b.num_tokens == 0) return;
    const ContextSizes n = step_.context_sizes(b.num_tokens);
    std::vector<bf16> h(n.h), normed(n.normed), layer_in(n.layer_in), kv(n.kv);
    CpuOps ops(o_.threads);
    step_.context_chain(ops, sw_,
                        ContextBuffers{h.data(), normed.data(), layer_in.data(), kv.data()},
                        b.num_tokens, b.hidden, b.positions, b.slots);
    t_.context_ms = ms_since(t0);
  }

  void propose(const ProposeBatch& b, const ProposeOutputs& out) override {
    validate_propose(c_, o_, b);
    if (!out.draft_tokens || !out.draft_logits)
      throw InvalidArgument("propose: draft_tokens and draft_logits outputs must be given");
    const int R = b.num_rows, T = R * c_.block_size;
    const BlockSizes n = step_.block_sizes(T);
    std::vector<int64_t> ids(n.per_token), positions(n.per_token), slots(n.per_token);
    std::vector<int32_t> token_request(n.per_token);
    std::vector<int64_t> kv_lens(static_cast<size_t>(R)), safe_anchor(static_cast<size_t>(R)),
        safe_position(static_cast<size_t>(R));
    std::vector<bf16> x(n.x), h(n.h), qkv(n.qkv), attn(n.attn), branch(n.branch), gu(n.gu),
        act(n.act);
    std::vector<float> residual_f32(n.residual_f32);
    BlockBuffers buf{ids.data(),     positions.data(),   slots.data(),         token_request.data(),
                     kv_lens.data(), safe_anchor.data(), safe_position.data(), x.data(),
                     h.data(),       qkv.data(),         attn.data(),          branch.data(),
                     gu.data(),      act.data(),         residual_f32.data()};
    CpuOps ops(o_.threads);
    step_.block(ops, sw_, buf, b);
    t_.embed_ms = std::chrono::duration<double, std::milli>(ops.marks[1] - ops.marks[0]).count();
    t_.backbone_ms = std::chrono::duration<double, std::milli>(ops.marks[2] - ops.marks[1]).count();

    const MarkovRows rows = markov_rows(b, c_.block_size);
    MarkovInputs in{&c_, &w_, &transform_, &rows, o_.cache_slots, o_.threads};
    run_vocab_parallel_markov(in, o_.tp, h.data(), out, &t_.lm_head_ms, &t_.markov_ms);
  }

 private:
  std::shared_ptr<const Checkpoint> ckpt_;
  ModelConfig c_;
  DraftOptions o_;
  const DraftWeights& w_;
  DraftStep step_;
  PackedWeights packed_;
  std::vector<std::vector<bf16>> kv_;
  std::vector<float> rope_;
  StepWeights sw_;
  ops::LogitTransform transform_;
  StageTimings t_;
  StepPlan plan_ = cpu_plan(o_.tp);
};

}  // namespace

std::unique_ptr<DraftBackend> make_cpu_backend(std::shared_ptr<const Checkpoint> ckpt,
                                               const DraftOptions& options) {
  if (!ckpt) throw InvalidArgument("make_cpu_backend: no checkpoint");
  return std::make_unique<CpuDraft>(std::move(ckpt), options);
}

}  // namespace sparkdraft
