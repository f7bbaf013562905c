// The GPU draft backend (see sparkdraft/cuda/draft.h): the eager path of the
// whole job, op for op the CPU backend's pipeline (src/runtime/cpu_draft.cpp) on
// the same packed weights, then the Markov loop (fused or eager).
#include "sparkdraft/cuda/draft.h"

#include <chrono>
#include <cstring>
#include <map>
#include <sstream>

#include "cuda/draft/draft_kernels.h"
#include "runtime/packed_weights.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/gemm.h"
#include "sparkdraft/cuda/kernels.h"
#include "sparkdraft/cuda/markov.h"
#include "sparkdraft/cuda/mma.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {

bool cuda_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

namespace {

template <class T>
DeviceBuffer<T> upload(const T* host, size_t n) {
  DeviceBuffer<T> b(n);
  if (n) b.upload(host, n);
  return b;
}

struct DeviceLayer {
  DeviceBuffer<bf16> qkv, gate_up, o_proj, down_proj;
  DeviceBuffer<bf16> input_norm, post_attn_norm, pre_ffn_norm, post_ffn_norm;
  DeviceBuffer<bf16> q_norm, k_norm, o_norm;
  DeviceBuffer<float> attn_alpha, attn_beta, mlp_alpha, mlp_beta;
};

// Timings of the host API: events around each stage.
struct StageEvents {
  cudaEvent_t e[5] = {};
  StageEvents() {
    for (auto& x : e) SD_CUDA_CHECK(cudaEventCreate(&x));
  }
  ~StageEvents() {
    for (auto& x : e) cudaEventDestroy(x);
  }
};

}  // namespace

struct CudaDraft::Impl {
  std::shared_ptr<const Checkpoint> ckpt;
  ModelConfig c;
  DraftOptions o;
  CudaDraftOptions co;
  QkvLayout qkv;
  cudaStream_t stream = nullptr;
  GemmRunner gemm;
  StageTimings timings;

  // Weights.
  DeviceBuffer<bf16> embed, lm_head, fc, hidden_norm, final_norm, w1, w2, context_kv;
  std::vector<DeviceLayer> layers;
  DeviceBuffer<float> rope;
  std::vector<DeviceBuffer<bf16>> kv;  // per layer [pages*page_size, kvh, 2hd]

  // Per-call buffers, sized for max_reqs rows (T = max_reqs * N tokens).
  DeviceBuffer<int64_t> ids, positions, slots, kv_lens, safe_anchor, safe_position;
  DeviceBuffer<int32_t> token_request;
  DeviceBuffer<bf16> x, h, qkv_out, attn_out, branch, gu, act, base;
  DeviceBuffer<float> stream_f32;
  DeviceBuffer<unsigned char> attn_ws;
  size_t attn_ws_bytes = 0;
  // Host API staging (device copies of the host batch and outputs).
  DeviceBuffer<int64_t> in_anchor, in_pos, in_seed, in_slot, out_tokens;
  DeviceBuffer<float> in_temp;
  DeviceBuffer<int32_t> in_tables;
  DeviceBuffer<bf16> cache;  // [cache_slots, N, V]
  // Context chain buffers (grown on demand, outside any graph).
  DeviceBuffer<bf16> ctx_hidden, ctx_h, ctx_normed, ctx_in, ctx_kv;
  DeviceBuffer<int64_t> ctx_pos, ctx_slots;

  std::unique_ptr<MarkovLoop> markov;
  std::map<int, cudaGraphExec_t> graphs;  // by row count

  Impl(std::shared_ptr<const Checkpoint> ck, const DraftOptions& opts,
       const CudaDraftOptions& copts)
      : ckpt(std::move(ck)), c(ckpt->config()), o(opts), co(copts), qkv(QkvLayout::of(c)) {
    c.validate();
    validate_options(c, o);  // the same refusals as the CPU backend, before any allocation
    mma_self_test();         // refuses a device whose tensor cores the CPU twin does not reproduce
    if (o.tp != 1)
      throw InvalidArgument(
          "the CUDA backend drafts at tp 1; the vocab-parallel GPU Markov loop runs through "
          "`sparkdraft check` and the loopback tests (multi-GPU TP is a later issue)");
    if (o.threads <= 0) o.threads = 1;
    SD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    const DraftWeights& w = ckpt->weights();
    const size_t H = c.hidden_size, V = c.vocab_size, K = c.markov_rank, L = c.num_layers;
    const size_t q = c.q_size(), kvs = c.kv_size(), I = c.intermediate_size, hd = c.head_dim;
    const size_t in_width = static_cast<size_t>(c.taps()) * c.target_hidden_size;
    embed = upload(w.embed, V * H);
    lm_head = upload(w.lm_head, V * H);
    fc = upload(w.fc, H * in_width);
    if (w.hidden_norm) hidden_norm = upload(w.hidden_norm, H);
    if (w.final_norm) final_norm = upload(w.final_norm, H);
    w1 = upload(w.markov_w1, V * K);
    w2 = upload(w.markov_w2, V * K);
    {
      PackedWeights packed = PackedWeights::pack(c, w);
      context_kv = DeviceBuffer<bf16>(packed.context_kv);
      for (size_t l = 0; l < L; ++l) {
        const LayerWeights& lw = w.layers[l];
        DeviceLayer d;
        d.qkv = DeviceBuffer<bf16>(packed.qkv[l]);
        d.gate_up = DeviceBuffer<bf16>(packed.gate_up[l]);
        d.o_proj = upload(lw.o_proj, H * q);
        d.down_proj = upload(lw.down_proj, H * I);
        auto opt = [&](const bf16* p, size_t n) { return p ? upload(p, n) : DeviceBuffer<bf16>(); };
        auto optf = [&](const float* p, size_t n) {
          return p ? upload(p, n) : DeviceBuffer<float>();
        };
        d.input_norm = opt(lw.input_norm, H);
        d.post_attn_norm = opt(lw.post_attn_norm, H);
        d.pre_ffn_norm = opt(lw.pre_ffn_norm, H);
        d.post_ffn_norm = opt(lw.post_ffn_norm, H);
        d.q_norm = opt(lw.q_norm, hd);
        d.k_norm = opt(lw.k_norm, hd);
        d.o_norm = opt(lw.o_norm, hd);
        d.attn_alpha = optf(lw.attn_alpha, H);
        d.attn_beta = optf(lw.attn_beta, H);
        d.mlp_alpha = optf(lw.mlp_alpha, H);
        d.mlp_beta = optf(lw.mlp_beta, H);
        layers.push_back(std::move(d));
      }
    }
    std::vector<float> table(static_cast<size_t>(o.max_positions()) * hd);
    cpu::rope_table(c.rope_theta, c.head_dim, o.max_positions(), table.data());
    rope = DeviceBuffer<float>(table);
    const size_t slots_per_layer = static_cast<size_t>(o.num_pages) * o.page_size;
    for (size_t l = 0; l < L; ++l) {
      kv.emplace_back(slots_per_layer * c.num_kv_heads * 2 * hd);
      SD_CUDA_CHECK(cudaMemsetAsync(kv.back().data(), 0, kv.back().bytes(), stream));
    }
    const size_t R = o.max_reqs, T = R * c.block_size;
    ids = DeviceBuffer<int64_t>(T);
    positions = DeviceBuffer<int64_t>(T);
    slots = DeviceBuffer<int64_t>(T);
    token_request = DeviceBuffer<int32_t>(T);
    kv_lens = DeviceBuffer<int64_t>(R);
    safe_anchor = DeviceBuffer<int64_t>(R);
    safe_position = DeviceBuffer<int64_t>(R);
    x = DeviceBuffer<bf16>(T * H);
    h = DeviceBuffer<bf16>(T * H);
    qkv_out = DeviceBuffer<bf16>(T * qkv.width);
    attn_out = DeviceBuffer<bf16>(T * q);
    branch = DeviceBuffer<bf16>(T * H);
    gu = DeviceBuffer<bf16>(T * 2 * I);
    act = DeviceBuffer<bf16>(T * I);
    base = DeviceBuffer<bf16>(T * V);
    if (c.stream_dtype == StreamDType::f32) stream_f32 = DeviceBuffer<float>(T * H);
    in_tables = DeviceBuffer<int32_t>(R * o.max_pages_per_req);
    attn_ws_bytes =
        attention_workspace_bytes(attention_params(static_cast<int>(T), in_tables.data()));
    attn_ws = DeviceBuffer<unsigned char>(attn_ws_bytes);
    in_anchor = DeviceBuffer<int64_t>(R);
    in_pos = DeviceBuffer<int64_t>(R);
    in_seed = DeviceBuffer<int64_t>(R);
    in_slot = DeviceBuffer<int64_t>(R);
    in_temp = DeviceBuffer<float>(R);
    out_tokens = DeviceBuffer<int64_t>(T);
    cache = DeviceBuffer<bf16>(static_cast<size_t>(o.cache_slots) * c.block_size * V);
    SD_CUDA_CHECK(cudaMemsetAsync(cache.data(), 0, cache.bytes(), stream));

    markov = std::make_unique<MarkovLoop>(markov_head(), o.max_reqs, c.block_size);
    markov->workspace().set_pdl(co.pdl);
    SD_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  ~Impl() {
    for (auto& [rows, g] : graphs) cudaGraphExecDestroy(g);
    if (stream) cudaStreamDestroy(stream);
  }

  AttentionParams attention_params(int tokens, const int32_t* block_tables) const {
    AttentionParams ap;
    ap.tokens = tokens;
    ap.heads = c.num_heads;
    ap.kv_heads = c.num_kv_heads;
    ap.head_dim = c.head_dim;
    ap.page_size = o.page_size;
    ap.max_pages = o.max_pages_per_req;
    ap.window = c.sliding_window;
    ap.q_stride = qkv.width;
    ap.block_tables = block_tables;
    ap.token_request = token_request.data();
    ap.positions = positions.data();
    ap.kv_lens = kv_lens.data();
    ap.max_kv_len = o.max_positions();
    return ap;
  }

  // K-norm, V-norm, RoPE on K: shared by the context chain and the block.
  void kv_heads(bf16* k, bf16* v, int64_t stride, int T, const DeviceLayer& d, const int64_t* pos,
                cudaStream_t s) {
    if (c.qk_norm)
      head_rms_norm(k, stride, T, c.num_kv_heads, c.head_dim, d.k_norm.data(), c.norm_gain,
                    c.rms_norm_eps, s);
    if (c.v_norm)
      head_rms_norm(v, stride, T, c.num_kv_heads, c.head_dim, nullptr, NormGain::none,
                    c.rms_norm_eps, s);
    cuda::rope(k, stride, T, c.num_kv_heads, c.head_dim, pos, rope.data(), c.rope_style, s);
  }

  void boundary(const bf16* br, void* strm, bf16* next, int T, const DeviceBuffer<bf16>& post,
                const DeviceBuffer<float>& alpha, const DeviceBuffer<float>& beta,
                const DeviceBuffer<bf16>& pre, cudaStream_t s) {
    const bool sandwich = c.layer_style == LayerStyle::sandwich;
    const bool np = c.residual_kind == ResidualKind::norm_preserving;
    BoundaryParams p;
    p.rows = T;
    p.hidden = c.hidden_size;
    p.stream_dtype = c.stream_dtype;
    p.post_weight = sandwich ? post.data() : nullptr;
    p.post_norm = sandwich;
    p.alpha = np ? alpha.data() : nullptr;
    p.beta = np ? beta.data() : nullptr;
    p.pre_weight = pre.data();
    p.gain = c.norm_gain;
    p.eps = c.rms_norm_eps;
    residual_boundary(p, br, strm, next, s);
  }

  void store_context(const ContextBatch& b) {
    validate_context(c, o, b);
    const int T = b.num_tokens;
    if (T == 0) return;
    const auto t0 = std::chrono::steady_clock::now();
    const int H = c.hidden_size, kvs = c.kv_size(), L = c.num_layers;
    const int in_width = c.taps() * c.target_hidden_size;
    const int width = c.context_layer_norm ? 2 * kvs : L * 2 * kvs;
    auto grow = [](auto& buf, size_t n) {
      if (buf.size() < n) buf = std::remove_reference_t<decltype(buf)>(n);
    };
    grow(ctx_hidden, static_cast<size_t>(T) * in_width);
    grow(ctx_h, static_cast<size_t>(T) * H);
    grow(ctx_normed, static_cast<size_t>(T) * H);
    if (c.context_layer_norm) grow(ctx_in, static_cast<size_t>(T) * H);
    grow(ctx_kv, static_cast<size_t>(T) * width);
    grow(ctx_pos, T);
    grow(ctx_slots, T);
    ctx_hidden.upload(b.hidden, static_cast<size_t>(T) * in_width, 0, stream);
    ctx_pos.upload(b.positions, T, 0, stream);
    ctx_slots.upload(b.slots, T, 0, stream);
    gemm.run(ctx_hidden.data(), in_width, fc.data(), T, H, in_width, ctx_h.data(), H, stream);
    rms_norm(ctx_h.data(), H, T, H, hidden_norm.data(), c.norm_gain, c.rms_norm_eps,
             ctx_normed.data(), H, stream);
    if (!c.context_layer_norm)
      gemm.run(ctx_normed.data(), H, context_kv.data(), T, L * 2 * kvs, H, ctx_kv.data(), width,
               stream);
    for (int l = 0; l < L; ++l) {
      bf16* k = ctx_kv.data() + (c.context_layer_norm ? 0 : static_cast<size_t>(l) * 2 * kvs);
      if (c.context_layer_norm) {
        rms_norm(ctx_normed.data(), H, T, H, layers[l].input_norm.data(), c.norm_gain,
                 c.rms_norm_eps, ctx_in.data(), H, stream);
        gemm.run(ctx_in.data(), H, context_kv.data() + static_cast<size_t>(l) * 2 * kvs * H, T,
                 2 * kvs, H, ctx_kv.data(), width, stream);
      }
      kv_heads(k, k + kvs, width, T, layers[l], ctx_pos.data(), stream);
      kv_insert(k, width, k + kvs, width, T, c.num_kv_heads, c.head_dim, ctx_slots.data(),
                kv[l].data(), stream);
    }
    SD_CUDA_CHECK(cudaStreamSynchronize(stream));
    timings.context_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }

  // The device call: every stage on `s`, optionally bracketed by events.
  void run_device(const DeviceProposeBatch& b, cudaStream_t s, StageEvents* ev) {
    const int R = b.num_rows, N = c.block_size, T = R * N, H = c.hidden_size, L = c.num_layers;
    const int W = qkv.width, q = c.q_size(), I = c.intermediate_size, hd = c.head_dim;
    if (R < 1 || R > o.max_reqs)
      throw InvalidArgument("propose_device: num_rows " + std::to_string(R) + " is outside [1, " +
                            std::to_string(o.max_reqs) + "]");
    auto mark = [&](int i) {
      if (ev) SD_CUDA_CHECK(cudaEventRecord(ev->e[i], s));
    };
    mark(0);
    QueryBlockParams qp;
    qp.rows = R;
    qp.steps = N;
    qp.page_size = o.page_size;
    qp.max_pages = o.max_pages_per_req;
    qp.mask_token = c.mask_token_id;
    qp.anchor_tokens = b.anchor_tokens;
    qp.anchor_positions = b.anchor_positions;
    qp.cache_slots = b.cache_slots;
    qp.block_tables = b.block_tables;
    qp.ids = ids.data();
    qp.positions = positions.data();
    qp.slots = slots.data();
    qp.token_request = token_request.data();
    qp.kv_lens = kv_lens.data();
    qp.safe_anchor = safe_anchor.data();
    qp.safe_position = safe_position.data();
    prepare_query_block(qp, s);
    cuda::embed(ids.data(), T, embed.data(), H, x.data(), s);
    mark(1);

    const bool f32 = c.stream_dtype == StreamDType::f32;
    if (f32) widen_bf16(x.data(), static_cast<int64_t>(T) * H, stream_f32.data(), s);
    void* strm = f32 ? static_cast<void*>(stream_f32.data()) : static_cast<void*>(x.data());
    rms_norm(x.data(), H, T, H, layers[0].input_norm.data(), c.norm_gain, c.rms_norm_eps, h.data(),
             H, s);
    const AttentionParams ap = attention_params(T, b.block_tables);
    const bool sandwich = c.layer_style == LayerStyle::sandwich;
    for (int l = 0; l < L; ++l) {
      DeviceLayer& d = layers[l];
      gemm.run(h.data(), H, d.qkv.data(), T, W, H, qkv_out.data(), W, s);
      bf16* qptr = qkv_out.data() + qkv.q;
      bf16* kptr = qkv_out.data() + qkv.k;
      if (c.qk_norm)
        head_rms_norm(qptr, W, T, c.num_heads, hd, d.q_norm.data(), c.norm_gain, c.rms_norm_eps, s);
      cuda::rope(qptr, W, T, c.num_heads, hd, positions.data(), rope.data(), c.rope_style, s);
      kv_heads(kptr, qkv_out.data() + qkv.v, W, T, d, positions.data(), s);
      kv_insert(kptr, W, qkv_out.data() + qkv.v, W, T, c.num_kv_heads, hd, slots.data(),
                kv[l].data(), s);
      attention(ap, qptr, kv[l].data(), attn_out.data(), attn_ws.data(), attn_ws_bytes, s);
      if (c.o_norm || c.output_gate)
        o_norm_gate(attn_out.data(), T, c.num_heads, hd, d.o_norm.data(), c.o_norm, c.norm_gain,
                    c.rms_norm_eps, c.output_gate ? qkv_out.data() + qkv.g : nullptr, W, s);
      gemm.run(attn_out.data(), q, d.o_proj.data(), T, H, q, branch.data(), H, s);
      boundary(branch.data(), strm, h.data(), T, d.post_attn_norm, d.attn_alpha, d.attn_beta,
               sandwich ? d.pre_ffn_norm : d.post_attn_norm, s);
      gemm.run(h.data(), H, d.gate_up.data(), T, 2 * I, H, gu.data(), 2 * I, s);
      silu_mul(gu.data(), T, I, act.data(), s);
      gemm.run(act.data(), I, d.down_proj.data(), T, H, I, branch.data(), H, s);
      boundary(branch.data(), strm, h.data(), T, d.post_ffn_norm, d.mlp_alpha, d.mlp_beta,
               l + 1 < L ? layers[l + 1].input_norm : final_norm, s);
    }
    mark(2);
    gemm.run(h.data(), H, lm_head.data(), T, c.vocab_size, H, base.data(), c.vocab_size, s);
    mark(3);
    MarkovBatch mb;
    mb.rows = R;
    mb.steps = N;
    mb.anchor_tokens = safe_anchor.data();
    mb.anchor_positions = safe_position.data();
    mb.seeds = b.seeds;
    mb.temperatures = b.temperatures;
    mb.cache_slots = b.cache_slots;
    mb.base_logits = base.data();
    mb.draft_tokens = b.draft_tokens;
    mb.cache = b.draft_logits;
    if (co.fused_markov)
      markov->run(mb, s);
    else
      eager_markov_loop(markov_head(), mb, markov->workspace(), s);
    mark(4);
  }

  MarkovHead markov_head() const {
    MarkovHead head;
    head.w1 = w1.data();
    head.w2 = w2.data();
    head.vocab = c.vocab_size;
    head.markov_rank = c.markov_rank;
    head.transform = cpu::LogitTransform::from_config(c);
    return head;
  }

  DeviceProposeBatch staged(int rows) {
    DeviceProposeBatch d;
    d.num_rows = rows;
    d.anchor_tokens = in_anchor.data();
    d.anchor_positions = in_pos.data();
    d.seeds = in_seed.data();
    d.temperatures = in_temp.data();
    d.cache_slots = in_slot.data();
    d.block_tables = in_tables.data();
    d.draft_tokens = out_tokens.data();
    d.draft_logits = cache.data();
    return d;
  }

  void propose(const ProposeBatch& b, const ProposeOutputs& out) {
    validate_propose(c, o, b);
    if (!out.draft_tokens || !out.draft_logits)
      throw InvalidArgument("propose: draft_tokens and draft_logits outputs must be given");
    const int R = b.num_rows, N = c.block_size;
    const size_t V = c.vocab_size;
    in_anchor.upload(b.anchor_tokens, R, 0, stream);
    in_pos.upload(b.anchor_positions, R, 0, stream);
    in_seed.upload(b.seeds, R, 0, stream);
    in_temp.upload(b.temperatures, R, 0, stream);
    in_slot.upload(b.cache_slots, R, 0, stream);
    in_tables.upload(b.block_tables, static_cast<size_t>(R) * o.max_pages_per_req, 0, stream);
    StageEvents ev;
    const double context_ms = timings.context_ms;
    DeviceProposeBatch d = staged(R);
    if (co.cuda_graph) {
      auto it = graphs.find(R);
      if (it == graphs.end()) {
        // Warm-up (pins GEMM algorithms, loads kernels), then capture.
        run_device(d, stream, nullptr);
        SD_CUDA_CHECK(cudaStreamSynchronize(stream));
        cudaGraph_t graph;
        SD_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
        try {
          run_device(d, stream, nullptr);
        } catch (...) {
          // End the capture and drop what it hands back (a partial graph, or null
          // when the capture was invalidated); the first error is the one thrown.
          graph = nullptr;
          cudaStreamEndCapture(stream, &graph);
          if (graph != nullptr) cudaGraphDestroy(graph);
          throw;
        }
        SD_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
        cudaGraphExec_t exec;
        SD_CUDA_CHECK(cudaGraphInstantiate(&exec, graph, 0));
        SD_CUDA_CHECK(cudaGraphDestroy(graph));
        it = graphs.emplace(R, exec).first;
      }
      SD_CUDA_CHECK(cudaEventRecord(ev.e[0], stream));
      SD_CUDA_CHECK(cudaGraphLaunch(it->second, stream));
      SD_CUDA_CHECK(cudaEventRecord(ev.e[4], stream));
      SD_CUDA_CHECK(cudaStreamSynchronize(stream));
      float ms = 0;
      SD_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.e[0], ev.e[4]));
      timings = StageTimings{};
      timings.context_ms = context_ms;
      timings.graph_ms = ms;  // one graph: only the whole step is timed
    } else {
      run_device(d, stream, &ev);
      SD_CUDA_CHECK(cudaStreamSynchronize(stream));
      float ms[4];
      for (int i = 0; i < 4; ++i) SD_CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev.e[i], ev.e[i + 1]));
      timings = StageTimings{context_ms, ms[0], ms[1], ms[2], ms[3]};
    }
    out_tokens.download(out.draft_tokens, static_cast<size_t>(R) * N, 0, stream);
    for (int r = 0; r < R; ++r) {
      const int64_t slot = b.cache_slots[r];
      if (slot < 0) continue;
      cache.download(out.draft_logits + static_cast<size_t>(slot) * N * V, N * V,
                     static_cast<size_t>(slot) * N * V, stream);
    }
  }
};

CudaDraft::CudaDraft(std::shared_ptr<const Checkpoint> ckpt, const DraftOptions& options,
                     const CudaDraftOptions& cuda_options)
    : impl_(std::make_unique<Impl>(std::move(ckpt), options, cuda_options)) {}
CudaDraft::~CudaDraft() = default;

std::string CudaDraft::name() const { return "cuda"; }
const ModelConfig& CudaDraft::config() const { return impl_->c; }
const DraftOptions& CudaDraft::options() const { return impl_->o; }
void CudaDraft::store_context(const ContextBatch& b) { impl_->store_context(b); }
void CudaDraft::propose(const ProposeBatch& b, const ProposeOutputs& out) {
  impl_->propose(b, out);
}
StageTimings CudaDraft::last_timings() const { return impl_->timings; }
void CudaDraft::propose_device(const DeviceProposeBatch& b, cudaStream_t s) {
  impl_->run_device(b, s, nullptr);
}
bool CudaDraft::markov_fused() const { return impl_->co.fused_markov && impl_->markov->fused(); }

std::vector<bf16> CudaDraft::kv_cache(int layer) const {
  const auto& buf = impl_->kv.at(layer);
  std::vector<bf16> host(buf.size());
  buf.download(host.data(), host.size(), 0, impl_->stream);
  return host;
}

std::string CudaDraft::plan() const { return gpu_plan(impl_->c, impl_->co, impl_->o.max_reqs); }

std::string gpu_plan(const ModelConfig& c, const CudaDraftOptions& co, int max_rows) {
  std::ostringstream os;
  os << "context chain: eager (fc GEMM, hidden_norm, "
     << (c.context_layer_norm ? "per-layer input norm + K/V GEMM per layer"
                              : "one stacked K/V GEMM")
     << ", K-norm, RoPE, KV insert)\n";
  os << "backbone: eager (one kernel or pinned cuBLASLt GEMM per op; the fused backbone kernels "
        "are not built yet)\n";
  os << "lm_head: pinned cuBLASLt GEMM\n";
  MarkovPlanInput in;
  in.vocab = c.vocab_size;
  in.markov_rank = c.markov_rank;
  in.max_rows = max_rows;
  const std::string why = fused_markov_refusal(in);
  if (!co.fused_markov)
    os << "markov loop: eager (the fused loop is switched off)\n";
  else if (why.empty())
    os << "markov loop: fused (one kernel per step over the vocabulary"
       << (co.pdl ? ", programmatic dependent launch" : "") << ")\n";
  else
    os << "markov loop: eager, because " << why << "\n";
  os << "cuda graph: " << (co.cuda_graph ? "the whole step, one graph per row count" : "off");
  return os.str();
}

}  // namespace sparkdraft::cuda
