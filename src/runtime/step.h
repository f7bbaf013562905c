// The draft step, written once (contract.md section 1): the context chain, the query
// block and the backbone, over a backend's op table. The CPU backend
// (runtime/cpu_draft.cpp) runs every op eager on host buffers; the GPU backend
// (cuda/draft/cuda_draft.cu) runs the same calls on device buffers on its stream,
// each op's variant as the plan (runtime/plan.h) says. What follows the backbone
// (lm_head and the Markov loop) is the backend's: vocab-parallel thread ranks on
// the CPU, the fused or eager loop on the GPU.
//
// Layer tensor parallelism (contract.md section 6, runtime/layer_shard.h): a DraftStep
// built for a LayerShard runs one TP rank's heads, intermediate columns and KV
// heads; o_proj and down_proj go through StepOps::gemm_all_reduce, whose op table
// completes the canonical slice tree over the ranks. The same calls run at every
// TP size, TP 1 (the whole model, the GPU backend) included.
//
// Read it top to bottom in step.cpp: one forward pass, one call per op.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/layer_shard.h"
#include "runtime/packed_weights.h"
#include "sparkdraft/config.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/ops/attention.h"
#include "sparkdraft/ops/boundary.h"
#include "sparkdraft/ops/confidence.h"
#include "sparkdraft/ops/embed.h"
#include "sparkdraft/ops/front.h"
#include "sparkdraft/ops/gemm.h"
#include "sparkdraft/ops/kv.h"
#include "sparkdraft/ops/mlp.h"
#include "sparkdraft/ops/norm.h"
#include "sparkdraft/ops/query_block.h"
#include "sparkdraft/ops/rope.h"

namespace sparkdraft {

// A backend's op table: every op of the step on the backend's memory (host
// pointers on the CPU; device pointers queued on one stream on the GPU). The
// contract of each op is in include/sparkdraft/ops/.
class StepOps {
 public:
  virtual ~StepOps() = default;
  // ops/gemm.h (p.y_dtype bf16; k_slices: ops::canonical_k_slices(K) for o_proj and
  // down_proj, every other projection 1).
  virtual void gemm(const ops::GemmParams& p) = 0;
  // o_proj and down_proj (ops/gemm.h, contract.md section 6): p.y = bf16 of the canonical
  // tree of every TP rank's K slices. The rank this op table runs holds `p.k_slices`
  // consecutive canonical slices, its K columns: x [M, K] and w [N, K] (row stride
  // p.w_stride) are those columns. A sharded op table (layer_tp_size() > 1) computes
  // each slice's chain from +0, adds them in its subtree (fp32), completes the tree
  // with Communicator::all_reduce_sum and rounds once. The default is the op table
  // of replicated layers (one rank holds every slice, w_stride == K): gemm(p), what
  // the GPU runs.
  virtual void gemm_all_reduce(const ops::GemmParams& p);
  // o_proj or down_proj and the residual boundary after it: gemm_all_reduce(p) with
  // p.y = branch [b.rows, b.hidden] (p.M == b.rows, p.N == b.hidden), then
  // residual_boundary(b, branch, residual, next). The default is exactly those two
  // ops; an op table may complete the all-reduce and run the boundary in one kernel
  // (the GPU's fused peer boundary, cuda/comm/peer_reduce.h), with the same bits (branch
  // is then not written).
  virtual void gemm_all_reduce_boundary(const ops::GemmParams& p, const ops::BoundaryParams& b,
                                        void* residual, bf16* next);
  // The TP ranks the layers are sharded over in this op table (1: replicated).
  virtual int layer_tp_size() const { return 1; }
  virtual void rms_norm(const ops::RmsNormParams& p) = 0;
  virtual void head_rms_norm(const ops::HeadNormParams& p) = 0;
  virtual void rope(const ops::RopeParams& p) = 0;
  virtual void kv_insert(const ops::KvInsertParams& p) = 0;
  virtual void prepare_query_block(const ops::QueryBlockParams& p) = 0;
  // The fill-in layout's drafted rows (ops/query_block.h, contract.md section 14).
  virtual void select_drafted_rows(const ops::DraftedRowsParams& p) = 0;
  virtual void embed(const ops::EmbedParams& p) = 0;
  virtual void widen(const ops::WidenParams& p) = 0;
  virtual void attention(const ops::AttentionParams& p, const bf16* q, const bf16* cache,
                         bf16* out) = 0;
  virtual void o_norm_gate(const ops::ONormGateParams& p) = 0;
  virtual void residual_boundary(const ops::BoundaryParams& p, const bf16* branch, void* residual,
                                 bf16* next) = 0;
  virtual void silu_mul(const ops::SiluMulParams& p) = 0;
  // gate_up and SwiGLU (ops/mlp.h): y = silu_mul(gemm(x, w)) with w [2I, K]; gu
  // [rows, 2I] is the scratch the eager composition (eager_gate_up_swiglu) uses.
  virtual void gate_up_swiglu(const ops::GateUpParams& p) = 0;
  // The fronts of ops/front.h: a backend runs a fused kernel or eager_qkv_front /
  // eager_embed_norm (the composition that defines them).
  virtual void qkv_front(const ops::QkvFrontParams& p) = 0;
  virtual void embed_norm(const ops::EmbedNormParams& p) = 0;
  // The confidence head (ops/confidence.h). The default refuses (Unavailable): an op
  // table without the op cannot run a config with the head.
  virtual void confidence(const ops::ConfidenceParams& p);
  // Stage marks for the timings: 0 before the query block, 1 after embed_norm,
  // 2 after the backbone (CPU clocks, GPU events; nothing by default).
  virtual void mark(int /*stage*/) {}
};

// The compositions of ops/front.h over a backend's ops, in the contract's order.
void eager_qkv_front(StepOps& ops, const ops::QkvFrontParams& p);
void eager_embed_norm(StepOps& ops, const ops::EmbedNormParams& p);
void eager_gate_up_swiglu(StepOps& ops, const ops::GateUpParams& p);

// The weights as a backend holds them (host or device pointers; null = absent).
struct StepLayer {
  const bf16 *qkv = nullptr, *gate_up = nullptr, *o_proj = nullptr, *down_proj = nullptr;
  const bf16 *input_norm = nullptr, *post_attn_norm = nullptr, *pre_ffn_norm = nullptr,
             *post_ffn_norm = nullptr;
  const bf16 *q_norm = nullptr, *k_norm = nullptr, *o_norm = nullptr;
  const float *attn_alpha = nullptr, *attn_beta = nullptr, *mlp_alpha = nullptr,
              *mlp_beta = nullptr;
  // Row strides of o_proj and down_proj (0: the shard's K, a packed matrix); a
  // rank's shard is its K columns of the full matrix (stride q_size / I).
  int64_t o_proj_stride = 0, down_proj_stride = 0;
  bf16* kv_cache = nullptr;  // [pages * page_size, kv_heads, 2 * head_dim], the shard's KV heads
};
struct StepWeights {
  const bf16 *embed = nullptr, *fc = nullptr, *hidden_norm = nullptr, *final_norm = nullptr;
  const bf16* context_kv = nullptr;  // runtime/packed_weights.h
  const float* rope = nullptr;       // ops/rope.h table [max_positions, head_dim]
  std::vector<StepLayer> layers;
};

// The buffers hold one rank's shard where the step is sharded (qkv, attn, gu, act,
// the context kv). Scratch of the context chain for T tokens (sizes in context_buffer_sizes).
struct ContextBuffers {
  bf16 *h = nullptr, *normed = nullptr, *layer_in = nullptr, *kv = nullptr;
};
// Scratch of the query block for T = rows * Q tokens, Q = query_slots() (sizes in
// block_sizes); `drafted` [rows * N, H] holds the fill-in layout's drafted rows
// (contract.md section 14; unused, may be null, in the anchor layout).
struct BlockBuffers {
  int64_t *ids = nullptr, *positions = nullptr, *slots = nullptr;
  int32_t* token_request = nullptr;
  int64_t *kv_lens = nullptr, *safe_anchor = nullptr, *safe_position = nullptr;  // [rows]
  bf16 *x = nullptr, *h = nullptr, *qkv = nullptr, *attn = nullptr, *branch = nullptr,
       *gu = nullptr, *act = nullptr;
  float* residual_f32 = nullptr;  // only for an fp32 residual
  bf16* drafted = nullptr;        // only in the fill-in layout
};

// Element counts of each buffer for `tokens` tokens (a backend allocates them).
struct ContextSizes {
  size_t h, normed, layer_in, kv;
};
struct BlockSizes {
  size_t per_token, x, h, qkv, attn, branch, gu, act, residual_f32;
};

class DraftStep {
 public:
  // `shard`: the TP rank whose part of the layers this step runs (the default, TP
  // 1: all of it). Refuses (InvalidArgument) a shard the config cannot split into
  // (layer_shard_refusal).
  DraftStep(const ModelConfig& c, const DraftOptions& o, LayerShard shard = {});
  const LayerShard& shard() const { return shard_; }
  ContextSizes context_sizes(int tokens) const;
  // The weight operand of every GEMM context_chain and block issue (x, y and M
  // unset): what a backend may prepare at load (the CPU backend packs them,
  // cpu/mma_gemm.h MmaPackedSet).
  std::vector<ops::GemmParams> weight_gemms(const StepWeights& w) const;
  BlockSizes block_sizes(int tokens) const;

  // fc -> hidden_norm -> (each layer's input norm) -> K/V -> K-norm, V-norm -> RoPE ->
  // insert, for T tokens: hidden [T, taps * H_t], positions and slots [T].
  void context_chain(StepOps& ops, const StepWeights& w, const ContextBuffers& buf, int tokens,
                     const bf16* hidden, const int64_t* positions, const int64_t* slots) const;

  // The query block of `b` (the anchor, then Q-1 mask tokens: Q = N, or 1 + N in the
  // fill-in layout, contract.md section 14), the embedding and the backbone: leaves the
  // final-normed hidden state of every query slot in buf.h [rows*Q, H], the drafted
  // rows [rows*N, H] at drafted(buf) (buf.h itself in the anchor layout; buf.drafted,
  // selected from it, in the fill-in layout) and buf.safe_anchor / buf.safe_position
  // for the Markov loop.
  void block(StepOps& ops, const StepWeights& w, const BlockBuffers& buf,
             const ProposeBatch& b) const;
  // Where block() leaves the drafted rows [rows*N, H]: what lm_head, the Markov loop and
  // the confidence head read.
  const bf16* drafted(const BlockBuffers& buf) const {
    return c_.sample_from_anchor ? buf.h : buf.drafted;
  }
  // Elements of buf.drafted for `rows` requests (0 in the anchor layout).
  size_t drafted_size(int rows) const {
    return c_.sample_from_anchor
               ? 0
               : static_cast<size_t>(rows) * c_.block_size * static_cast<size_t>(c_.hidden_size);
  }

  // The confidence head (contract.md section 9) after the Markov loop: one value per
  // (row, step) of b from `hidden` [rows*N, H] (what block() leaves in buf.h),
  // `anchors` [rows] (the safe anchors: padding rows' are never read), the loop's
  // `tokens` [rows, N], markov_w1 and the head's weight and bias, into `out` [rows,
  // N]. InvalidArgument when the config has no head.
  void confidence(StepOps& ops, const ProposeBatch& b, const bf16* hidden, const int64_t* anchors,
                  const int64_t* tokens, const bf16* w1, const bf16* weight, const bf16* bias,
                  float* out) const;

  // The attention params of layer `layer` for `rows` requests of Q block tokens
  // (every kv length bounded by max_positions): what block() runs, and what sizes
  // the GPU's workspace.
  ops::AttentionParams attention_params(int rows, int layer, const int32_t* block_tables,
                                        const BlockBuffers& buf) const;

 private:
  // qkv_front params of `layers` layers from `first`: layer i's K at k + i * layer_step,
  // its V kv_size() later, rows of `stride`; no q (set q, heads and q_norm after).
  ops::QkvFrontParams front_params(const StepWeights& w, int first, int layers, bf16* k,
                                   int64_t layer_step, int64_t stride, int tokens,
                                   const int64_t* positions, const int64_t* slots) const;
  // The residual boundary after a branch: its post-norm, alpha and beta (where the
  // config has them) and the next input norm.
  ops::BoundaryParams boundary_params(int tokens, const bf16* post_weight, const float* alpha,
                                      const float* beta, const bf16* pre_weight) const;
  // The weight GEMMs, one builder each: context_chain and block run them on their
  // buffers, weight_gemms lists them without operands (x, y null, T 0), so the two
  // cannot name a weight differently. context_kv: layer -1 is the stacked GEMM of
  // every layer, rows of y `ldy` apart.
  ops::GemmParams fc_gemm(const StepWeights& w, const bf16* x, int T, bf16* y) const;
  ops::GemmParams context_kv_gemm(const StepWeights& w, int layer, const bf16* x, int T, bf16* y,
                                  int ldy) const;
  ops::GemmParams qkv_gemm(const StepLayer& lw, const bf16* x, int T, bf16* y) const;
  ops::GemmParams o_proj_gemm(const StepLayer& lw, const bf16* x, int T, bf16* y) const;
  ops::GateUpParams gate_up(const StepLayer& lw, const bf16* x, int T, bf16* gu, bf16* y) const;
  ops::GemmParams down_gemm(const StepLayer& lw, const bf16* x, int T, bf16* y) const;

  ModelConfig c_;
  DraftOptions o_;
  LayerShard shard_;
  // This shard's part: query heads, KV heads, intermediate columns, q and kv widths,
  // canonical K slices of o_proj and down_proj, and its QKV(+gate) layout.
  int heads_, kv_heads_, inter_, q_, kv_, o_slices_, down_slices_;
  QkvLayout qkv_;
};

}  // namespace sparkdraft
