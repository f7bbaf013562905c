// The GPU draft backend (see sparkdraft/cuda/draft.h): the step of runtime/step.h
// over the eager CUDA kernels (the same calls the CPU backend makes, on the same
// packed weights), then lm_head and the Markov loop, each part as the plan says.
// One object runs one TP rank: at TP 1 the whole model; at TP t (a communicator
// given) its layer shard (runtime/layer_shard.h; o_proj and down complete the
// canonical slice tree through the communicator), its vocabulary shard of lm_head
// and of the Markov loop (the vocab-parallel loop). This file holds only what is the
// GPU's: the weights' upload, the calls and their timing; the buffers are the workspace
// (workspace.h), the op table CudaOps (cuda_ops.h), the captured steps the graph cache
// (graph_cache.h).
#include "sparkdraft/cuda/draft.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "cuda/comm/peer_reduce.h"
#include "cuda/common/graph.h"
#include "cuda/common/launch.h"
#include "cuda/common/mma_probe.h"
#include "cuda/draft/cuda_ops.h"
#include "cuda/draft/graph_cache.h"
#include "cuda/draft/step_kernels.h"
#include "cuda/draft/workspace.h"
#include "cuda/fused/backbone/backbone.h"
#include "cuda/kernels.h"
#include "cuda/markov/markov.h"
#include "cuda/verify/verify.h"
#include "runtime/packed_weights.h"
#include "runtime/step.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/error.h"
#include "sparkdraft/ops/gemm.h"

namespace sparkdraft::cuda {

bool cuda_available() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

void validate_cuda_backend(const ModelConfig& c, const DraftOptions& o) {
  validate_options(c, o);  // the same refusals as the CPU backend, before any allocation
  if (c.reduced_vocab() && o.tp != 1)
    throw ConfigError("the GPU backend runs a reduced draft vocabulary (draft_vocab_size " +
                      std::to_string(c.draft_vocab_size) + " of " + std::to_string(c.vocab_size) +
                      " ids, a d2t map; contract.md 11.4) at TP 1 only (the eager Markov loop), "
                      "got tp " +
                      std::to_string(o.tp) + "; the CPU backend runs it at any TP");
  if (c.topk_markov() && o.tp != 1)
    throw ConfigError("the GPU backend runs the top-k Markov loop (markov_topk " +
                      std::to_string(c.markov_topk) +
                      ", contract.md 12.4) at TP 1 only (the eager Markov loop), got tp " +
                      std::to_string(o.tp) + "; the CPU backend runs it at any TP");
  if (c.markov_head_proj() && o.tp != 1)
    throw ConfigError(std::string("the GPU backend runs the ") + to_string(c.markov_head_type) +
                      " Markov head (markov_head_type, contract.md 13.3) at TP 1 only (the eager "
                      "Markov loop), got tp " +
                      std::to_string(o.tp) + "; the CPU backend runs it at any TP");
}

namespace {

struct DeviceLayer {
  DeviceBuffer<bf16> qkv, gate_up, o_proj, down_proj;
  DeviceBuffer<bf16> input_norm, post_attn_norm, pre_ffn_norm, post_ffn_norm;
  DeviceBuffer<bf16> q_norm, k_norm, o_norm;
  DeviceBuffer<float> attn_alpha, attn_beta, mlp_alpha, mlp_beta;
};

// The rank this object runs and its layer shard, after the refusals that must
// come before any allocation.
struct RankShape {
  int tp_size = 1, tp_rank = 0;
  LayerShard layers;  // {0, 1} where the layers are replicated
};

RankShape rank_shape(const ModelConfig& config, const DraftOptions& o, Communicator* comm) {
  ModelConfig c = config;
  c.validate();
  validate_cuda_backend(c, o);
  RankShape r;
  if (!comm) {
    if (o.tp != 1)
      throw InvalidArgument("CudaDraft runs one TP rank: at tp " + std::to_string(o.tp) +
                            " give it that rank's communicator (cuda/nccl_comm.h, "
                            "cuda/shared_device_comm.h), or use make_cuda_backend for every rank");
    return r;
  }
  if (comm->tp_size() != o.tp)
    throw InvalidArgument("CudaDraft: DraftOptions::tp is " + std::to_string(o.tp) +
                          " but the communicator has " + std::to_string(comm->tp_size()) +
                          " ranks");
  if (comm->local_ranks().size() != 1 || comm->memory() != CommMemory::device)
    throw InvalidArgument(
        "CudaDraft: the communicator must run one rank with device memory (NCCL or the "
        "shared-device group; the loopback runs every rank)");
  r.tp_size = comm->tp_size();
  r.tp_rank = comm->tp_rank();
  const int layer_tp = layer_tp_size(c, r.tp_size);
  r.layers = layer_tp == 1 ? LayerShard{} : LayerShard{r.tp_rank, layer_tp};
  return r;
}

}  // namespace

struct CudaDraft::Impl {
  std::shared_ptr<const Checkpoint> ckpt;
  ModelConfig c;
  DraftOptions o;
  CudaDraftOptions co;
  Communicator* comm;  // null at TP 1
  RankShape rs;
  int vocab_shard;  // Vd / tp: this rank's lm_head and w2 rows [tp_rank * vocab_shard, ...)
  DraftStep step;
  StepPlan plan;
  cudaStream_t stream = nullptr;
  StageTimings timings;

  // Weights (device copies; `sw` points into them).
  DeviceBuffer<bf16> embed, lm_head, fc, hidden_norm, final_norm, w1, w2, context_kv;
  DeviceBuffer<bf16> conf_w, conf_b;  // the confidence head (contract.md section 9)
  DeviceBuffer<bf16> head_w, head_b;  // the gated / rnn Markov head (contract.md section 13)
  DeviceBuffer<int32_t> draft_ids;    // a reduced vocabulary's map (contract.md section 11)
  std::vector<DeviceLayer> layers;
  DeviceBuffer<float> rope;
  std::vector<DeviceBuffer<bf16>> kv;  // per layer [pages*page_size, kvh, 2hd] (own caches)
  std::vector<bf16*> kv_data;          // per layer: the caches used (kv's or the caller's)
  size_t kv_per_layer = 0;             // elements of one layer's cache
  StepWeights sw;

  std::unique_ptr<DraftWorkspace> ws;   // every buffer but the weights (workspace.h)
  std::unique_ptr<PeerAllReduce> peer;  // the fused peer boundary (null: eager)
  std::string reduce_why;               // why not, where the layers shard
  int last_rows = 0;                    // rows of the last propose (last_hidden)

  std::unique_ptr<MarkovLoop> markov;              // TP 1
  std::unique_ptr<VocabParallelMarkov> vp_markov;  // TP > 1
  CudaOps::Fusion fusion;                          // from the plan
  GraphCache<GraphExec> graphs;                    // the captured steps, by row count

  Impl(std::shared_ptr<const Checkpoint> ck, const DraftOptions& opts,
       const CudaDraftOptions& copts, Communicator* cm)
      : ckpt(std::move(ck)),
        c(ckpt->config()),
        o(opts),
        co(copts),
        comm(cm),
        rs(rank_shape(c, o, cm)),
        vocab_shard(c.draft_vocab() / rs.tp_size),
        step(c, o, rs.layers) {
    mma_self_test();    // refuses a device whose tensor cores the CPU twin does not reproduce
    wgmma_self_test();  // whether the GEMMs may run wgmma (before any graph capture)
    if (rs.tp_size > 1 && !co.fused_markov)
      throw InvalidArgument(
          "CudaDraft: at tp > 1 the Markov loop is the vocab-parallel one, which is fused only "
          "(fused_markov must be on)");
    if (o.threads <= 0) o.threads = 1;
    if (co.max_context_tokens < 1 || co.max_context_tokens > kMaxContextTokens)
      throw InvalidArgument("CudaDraftOptions: max_context_tokens must be in [1, " +
                            std::to_string(kMaxContextTokens) + "], got " +
                            std::to_string(co.max_context_tokens));
    SD_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    // The deferred NaN/inf scan: a rank of TP > 1 holds shards only, so it scans the
    // host copies (make_cuda_backend scans once before its ranks start).
    const bool scan = ckpt->nonfinite_scan_pending() && !co.nonfinite_scanned;
    if (scan && rs.tp_size > 1) ckpt->scan_nonfinite_on_host(0);
    upload_weights();
    if (scan && rs.tp_size == 1) scan_nonfinite_on_device();
    ws = std::make_unique<DraftWorkspace>(
        c, o, step, WorkspaceShape{vocab_shard, rs.layers.tp_size, co.max_context_tokens}, stream);
    if (rs.layers.tp_size > 1) comm->reserve_reduce(ws->reduce_f32.size());
    connect_peers(ws->max_tokens());
    std::string markov_refusal;
    if (rs.tp_size == 1) {
      markov = std::make_unique<MarkovLoop>(markov_head(), o.max_reqs, c.block_size);
      markov->workspace().set_pdl(co.pdl);
      markov_refusal = markov->refusal();
    } else {
      vp_markov =
          std::make_unique<VocabParallelMarkov>(markov_head(), *comm, o.max_reqs, c.block_size);
      vp_markov->workspace().set_pdl(co.pdl);
    }
    PlanTp tp;
    tp.tp_size = rs.tp_size;
    tp.graph_capturable = !comm || comm->graph_capturable();
    tp.reduce = peer ? TpReduce::fused : TpReduce::eager;
    tp.reduce_why = reduce_why;
    plan = make_plan(c, co, markov_refusal, tp);
    if (plan.runs("markov loop", "fused") != (co.fused_markov && markov_refusal.empty()))
      throw std::logic_error("CudaDraft: the plan and the Markov loop disagree on fusion");
    fusion = {plan.runs("embed norm", "fused"), plan.runs("qkv front", "fused"),
              plan.runs("context front", "fused"), plan.runs("mlp", "fused")};
    SD_CUDA_CHECK(cudaStreamSynchronize(stream));
  }

  // The fused peer boundary where co.tp_reduce and the ranks' devices allow it; every
  // rank decides the same (two collectives). T: the most rows a boundary runs.
  void connect_peers(int T) {
    if (rs.layers.tp_size == 1) return;
    if (co.tp_reduce == TpReduce::eager) {
      reduce_why = "tp_reduce eager";
      return;
    }
    PeerReduceOptions po;
    po.max_count = ws->reduce_f32.size();
    po.max_slots = T;
    po.timeout_s = co.tp_timeout_s;
    auto p = std::make_unique<PeerAllReduce>(rs.tp_rank, rs.tp_size, po);
    // Ranks sharing one GPU: only when asked, every rank's blocks resident together,
    // and no lazy module load that could wait for a peer's waiting kernel.
    const std::string why = p->connect_group(*comm, [&](const std::vector<PeerEndpoint>& all) {
      const bool shared = std::any_of(all.begin(), all.end(), [&](const PeerEndpoint& e) {
        return e.tp_rank != rs.tp_rank && p->same_gpu(e);
      });
      if (!shared) return std::string();
      if (co.tp_reduce == TpReduce::automatic)
        return std::string(
            "the ranks share one GPU (tp_reduce fused runs the fused boundary there too)");
      const int64_t fit = p->resident_boundary_rows(c.hidden_size, c.stream_dtype);
      const int64_t need = static_cast<int64_t>(T) * rs.tp_size;
      if (need > fit)
        return "the ranks share one GPU, and their boundaries' blocks (" +
               std::to_string(rs.tp_size) + " ranks x " + std::to_string(T) +
               " rows) do not all fit on it at once (" + std::to_string(fit) +
               " do): fewer ranks or requests";
      if (module_loading_is_lazy())
        return std::string(
            "the ranks share one GPU and CUDA loads kernels lazily: a kernel loaded on one "
            "rank's thread while a peer's boundary waits would deadlock (run with "
            "CUDA_MODULE_LOADING=EAGER)");
      return std::string();
    });
    if (why.empty()) {
      peer = std::move(p);
      return;
    }
    if (co.tp_reduce == TpReduce::fused)
      throw InvalidArgument("CudaDraft: tp_reduce fused, but " + why);
    reduce_why = why;
  }

  ~Impl() {
    graphs.clear();
    if (stream) cudaStreamDestroy(stream);
  }

  // Where each checkpoint tensor's bytes landed on the device (for the deferred
  // NaN/inf scan): host data pointer -> device copy.
  std::unordered_map<const void*, const void*> on_device;

  template <class T>
  DeviceBuffer<T> upload(const T* host, size_t n) {
    DeviceBuffer<T> b(n);
    if (n) b.upload(host, n);
    if (host) on_device.emplace(host, b.data());
    return b;
  }

  // A packed matrix placed on the device piece by piece (runtime/packed_weights.h).
  DeviceBuffer<bf16> upload_pieces(const std::vector<PackPiece>& pieces) {
    size_t n = 0;
    for (const PackPiece& piece : pieces) n += piece.count;
    DeviceBuffer<bf16> b(n);
    size_t at = 0;
    for (const PackPiece& piece : pieces) {
      b.upload(piece.src, piece.count, at);
      on_device.emplace(piece.src, b.data() + at);
      at += piece.count;
    }
    return b;
  }

  // The deferred scan of Checkpoint (LoadOptions::defer_nonfinite_scan) on the
  // device copies: one launch per tensor, one synchronization, the same refusal
  // and message as the host scan (the first bad tensor in tensors() order).
  void scan_nonfinite_on_device() {
    const std::vector<LoadedTensor>& tensors = ckpt->tensors();
    DeviceBuffer<unsigned long long> first(tensors.size());
    SD_CUDA_CHECK(cudaMemsetAsync(first.data(), 0xff, first.bytes(), stream));
    for (size_t i = 0; i < tensors.size(); ++i) {
      const LoadedTensor& t = tensors[i];
      if (t.dtype != DType::bf16 && t.dtype != DType::f32) continue;  // ids (d2t) are never
      auto it = on_device.find(t.data);
      if (it == on_device.end())
        throw std::logic_error("CudaDraft: tensor '" + t.name + "' has no device copy to scan");
      first_nonfinite(it->second, t.numel(), t.dtype == DType::f32, first.data() + i, stream);
    }
    const std::vector<unsigned long long> found = first.download(stream);
    for (size_t i = 0; i < tensors.size(); ++i)
      if (found[i] != ~0ull)
        throw NonFiniteWeights(nonfinite_message(tensors[i], static_cast<int64_t>(found[i])));
  }

  // Columns [col0, col0 + cols) of a host matrix [rows, stride] as a packed device
  // matrix [rows, cols] (a rank's K columns of o_proj and down_proj).
  DeviceBuffer<bf16> upload_columns(const bf16* host, size_t rows, size_t stride, size_t col0,
                                    size_t cols) {
    if (cols == stride) return upload(host, rows * cols);
    DeviceBuffer<bf16> b(rows * cols);
    SD_CUDA_CHECK(cudaMemcpy2DAsync(b.data(), cols * sizeof(bf16), host + col0,
                                    stride * sizeof(bf16), cols * sizeof(bf16), rows,
                                    cudaMemcpyHostToDevice, stream));
    SD_CUDA_CHECK(cudaStreamSynchronize(stream));
    return b;
  }

  void upload_weights() {
    const DraftWeights& w = ckpt->weights();
    const size_t H = c.hidden_size, V = c.vocab_size, K = c.markov_rank, L = c.num_layers;
    const size_t q = c.q_size(), I = c.intermediate_size, hd = c.head_dim;
    const size_t in_width = static_cast<size_t>(c.taps()) * c.target_hidden_size;
    const LayerShard& ls = rs.layers;
    const size_t Vs = static_cast<size_t>(vocab_shard);
    const size_t v0 = static_cast<size_t>(rs.tp_rank) * Vs;
    const size_t q_local = static_cast<size_t>(ls.heads(c)) * hd;
    const size_t q0 = static_cast<size_t>(ls.tp_rank) * q_local;
    const size_t I_local = static_cast<size_t>(ls.intermediate(c));
    const size_t i0 = static_cast<size_t>(ls.tp_rank) * I_local;
    embed = upload(w.embed, V * H);
    lm_head = upload(w.lm_head + v0 * H, Vs * H);  // this rank's vocabulary rows
    fc = upload(w.fc, H * in_width);
    if (w.hidden_norm) hidden_norm = upload(w.hidden_norm, H);
    if (w.final_norm) final_norm = upload(w.final_norm, H);
    w1 = upload(w.markov_w1, V * K);
    w2 = upload(w.markov_w2 + v0 * K, Vs * K);
    if (c.reduced_vocab()) draft_ids = upload(w.draft_ids, static_cast<size_t>(c.draft_vocab()));
    if (c.confidence_head) {
      conf_w = upload(w.confidence_w, static_cast<size_t>(c.confidence_inputs()));
      conf_b = upload(w.confidence_b, 1);
    }
    if (c.markov_head_proj()) {
      const size_t P = static_cast<size_t>(c.markov_proj_rows());
      head_w = upload(w.markov_proj_w, P * static_cast<size_t>(c.markov_proj_inputs()));
      head_b = upload(w.markov_proj_b, P);
    }
    context_kv = upload_pieces(context_kv_pieces(c, w, ls));
    auto opt = [&](const bf16* p, size_t n) { return p ? upload(p, n) : DeviceBuffer<bf16>(); };
    auto optf = [&](const float* p, size_t n) { return p ? upload(p, n) : DeviceBuffer<float>(); };
    for (size_t l = 0; l < L; ++l) {
      const LayerWeights& lw = w.layers[l];
      DeviceLayer d;
      d.qkv = upload_pieces(qkv_pieces(c, lw, ls));
      d.gate_up = upload_pieces(gate_up_pieces(c, lw, ls));
      d.o_proj = upload_columns(lw.o_proj, H, q, q0, q_local);
      d.down_proj = upload_columns(lw.down_proj, H, I, i0, I_local);
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
    std::vector<float> table(static_cast<size_t>(position_limit(c, o)) * hd);
    cpu::rope_table(c.rope_theta, c.head_dim, position_limit(c, o), table.data());
    rope = DeviceBuffer<float>(table);
    const size_t slots_per_layer = static_cast<size_t>(o.num_pages) * o.page_size;
    kv_per_layer = slots_per_layer * ls.kv_heads(c) * 2 * hd;
    int device = 0;
    SD_CUDA_CHECK(cudaGetDevice(&device));
    for (size_t l = 0; l < L; ++l) {
      if (!o.kv_caches.empty()) {  // the caller's (validate_options: one per layer, tp 1)
        cudaPointerAttributes attr{};
        const cudaError_t e = cudaPointerGetAttributes(&attr, o.kv_caches[l]);
        if (e != cudaSuccess || attr.type != cudaMemoryTypeDevice || attr.device != device) {
          (void)cudaGetLastError();
          throw InvalidArgument("DraftOptions: kv_caches[" + std::to_string(l) +
                                "] is not device memory of GPU " + std::to_string(device));
        }
        kv_data.push_back(o.kv_caches[l]);
        continue;
      }
      kv.emplace_back(kv_per_layer);
      SD_CUDA_CHECK(cudaMemsetAsync(kv.back().data(), 0, kv.back().bytes(), stream));
      kv_data.push_back(kv.back().data());
    }
    sw.embed = embed.data();
    sw.fc = fc.data();
    sw.hidden_norm = hidden_norm.data();
    sw.final_norm = final_norm.data();
    sw.context_kv = context_kv.data();
    sw.rope = rope.data();
    for (size_t l = 0; l < L; ++l) {
      const DeviceLayer& d = layers[l];
      StepLayer s;
      s.qkv = d.qkv.data();
      s.gate_up = d.gate_up.data();
      s.o_proj = d.o_proj.data();
      s.down_proj = d.down_proj.data();
      s.input_norm = d.input_norm.data();
      s.post_attn_norm = d.post_attn_norm.data();
      s.pre_ffn_norm = d.pre_ffn_norm.data();
      s.post_ffn_norm = d.post_ffn_norm.data();
      s.q_norm = d.q_norm.data();
      s.k_norm = d.k_norm.data();
      s.o_norm = d.o_norm.data();
      s.attn_alpha = d.attn_alpha.data();
      s.attn_beta = d.attn_beta.data();
      s.mlp_alpha = d.mlp_alpha.data();
      s.mlp_beta = d.mlp_beta.data();
      s.kv_cache = kv_data[l];
      sw.layers.push_back(s);
    }
  }

  void store_context(const ContextBatch& b) {
    validate_context(c, o, b);
    const int T = b.num_tokens;
    if (T == 0) return;
    const auto t0 = std::chrono::steady_clock::now();
    const size_t in_width = static_cast<size_t>(c.taps()) * c.target_hidden_size;
    const ContextSizes n = step.context_sizes(T);
    ws->reserve_context(n, T, in_width);
    ws->ctx_hidden.upload(b.hidden, static_cast<size_t>(T) * in_width, 0, stream);
    ws->ctx_pos.upload(b.positions, T, 0, stream);
    ws->ctx_slots.upload(b.slots, T, 0, stream);
    run_context(ContextBatch{T, ws->ctx_hidden.data(), ws->ctx_pos.data(), ws->ctx_slots.data()},
                ws->host_context(), stream);
    SD_CUDA_CHECK(cudaStreamSynchronize(stream));
    timings.context_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }

  // The context chain of a batch of device pointers on `s`, into `scratch`.
  void run_context(const ContextBatch& d, const ContextBuffers& scratch, cudaStream_t s) {
    CudaOps ops = make_ops(s, nullptr);
    step.context_chain(ops, sw, scratch, d.num_tokens, d.hidden, d.positions, d.slots);
  }

  void store_context_device(const ContextBatch& b, cudaStream_t s) {
    if (b.num_tokens < 0 || b.num_tokens > co.max_context_tokens)
      throw InvalidArgument(
          "store_context_device: num_tokens " + std::to_string(b.num_tokens) +
          " is outside [0, max_context_tokens = " + std::to_string(co.max_context_tokens) + "]");
    if (b.num_tokens == 0) return;
    if (!b.hidden || !b.positions || !b.slots)
      throw InvalidArgument("store_context_device: hidden, positions and slots must be given");
    run_context(b, ws->device_context(), s);
  }

  CudaOps make_ops(cudaStream_t s, StageEvents* ev) {
    CudaOps ops(s, ws->attn.data(), ws->attn_bytes, ev);
    ops.fusion = fusion;
    ops.shard_layers(comm, rs.layers.tp_size, ws->reduce_f32.data(), ws->reduce_f32.size(),
                     peer.get());
    return ops;
  }

  // The device call: every stage on `s`, optionally bracketed by events.
  void run_device(const ProposeBatch& b, const ProposeOutputs& out, cudaStream_t s,
                  StageEvents* ev) {
    // T: the drafted rows (N a request; the backbone ran Q = query_slots() a request).
    const int R = b.num_rows, N = c.block_size, T = R * N, H = c.hidden_size;
    if (R < 1 || R > o.max_reqs)
      throw InvalidArgument("propose_device: num_rows " + std::to_string(R) + " is outside [1, " +
                            std::to_string(o.max_reqs) + "]");
    if (out.confidences && !c.confidence_head)
      throw InvalidArgument(
          "propose_device: confidences were asked for but the config has no confidence head "
          "(enable_confidence_head is false)");
    // Every kernel of the step with programmatic dependent launch when asked (the plan's
    // "step pdl").
    const PdlScope pdl(co.step_pdl);
    CudaOps ops = make_ops(s, ev);
    step.block(ops, sw, ws->block, b);
    last_rows = R;
    const bf16* drafted = step.drafted(ws->block);
    ops.gemm(
        ops::gemm_of(drafted, H, lm_head.data(), T, vocab_shard, H, ws->base.data(), vocab_shard));
    ops.mark(3);
    // The request rows, the padding rows' anchors made safe by the step (safe_anchor,
    // safe_position).
    MarkovBatch mb;
    mb.rows = ops::MarkovRows{R,        ws->safe_anchor.data(), ws->safe_position.data(),
                              b.seeds,  b.temperatures,         b.cache_slots,
                              b.lengths};
    mb.steps = N;
    mb.base_logits = ws->base.data();
    mb.draft_tokens = out.draft_tokens;
    mb.cache = out.draft_logits;
    mb.hidden = drafted;  // the drafted rows' final normed hidden states (the gated / rnn head's h)
    if (vp_markov) {
      const MarkovShard shard{w2.data(), ws->base.data()};
      vp_markov->run(mb, std::span<const MarkovShard>(&shard, 1), s);
    } else if (plan.runs("markov loop", "fused"))
      markov->run(mb, s);
    else
      eager_markov_loop(markov_head(), mb, markov->workspace(), s);
    // The confidence head after the loop (its tokens feed it), timed with the loop.
    if (out.confidences)
      step.confidence(ops, b, drafted, ws->safe_anchor.data(), out.draft_tokens, w1.data(),
                      conf_w.data(), conf_b.data(), out.confidences);
    ops.mark(4);
  }

  // Captures one step on our stream under a launch log: the plan gains the kernels it
  // runs at `rows` (step_kernels.h), and a kernel node the log lacks is refused.
  GraphExec capture_step(int rows, const std::function<void(cudaStream_t)>& body) {
    LaunchLog log;
    std::vector<const void*> nodes;
    GraphExec g(stream, body, &nodes);
    std::vector<std::string> names;
    std::vector<const void*> logged;
    for (const LaunchRecord& r : log.records) {
      names.push_back(r.name);
      logged.push_back(r.kernel);
    }
    put_part(plan, step_kernels_part(rows, names, logged, nodes, comm != nullptr));
    return g;
  }

  void propose_device_graphed(const ProposeBatch& b, const ProposeOutputs& out, cudaStream_t s) {
    cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    SD_CUDA_CHECK(cudaStreamIsCapturing(s, &capture));
    // Inside the caller's capture a graph launch of ours would invalidate it: the
    // kernels go straight into the caller's graph instead.
    if (capture != cudaStreamCaptureStatusNone || !plan.runs("cuda graph", "on")) {
      run_device(b, out, s, nullptr);
      return;
    }
    const GraphCache<GraphExec>::Pointers pointers{
        b.anchor_tokens, b.anchor_positions, b.seeds,          b.temperatures,   b.cache_slots,
        b.block_tables,  b.lengths,          out.draft_tokens, out.draft_logits, out.confidences};
    if (GraphExec* g = graphs.find_bound(b.num_rows, pointers)) {
      g->launch(s);
      last_rows = b.num_rows;
      return;
    }
    // This call runs directly (it also loads the kernels and sets their shared memory
    // limits); the graph is captured on our own stream for the next calls (capture
    // queues nothing).
    run_device(b, out, s, nullptr);
    graphs.put_bound(b.num_rows, pointers, capture_step(b.num_rows, [&](cudaStream_t cs) {
                       run_device(b, out, cs, nullptr);
                     }));
  }

  // The verifier's device call (cuda/verify/verify.h) on device pointers.
  void verify_device(const VerifyBatch& b, const VerifyOutputs& out, cudaStream_t s) {
    if (b.num_rows < 1 || b.num_rows > o.max_reqs)
      throw InvalidArgument("verify_device: num_rows " + std::to_string(b.num_rows) +
                            " is outside [1, " + std::to_string(o.max_reqs) + "]");
    cuda::verify(ops::verify_params(c, o, b, out), *ws->verify, s);
  }

  // The verifier's host API: validate, upload, run, download the non-padding rows.
  void verify(const VerifyBatch& b, const VerifyOutputs& out) {
    validate_verify(c, o, b);
    if (!out.num_accepted || !out.tokens)
      throw InvalidArgument("verify: num_accepted and tokens must be given");
    const size_t R = b.num_rows, N = c.block_size, V = c.vocab_size;
    ws->v_tokens.upload(b.draft_tokens, R * N, 0, stream);
    ws->v_anchor.upload(b.anchor_positions, R, 0, stream);
    ws->v_seed.upload(b.seeds, R, 0, stream);
    ws->v_slot.upload(b.cache_slots, R, 0, stream);
    ws->v_temp.upload(b.temperatures, R, 0, stream);
    if (b.top_k) ws->v_top_k.upload(b.top_k, R, 0, stream);
    if (b.top_p) ws->v_top_p.upload(b.top_p, R, 0, stream);
    if (b.lengths) ws->v_lengths.upload(b.lengths, R, 0, stream);
    const size_t target_bytes =
        R * (N + 1) * V * (b.target_dtype == LogitsDType::f32 ? sizeof(float) : sizeof(bf16));
    ws->reserve_target(target_bytes);
    ws->v_target.upload(static_cast<const unsigned char*>(b.target_logits), target_bytes, 0,
                        stream);
    for (size_t r = 0; r < R; ++r) {
      const int64_t slot = b.cache_slots[r];
      if (slot < 0) continue;
      const size_t at = static_cast<size_t>(slot) * N * V;
      ws->cache.upload(b.draft_logits + at, N * V, at, stream);
    }
    VerifyBatch d = b;
    d.draft_tokens = ws->v_tokens.data();
    d.anchor_positions = ws->v_anchor.data();
    d.seeds = ws->v_seed.data();
    d.temperatures = ws->v_temp.data();
    d.top_k = b.top_k ? ws->v_top_k.data() : nullptr;
    d.top_p = b.top_p ? ws->v_top_p.data() : nullptr;
    d.lengths = b.lengths ? ws->v_lengths.data() : nullptr;
    d.cache_slots = ws->v_slot.data();
    d.draft_logits = ws->cache.data();
    d.target_logits = ws->v_target.data();
    verify_device(d, VerifyOutputs{ws->v_accepted.data(), ws->v_out_tokens.data()}, stream);
    std::vector<int32_t> k(R);
    std::vector<int64_t> tokens(R * (N + 1));
    ws->v_accepted.download(k.data(), R, 0, stream);
    ws->v_out_tokens.download(tokens.data(), tokens.size(), 0, stream);
    for (size_t r = 0; r < R; ++r) {
      if (b.cache_slots[r] < 0) continue;  // padding rows: untouched
      out.num_accepted[r] = k[r];
      std::copy_n(tokens.data() + r * (N + 1), N + 1, out.tokens + r * (N + 1));
    }
  }

  MarkovHead markov_head() const {
    MarkovHead head;
    head.w1 = w1.data();
    head.w2 = w2.data();
    head.vocab = c.vocab_size;
    head.markov_rank = c.markov_rank;
    head.transform = ops::LogitTransform::from_config(c);
    head.topk = c.markov_topk;
    head.bias_topk = c.markov_bias_topk;
    head.head_type = c.markov_head_type;
    head.hidden = c.hidden_size;
    head.proj_w = head_w.data();
    head.proj_b = head_b.data();
    if (c.reduced_vocab()) {
      head.draft_vocab = c.draft_vocab();
      head.draft_ids = draft_ids.data();
      head.fill = ckpt->weights().draft_fill;
    }
    return head;
  }

  // The host API's step; the outputs are downloaded unless `out` is null (a TP rank
  // whose peer returns them).
  void propose(const ProposeBatch& b, const ProposeOutputs* out) {
    validate_propose(c, o, b);
    if (out && (!out->draft_tokens || !out->draft_logits))
      throw InvalidArgument("propose: draft_tokens and draft_logits outputs must be given");
    if (out && out->confidences && !c.confidence_head)
      throw InvalidArgument(
          "propose: confidences were asked for but the config has no confidence head "
          "(enable_confidence_head is false)");
    const int R = b.num_rows, N = c.block_size;
    const size_t V = c.vocab_size;
    ws->in_anchor.upload(b.anchor_tokens, R, 0, stream);
    ws->in_pos.upload(b.anchor_positions, R, 0, stream);
    ws->in_seed.upload(b.seeds, R, 0, stream);
    ws->in_temp.upload(b.temperatures, R, 0, stream);
    ws->in_slot.upload(b.cache_slots, R, 0, stream);
    ws->in_tables.upload(b.block_tables, static_cast<size_t>(R) * o.max_pages_per_req, 0, stream);
    if (b.lengths) ws->in_len.upload(b.lengths, R, 0, stream);
    StageEvents ev;
    const double context_ms = timings.context_ms;
    const ProposeBatch d{R,
                         ws->in_anchor.data(),
                         ws->in_pos.data(),
                         ws->in_seed.data(),
                         ws->in_temp.data(),
                         ws->in_slot.data(),
                         ws->in_tables.data(),
                         b.lengths ? ws->in_len.data() : nullptr};  // the device copies
    // With the head, every step computes its confidences (one graph either way).
    const ProposeOutputs dout{ws->out_tokens.data(), ws->cache.data(),
                              c.confidence_head ? ws->conf.data() : nullptr};
    if (plan.runs("cuda graph", "on")) {
      // A batch with lengths runs one more kernel (the tokens past them): its own graph.
      const bool lengths = b.lengths != nullptr;
      GraphExec* g = graphs.find(R, lengths);
      if (!g) {
        // Warm-up (loads the kernels, sets their shared memory limits), then capture.
        run_device(d, dout, stream, nullptr);
        SD_CUDA_CHECK(cudaStreamSynchronize(stream));
        if (peer) peer->check();
        g = &graphs.put(R, lengths,
                        capture_step(R, [&](cudaStream_t s) { run_device(d, dout, s, nullptr); }));
      }
      SD_CUDA_CHECK(cudaEventRecord(ev.e[0], stream));
      g->launch(stream);
      SD_CUDA_CHECK(cudaEventRecord(ev.e[4], stream));
      SD_CUDA_CHECK(cudaStreamSynchronize(stream));
      if (peer) peer->check();
      float ms = 0;
      SD_CUDA_CHECK(cudaEventElapsedTime(&ms, ev.e[0], ev.e[4]));
      timings = StageTimings{};
      timings.context_ms = context_ms;
      timings.graph_ms = ms;  // one graph: only the whole step is timed
    } else {
      run_device(d, dout, stream, &ev);
      SD_CUDA_CHECK(cudaStreamSynchronize(stream));
      if (peer) peer->check();
      float ms[4];
      for (int i = 0; i < 4; ++i) SD_CUDA_CHECK(cudaEventElapsedTime(&ms[i], ev.e[i], ev.e[i + 1]));
      timings = StageTimings{context_ms, ms[0], ms[1], ms[2], ms[3]};
    }
    if (!out) return;
    ws->out_tokens.download(out->draft_tokens, static_cast<size_t>(R) * N, 0, stream);
    if (out->confidences)
      ws->conf.download(out->confidences, static_cast<size_t>(R) * N, 0, stream);
    for (int r = 0; r < R; ++r) {
      const int64_t slot = b.cache_slots[r];
      if (slot < 0) continue;
      // The cache rows the row ran (contract.md 9.5): the others stay the caller's.
      const size_t run = b.lengths ? static_cast<size_t>(b.lengths[r]) : N;
      ws->cache.download(out->draft_logits + static_cast<size_t>(slot) * N * V, run * V,
                         static_cast<size_t>(slot) * N * V, stream);
    }
  }
};

CudaDraft::CudaDraft(std::shared_ptr<const Checkpoint> ckpt, const DraftOptions& options,
                     const CudaDraftOptions& cuda_options, Communicator* comm)
    : impl_(std::make_unique<Impl>(std::move(ckpt), options, cuda_options, comm)) {}
CudaDraft::~CudaDraft() = default;

std::string CudaDraft::name() const { return "cuda"; }
const ModelConfig& CudaDraft::config() const { return impl_->c; }
const DraftOptions& CudaDraft::options() const { return impl_->o; }
void CudaDraft::store_context(const ContextBatch& b) { impl_->store_context(b); }
void CudaDraft::store_context_device(const ContextBatch& b, cudaStream_t s) {
  impl_->store_context_device(b, s);
}
void CudaDraft::propose(const ProposeBatch& b, const ProposeOutputs& out) {
  impl_->propose(b, &out);
}
void CudaDraft::propose_without_outputs(const ProposeBatch& b) { impl_->propose(b, nullptr); }
StageTimings CudaDraft::last_timings() const { return impl_->timings; }
void CudaDraft::propose_device(const ProposeBatch& b, const ProposeOutputs& out, cudaStream_t s) {
  impl_->run_device(b, out, s, nullptr);
}
void CudaDraft::propose_device_graphed(const ProposeBatch& b, const ProposeOutputs& out,
                                       cudaStream_t s) {
  impl_->propose_device_graphed(b, out, s);
}
void CudaDraft::verify(const VerifyBatch& b, const VerifyOutputs& out) { impl_->verify(b, out); }
void CudaDraft::verify_device(const VerifyBatch& b, const VerifyOutputs& out, cudaStream_t s) {
  impl_->verify_device(b, out, s);
}
bool CudaDraft::markov_fused() const { return impl_->plan.runs("markov loop", "fused"); }
bool CudaDraft::fused_all_reduce() const { return impl_->peer != nullptr; }
void CudaDraft::check_peers() const {
  if (impl_->peer) impl_->peer->check();
}

const char* to_string(TpReduce r) {
  switch (r) {
    case TpReduce::automatic: return "auto";
    case TpReduce::eager: return "eager";
    case TpReduce::fused: return "fused";
  }
  return "?";
}

TpReduce parse_tp_reduce(const std::string& s) {
  for (TpReduce r : {TpReduce::automatic, TpReduce::eager, TpReduce::fused})
    if (s == to_string(r)) return r;
  throw InvalidArgument("tp reduce '" + s + "': give auto, eager or fused");
}
int CudaDraft::tp_rank() const { return impl_->rs.tp_rank; }
int CudaDraft::layer_tp_size() const { return impl_->rs.layers.tp_size; }

std::vector<bf16> CudaDraft::last_hidden() const {
  const Impl& m = *impl_;
  std::vector<bf16> host(static_cast<size_t>(m.last_rows) * m.c.query_slots() * m.c.hidden_size);
  m.ws->h.download(host.data(), host.size(), 0, m.stream);
  return host;
}

std::vector<bf16> CudaDraft::kv_cache(int layer) const {
  const bf16* src = const_cast<CudaDraft*>(this)->kv_cache_data(layer);
  std::vector<bf16> host(impl_->kv_per_layer);
  SD_CUDA_CHECK(cudaMemcpyAsync(host.data(), src, host.size() * sizeof(bf16),
                                cudaMemcpyDeviceToHost, impl_->stream));
  SD_CUDA_CHECK(cudaStreamSynchronize(impl_->stream));
  return host;
}

bf16* CudaDraft::kv_cache_data(int layer) {
  if (layer < 0 || layer >= impl_->c.num_layers)
    throw InvalidArgument("kv_cache_data: layer " + std::to_string(layer) + " of " +
                          std::to_string(impl_->c.num_layers));
  return impl_->kv_data[static_cast<size_t>(layer)];
}

const StepPlan& CudaDraft::plan() const { return impl_->plan; }

StepPlan make_plan(const ModelConfig& c, const CudaDraftOptions& co,
                   const std::string& markov_refusal, const PlanTp& tp) {
  StepPlan plan;
  plan.backend = "cuda";
  if (tp.tp_size > 1) {
    const std::string why = layer_shard_refusal(c, tp.tp_size);
    const std::string t = std::to_string(tp.tp_size);
    const std::string fused_tree =
        "each rank pushes its fp32 subtree into its peers' mailboxes, and one kernel completes "
        "the tree and runs the residual boundary";
    const std::string eager_tree = "an all-gather of the fp32 subtrees, then the tree";
    std::string tree;
    switch (tp.reduce) {
      case TpReduce::fused: tree = "the fused peer boundary: " + fused_tree; break;
      case TpReduce::eager:
        tree = eager_tree + (tp.reduce_why.empty() ? "" : " (not fused: " + tp.reduce_why + ")");
        break;
      case TpReduce::automatic:
        tree = "the fused peer boundary (" + fused_tree +
               ") where every rank has a GPU of its own that reaches its peers, else " + eager_tree;
        break;
    }
    plan.parts.push_back(
        why.empty()
            ? PlanPart{"tensor parallel", "layers+vocab",
                       t +
                           " ranks: QKV by heads, gate_up by columns, o_proj and down by "
                           "canonical K slices completed by " +
                           tree + "; KV caches by KV heads; lm_head and Markov w2 by vocabulary"}
            : PlanPart{"tensor parallel", "vocab",
                       t + " ranks: the layers replicated (" + why +
                           "); lm_head and Markov w2 by vocabulary"});
  }
  plan.parts.push_back({"context chain", "eager",
                        std::string("fc GEMM, hidden_norm, ") +
                            (c.context_layer_norm ? "per-layer input norm + K/V GEMM per layer"
                                                  : "one stacked K/V GEMM") +
                            ", then the context front"});
  plan.parts.push_back({"backbone", "eager",
                        "one kernel per op, the fronts below aside (GEMMs: the tensor-core chain, "
                        "o_proj and down in canonical K slices)"});
  // Ops that are one kernel in both backends (nothing to fall back to).
  plan.parts.push_back(
      {"residual boundary", "fused",
       "one kernel per boundary: the branch's post-norm where the layer has one, the residual "
       "update and the next input norm (the eager backend runs the same kernel)"});
  if (c.o_norm || c.output_gate)
    plan.parts.push_back({"o-norm gate", "fused",
                          std::string("one kernel per layer after attention: ") +
                              (c.o_norm && c.output_gate ? "the o-norm and the output gate"
                               : c.o_norm                ? "the o-norm"
                                                         : "the output gate") +
                              " (the eager backend runs the same kernel)"});
  // The fused backbone's parts (cuda/fused/backbone/backbone.h), each with the reason it does not
  // run.
  const auto front_part = [&](const char* part, const std::string& refusal,
                              const std::string& fused, const std::string& eager) -> PlanPart {
    if (!co.fused_backbone) return {part, "eager", eager + " (the fused backbone is switched off)"};
    if (!refusal.empty())
      return {part, "eager", eager + " (the fused kernel refuses: " + refusal + ")"};
    return {part, "fused", fused};
  };
  const bool f32 = c.stream_dtype == StreamDType::f32;
  plan.parts.push_back(front_part("embed norm", embed_norm_refusal(c.hidden_size),
                                  std::string("one kernel: embedding, ") +
                                      (f32 ? "fp32 widening of the residual, " : "") +
                                      "layer 0's input norm",
                                  std::string("embed, ") + (f32 ? "widen, " : "") + "rms_norm"));
  const auto heads_ops = [&](const char* norm) {
    return std::string(c.qk_norm ? norm : "") + (c.v_norm ? "V-norm, " : "") +
           to_string(c.rope_style) + " RoPE, KV insert";
  };
  const std::string front_refusal = qkv_front_refusal(c.head_dim);
  plan.parts.push_back(front_part(
      "qkv front", front_refusal,
      "one kernel per layer after the QKV GEMM: " + heads_ops("QK-norm, ") +
          "; the gate stays for o-norm/gate",
      "per layer after the QKV GEMM: " + heads_ops("QK-norm, ") + " as separate kernels"));
  plan.parts.push_back(front_part(
      "context front", front_refusal,
      c.context_layer_norm
          ? "per layer (input norm, K/V GEMM, then) one kernel: " + heads_ops("K-norm, ")
          : "one kernel after the stacked K/V GEMM for every layer's " + heads_ops("K-norm, "),
      "per layer: " + heads_ops("K-norm, ") + " as separate kernels"));
  plan.parts.push_back(front_part(
      "mlp",
      c.hidden_size % 8 == 0 ? ""
                             : "hidden size " + std::to_string(c.hidden_size) +
                                   " is not a multiple of 8 (the GEMM kernels' 16-byte rows)",
      "from 9 to 64 tokens the gate_up GEMM with the SwiGLU in its epilogue (no [rows, 2I] "
      "intermediate); otherwise the gate_up GEMM then silu_mul (faster there)",
      "gate_up GEMM, then silu_mul"));
  if (!c.sample_from_anchor)
    plan.parts.push_back(
        {"layout", "fill-in",
         "1 + N query slots per request (contract.md section 14): the backbone and the KV "
         "insert over every slot, then one kernel copies slots 1 .. N out (drafted_rows_kernel) "
         "for lm_head, the Markov loop and the cache; only row counts differ, so the fused "
         "parts and the CUDA graph run as in the anchor layout"});
  plan.parts.push_back({"lm_head", "eager", "one tensor-core chain GEMM"});
  if (c.confidence_head)
    plan.parts.push_back({"confidence head", "eager",
                          "one warp per drafted position after the Markov loop, inside the "
                          "step's CUDA graph; no fused kernel yet"});
  if (!co.fused_markov)
    plan.parts.push_back({"markov loop", "eager", "the fused loop is switched off"});
  else if (markov_refusal.empty())
    plan.parts.push_back(
        {"markov loop", "fused",
         std::string(tp.tp_size > 1 ? "vocab-parallel: per step one kernel over the rank's "
                                      "vocabulary shard, one packet all-gather, the pick"
                                    : "one kernel per step over the vocabulary") +
             (co.pdl ? ", programmatic dependent launch" : "")});
  else
    plan.parts.push_back({"markov loop", "eager", "the fused loop refuses: " + markov_refusal});
  plan.parts.push_back(
      {"step pdl", co.step_pdl ? "on" : "off",
       co.step_pdl ? "programmatic dependent launch on every kernel of the step: kernel k + 1 "
                     "launches while kernel k runs and waits in griddepcontrol.wait; the GEMMs "
                     "request their first stages' weights before that wait"
                   : "only the fused Markov loop's kernels use programmatic dependent launch "
                     "(CudaDraftOptions::step_pdl: on, measured between 2.1% faster and 1.0% "
                     "slower on the H200)"});
  if (co.cuda_graph && !tp.graph_capturable)
    plan.parts.push_back({"cuda graph", "off",
                          "the ranks share one GPU as host threads and meet on the host in each "
                          "collective (cuda/shared_device_comm.h): nothing to capture"});
  else
    plan.parts.push_back({"cuda graph", co.cuda_graph ? "on" : "off",
                          co.cuda_graph ? (tp.tp_size > 1 ? "the whole step, one graph per row "
                                                            "count on every rank"
                                                          : "the whole step, one graph per row "
                                                            "count")
                                        : ""});
  return plan;
}

StepPlan make_plan(const ModelConfig& c, const CudaDraftOptions& co, int max_rows,
                   const PlanTp& tp) {
  MarkovPlanInput in;
  in.vocab = c.vocab_size;
  in.draft_vocab = c.reduced_vocab() ? c.draft_vocab() : 0;
  in.markov_rank = c.markov_rank;
  in.topk = c.markov_topk;
  in.head_type = c.markov_head_type;
  in.max_rows = max_rows;
  in.tp_size = tp.tp_size;
  return make_plan(c, co, fused_markov_refusal(in), tp);
}

}  // namespace sparkdraft::cuda
