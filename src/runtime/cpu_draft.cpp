// The whole draft job on the CPU backend (contract.md section 1): the step of
// runtime/step.h over the reference ops of cpu/ops.h (every part eager,
// runtime/cpu_ops.h), on the packed weights both backends share
// (runtime/packed_weights.h): the reference the CUDA eager path is held to, and
// the embedded default on a machine without a GPU.
//
// Tensor parallelism (DraftOptions::tp, contract.md section 6): ranks are threads of
// run_thread_group (comm.h). Where the config splits (runtime/layer_shard.h) the
// layers shard too: each rank holds its heads' QKV(+gate) rows, its gate_up
// columns, its K columns of o_proj and down_proj and its KV heads of every KV
// cache, runs the context chain and the backbone on them (o_proj and down_proj
// complete the canonical slice tree with all_reduce_sum), then its vocabulary
// shard of lm_head and the Markov loop, all in one thread group. Where it does
// not, the layers are replicated: the backbone runs once and its output feeds
// every rank's vocabulary shard. Either way the bits are TP 1's.
#include "runtime/cpu_draft.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <new>
#include <stdexcept>
#include <thread>

#include "runtime/layer_shard.h"
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

double ms_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double, std::milli>(b - a).count();
}

// One layer rank's part of the model: its step, its packed weights, its KV caches.
struct LayerRank {
  DraftStep step;
  PackedWeights packed;
  std::vector<std::vector<bf16>> kv;  // [layer][slots * kv_heads/t * 2 * hd] (own caches)
  std::vector<bf16*> kv_data;         // [layer] the caches used: kv's, or the caller's
  size_t kv_per_layer = 0;            // elements of one layer's cache
  StepWeights sw;
  // sw's GEMM weights packed for the CPU twin (DraftStep::weight_gemms).
  std::unique_ptr<cpu::MmaPackedSet> mma;
  std::vector<bf16> hidden;   // the last propose's final hidden states [rows * Q, H]
  std::vector<bf16> drafted;  // the fill-in layout's drafted rows [rows * N, H]
  // The rows lm_head, the Markov loop and the confidence head read (contract.md section
  // 14): every row in the anchor layout (drafted stays empty), else the drafted ones.
  const bf16* drafted_rows() const { return drafted.empty() ? hidden.data() : drafted.data(); }
};

class CpuDraft final : public CpuDraftBackend {
 public:
  CpuDraft(std::shared_ptr<const Checkpoint> ckpt, const DraftOptions& options,
           CpuOpsFactory make_ops)
      : ckpt_(std::move(ckpt)), c_(ckpt_->config()), o_(options), w_(ckpt_->weights()) {
    validate_cpu_backend(c_, o_);
    if (o_.threads <= 0) o_.threads = std::max(1u, std::thread::hardware_concurrency());
    if (ckpt_->nonfinite_scan_pending()) ckpt_->scan_nonfinite_on_host(o_.threads);
    make_ops_ = make_ops ? std::move(make_ops) : [](int threads, Communicator* comm) {
      return std::make_unique<CpuOps>(threads, comm);
    };
    layer_tp_ = sparkdraft::layer_tp_size(c_, o_.tp);
    plan_ = cpu_plan(c_, o_.tp);
    try {
      rope_.resize(static_cast<size_t>(position_limit(c_, o_)) * c_.head_dim);
    } catch (const std::bad_alloc&) {
      throw InvalidArgument("DraftOptions: the RoPE table for " +
                            std::to_string(position_limit(c_, o_)) +
                            " positions cannot be allocated");
    }
    cpu::rope_table(c_.rope_theta, c_.head_dim, position_limit(c_, o_), rope_.data());
    transform_ = ops::LogitTransform::from_config(c_);
    ranks_.reserve(static_cast<size_t>(layer_tp_));  // sw points into each rank's vectors
    for (int r = 0; r < layer_tp_; ++r) ranks_.push_back(make_rank(LayerShard{r, layer_tp_}));
    // lm_head's vocab slices, one per vocab rank (run_markov_tp_rank's GEMM; tp divides
    // the draft vocabulary: validate_cpu_backend above).
    const int H = c_.hidden_size, slice = c_.draft_vocab() / o_.tp;
    for (int me = 0; me < o_.tp; ++me)
      lm_head_packed_.add(w_.lm_head + static_cast<size_t>(me) * slice * H, H, slice, H, 1,
                          o_.threads);
  }

  std::string name() const override { return "cpu"; }
  const ModelConfig& config() const override { return c_; }
  const DraftOptions& options() const override { return o_; }
  StageTimings last_timings() const override { return t_; }
  const StepPlan& plan() const override { return plan_; }
  int layer_tp_size() const override { return layer_tp_; }

  // The TP 1 layout [slots, kv_heads, 2 * hd], each slot's heads gathered from the
  // ranks in rank order (rank r holds heads [r*Hkv/t, (r+1)*Hkv/t)).
  std::vector<bf16> kv_cache(int layer) const override {
    if (layer < 0 || layer >= c_.num_layers)
      throw InvalidArgument("kv_cache: layer " + std::to_string(layer) + " of " +
                            std::to_string(c_.num_layers));
    std::vector<std::vector<bf16>> shards;
    for (const LayerRank& lr : ranks_) shards.push_back(layer_cache(lr, layer));
    return gather_kv_shards(c_, std::move(shards));
  }
  int64_t packed_weight_misses() const override {
    int64_t n = lm_head_packed_.misses();
    for (const LayerRank& lr : ranks_) n += lr.mma->misses();
    return n;
  }
  std::vector<bf16> kv_cache_shard(int tp_rank, int layer) const override {
    if (layer < 0 || layer >= c_.num_layers)
      throw InvalidArgument("kv_cache_shard: layer " + std::to_string(layer) + " of " +
                            std::to_string(c_.num_layers));
    return layer_cache(rank(tp_rank), layer);
  }
  bf16* kv_cache_data(int layer) override {
    if (layer < 0 || layer >= c_.num_layers)
      throw InvalidArgument("kv_cache_data: layer " + std::to_string(layer) + " of " +
                            std::to_string(c_.num_layers));
    if (layer_tp_ != 1)
      throw Unavailable("kv_cache_data: the KV caches are sharded over " +
                        std::to_string(layer_tp_) + " layer ranks (no single buffer)");
    return ranks_[0].kv_data[static_cast<size_t>(layer)];
  }
  std::vector<bf16> last_hidden(int tp_rank) const override { return rank(tp_rank).hidden; }

  void store_context(const ContextBatch& b) override {
    validate_context(c_, o_, b);
    const auto t0 = Clock::now();
    if (b.num_tokens == 0) return;
    if (layer_tp_ == 1) {
      context_tp_rank(ranks_[0], nullptr, b, o_.threads);
    } else {
      run_thread_group(layer_tp_, [&](Communicator& comm) {
        context_tp_rank(ranks_[static_cast<size_t>(comm.tp_rank())], &comm, b, rank_threads());
      });
    }
    t_.context_ms = ms_since(t0);
  }

  void propose(const ProposeBatch& b, const ProposeOutputs& out) override {
    validate_propose(c_, o_, b);
    if (!out.draft_tokens || !out.draft_logits)
      throw InvalidArgument("propose: draft_tokens and draft_logits outputs must be given");
    if (out.confidences && !c_.confidence_head)
      throw InvalidArgument(
          "propose: confidences were asked for but the config has no "
          "confidence head (enable_confidence_head is false)");
    const SafeMarkovRows rows(b);
    MarkovInputs in{&c_, &w_, &transform_, &rows.view(), o_.cache_slots, o_.threads};
    in.packed = &lm_head_packed_;
    // The head after the loop, on the rank that holds the tokens (rank 0).
    auto confidence = [&](LayerRank& lr, int threads) {
      if (!out.confidences) return;
      std::unique_ptr<CpuOps> ops = make_ops_(threads, nullptr);
      ops->set_packed(lr.mma.get());
      lr.step.confidence(*ops, b, lr.drafted_rows(), rows.view().anchor_tokens, out.draft_tokens,
                         w_.markov_w1, w_.confidence_w, w_.confidence_b, out.confidences);
    };
    if (layer_tp_ == 1) {
      // Replicated layers: the backbone once, then the vocabulary over o_.tp ranks.
      block_tp_rank(ranks_[0], nullptr, b, o_.threads);
      run_vocab_parallel_markov(in, o_.tp, ranks_[0].drafted_rows(), out, &t_.lm_head_ms,
                                &t_.markov_ms);
      confidence(ranks_[0], o_.threads);
      return;
    }
    // Sharded layers: each rank runs its layer shard and then its vocabulary shard.
    in.threads = rank_threads();
    run_thread_group(layer_tp_, [&](Communicator& comm) {
      LayerRank& lr = ranks_[static_cast<size_t>(comm.tp_rank())];
      block_tp_rank(lr, &comm, b, rank_threads());
      run_markov_tp_rank(in, &comm, lr.drafted_rows(), out, &t_.lm_head_ms, &t_.markov_ms);
    });
    confidence(ranks_[0], o_.threads);
  }

 private:
  int rank_threads() const { return std::max(1, o_.threads / layer_tp_); }

  static std::vector<bf16> layer_cache(const LayerRank& lr, int layer) {
    const bf16* p = lr.kv_data[static_cast<size_t>(layer)];
    return std::vector<bf16>(p, p + lr.kv_per_layer);
  }

  const LayerRank& rank(int tp_rank) const {
    if (tp_rank < 0 || tp_rank >= layer_tp_)
      throw InvalidArgument("CPU backend: layer rank " + std::to_string(tp_rank) + " of " +
                            std::to_string(layer_tp_));
    return ranks_[static_cast<size_t>(tp_rank)];
  }

  LayerRank make_rank(const LayerShard& shard) {
    LayerRank lr{
        DraftStep(c_, o_, shard), PackedWeights::pack(c_, w_, shard), {}, {}, 0, {}, {}, {}, {}};
    const size_t per_layer =
        static_cast<size_t>(o_.num_pages) * o_.page_size * shard.kv_heads(c_) * 2 * c_.head_dim;
    lr.kv_per_layer = per_layer;
    try {
      if (o_.kv_caches.empty()) lr.kv.assign(c_.num_layers, std::vector<bf16>(per_layer, bf16{0}));
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
    for (int l = 0; l < c_.num_layers; ++l)
      lr.kv_data.push_back(o_.kv_caches.empty() ? lr.kv[static_cast<size_t>(l)].data()
                                                : o_.kv_caches[static_cast<size_t>(l)]);
    StepWeights& sw = lr.sw;
    sw.embed = w_.embed;
    sw.fc = w_.fc;
    sw.hidden_norm = w_.hidden_norm;
    sw.final_norm = w_.final_norm;
    sw.context_kv = lr.packed.context_kv.data();
    sw.rope = rope_.data();
    // o_proj and down_proj: the rank's K columns of the full matrices, in place.
    const int64_t q = c_.q_size(), I = c_.intermediate_size;
    const int64_t q0 = static_cast<int64_t>(shard.tp_rank) * shard.heads(c_) * c_.head_dim;
    const int64_t i0 = static_cast<int64_t>(shard.tp_rank) * shard.intermediate(c_);
    for (int l = 0; l < c_.num_layers; ++l) {
      const LayerWeights& lw = w_.layers[static_cast<size_t>(l)];
      StepLayer s;
      s.qkv = lr.packed.qkv[static_cast<size_t>(l)].data();
      s.gate_up = lr.packed.gate_up[static_cast<size_t>(l)].data();
      s.o_proj = lw.o_proj + q0;
      s.o_proj_stride = q;
      s.down_proj = lw.down_proj + i0;
      s.down_proj_stride = I;
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
      s.kv_cache = lr.kv_data[static_cast<size_t>(l)];
      sw.layers.push_back(s);
    }
    lr.mma = std::make_unique<cpu::MmaPackedSet>();
    for (const ops::GemmParams& g : lr.step.weight_gemms(sw))
      lr.mma->add(g.w, g.w_row_stride(), g.N, g.K, g.k_slices, o_.threads);
    return lr;
  }

  void context_tp_rank(LayerRank& lr, Communicator* comm, const ContextBatch& b, int threads) {
    const ContextSizes n = lr.step.context_sizes(b.num_tokens);
    std::vector<bf16> h(n.h), normed(n.normed), layer_in(n.layer_in), kv(n.kv);
    std::unique_ptr<CpuOps> ops = make_ops_(threads, comm);
    ops->set_packed(lr.mma.get());
    lr.step.context_chain(*ops, lr.sw,
                          ContextBuffers{h.data(), normed.data(), layer_in.data(), kv.data()},
                          b.num_tokens, b.hidden, b.positions, b.slots);
  }

  // The query block and the backbone of one layer rank; leaves the final hidden
  // states in lr.hidden. Rank 0 (or the only run) records the timings.
  void block_tp_rank(LayerRank& lr, Communicator* comm, const ProposeBatch& b, int threads) {
    const int R = b.num_rows, T = R * c_.query_slots();
    const BlockSizes n = lr.step.block_sizes(T);
    std::vector<int64_t> ids(n.per_token), positions(n.per_token), slots(n.per_token);
    std::vector<int32_t> token_request(n.per_token);
    std::vector<int64_t> kv_lens(static_cast<size_t>(R)), safe_anchor(static_cast<size_t>(R)),
        safe_position(static_cast<size_t>(R));
    std::vector<bf16> x(n.x), qkv(n.qkv), attn(n.attn), branch(n.branch), gu(n.gu), act(n.act);
    lr.hidden.assign(n.h, bf16{0});
    lr.drafted.assign(lr.step.drafted_size(R), bf16{0});
    std::vector<float> residual_f32(n.residual_f32);
    BlockBuffers buf{
        ids.data(),       positions.data(),   slots.data(),         token_request.data(),
        kv_lens.data(),   safe_anchor.data(), safe_position.data(), x.data(),
        lr.hidden.data(), qkv.data(),         attn.data(),          branch.data(),
        gu.data(),        act.data(),         residual_f32.data(),  lr.drafted.data()};
    std::unique_ptr<CpuOps> ops = make_ops_(threads, comm);
    ops->set_packed(lr.mma.get());
    lr.step.block(*ops, lr.sw, buf, b);
    if (comm && comm->tp_rank() != 0) return;
    t_.embed_ms = ms_between(ops->marks[0], ops->marks[1]);
    t_.backbone_ms = ms_between(ops->marks[1], ops->marks[2]);
  }

  std::shared_ptr<const Checkpoint> ckpt_;
  ModelConfig c_;
  DraftOptions o_;
  const DraftWeights& w_;
  CpuOpsFactory make_ops_;
  int layer_tp_ = 1;
  std::vector<float> rope_;
  std::vector<LayerRank> ranks_;
  cpu::MmaPackedSet lm_head_packed_;  // lm_head's vocab slices (the Markov loop's GEMM)
  ops::LogitTransform transform_;
  StageTimings t_;
  StepPlan plan_;
};

}  // namespace

std::unique_ptr<CpuDraftBackend> make_cpu_draft(std::shared_ptr<const Checkpoint> ckpt,
                                                const DraftOptions& options, CpuOpsFactory ops) {
  if (!ckpt) throw InvalidArgument("make_cpu_backend: no checkpoint");
  return std::make_unique<CpuDraft>(std::move(ckpt), options, std::move(ops));
}

void validate_cpu_backend(const ModelConfig& c, const DraftOptions& o) {
  c.validate();
  validate_options(c, o);
  if (c.markov_rank <= 0)
    throw ConfigError("the CPU backend needs a Markov head (markov_rank > 0)");
}

std::unique_ptr<DraftBackend> make_cpu_backend(std::shared_ptr<const Checkpoint> ckpt,
                                               const DraftOptions& options) {
  return make_cpu_draft(std::move(ckpt), options);
}

}  // namespace sparkdraft
