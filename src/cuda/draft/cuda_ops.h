// The GPU op table (runtime/step.h StepOps): the eager kernels of cuda/kernels.h (the GEMM
// included) and, where the plan says so, the fused fronts and gate_up + SwiGLU, queued on one
// stream. At layer TP > 1 o_proj and down complete the canonical slice tree over the ranks:
// through the communicator, or in the fused peer boundary.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

#include "cuda/comm/peer_reduce.h"
#include "runtime/step.h"
#include "sparkdraft/comm.h"

namespace sparkdraft::cuda {

// Timings of the host API: events between the stages (0 start, 1 embedded,
// 2 backbone done, 3 lm_head done, 4 Markov loop done).
struct StageEvents {
  cudaEvent_t e[5] = {};
  StageEvents();
  ~StageEvents();
  StageEvents(const StageEvents&) = delete;
  StageEvents& operator=(const StageEvents&) = delete;
};

class CudaOps final : public StepOps {
 public:
  // Ops on stream `s`; attention's split-K scratch `attn_ws` (attn_ws_bytes); `ev` (null:
  // none) records the stage events of mark().
  CudaOps(cudaStream_t s, void* attn_ws, size_t attn_ws_bytes, StageEvents* ev)
      : s_(s), ws_(attn_ws), ws_bytes_(attn_ws_bytes), ev_(ev) {}

  // What runs fused: the plan's "embed norm", "qkv front", "context front" and "mlp".
  struct Fusion {
    bool embed_norm = false, qkv_front = false, context_front = false, mlp = false;
  } fusion;
  // The fused gate_up + SwiGLU runs from 9 to 64 tokens; elsewhere the two passes
  // are faster on the H200 (GemmSpeed.GateUpSwigluFusedVsTwoPasses, 2026-12-01g run
  // 5: 79 vs 107 us at M 7, fused 75 vs 90 at M 56, 134 vs 188 at M 224 with the wg
  // tiles; with the ring tiles the two were within 3% at 56 and 224).
  static constexpr int kMlpFusedAbove = 8, kMlpFusedUpTo = 64;
  // Whether gate_up_swiglu over `rows` rows, and qkv_front on `p`, run the fused kernel.
  bool gate_up_fused(int rows) const {
    return fusion.mlp && rows > kMlpFusedAbove && rows <= kMlpFusedUpTo;
  }
  bool front_fused(const ops::QkvFrontParams& p) const {
    return p.heads > 0 ? fusion.qkv_front : fusion.context_front;
  }

  // The layers sharded over comm's ranks: gemm_all_reduce's fp32 partials in
  // `reduce` (at most reduce_count floats).
  // `peer` (null: eager) completes the tree in the fused peer boundary instead.
  void shard_layers(Communicator* comm, int layer_tp, float* reduce, size_t reduce_count,
                    PeerAllReduce* peer);
  int layer_tp_size() const override { return layer_tp_; }
  // This rank's subtree of its canonical K slices in fp32 (cuda::gemm_f32), the
  // tree completed over the ranks (Communicator::all_reduce_sum), one rounding.
  void gemm_all_reduce(const ops::GemmParams& p) override;
  // With the fused peer boundary: the rank's subtree, then one kernel that completes
  // the tree over the ranks, rounds it and runs the boundary (branch unwritten).
  void gemm_all_reduce_boundary(const ops::GemmParams& p, const ops::BoundaryParams& b,
                                void* residual, bf16* next) override;

  void gemm(const ops::GemmParams& p) override;
  void rms_norm(const ops::RmsNormParams& p) override;
  void head_rms_norm(const ops::HeadNormParams& p) override;
  void rope(const ops::RopeParams& p) override;
  void kv_insert(const ops::KvInsertParams& p) override;
  void prepare_query_block(const ops::QueryBlockParams& p) override;
  void select_drafted_rows(const ops::DraftedRowsParams& p) override;
  void embed(const ops::EmbedParams& p) override;
  void widen(const ops::WidenParams& p) override;
  void attention(const ops::AttentionParams& p, const bf16* q, const bf16* cache,
                 bf16* out) override;
  void o_norm_gate(const ops::ONormGateParams& p) override;
  void residual_boundary(const ops::BoundaryParams& p, const bf16* branch, void* residual,
                         bf16* next) override;
  void silu_mul(const ops::SiluMulParams& p) override;
  void confidence(const ops::ConfidenceParams& p) override;
  void gate_up_swiglu(const ops::GateUpParams& p) override;
  void qkv_front(const ops::QkvFrontParams& p) override;
  void embed_norm(const ops::EmbedNormParams& p) override;
  void mark(int stage) override;

 private:
  // This rank's fp32 subtree of its canonical K slices into the reduce buffer;
  // false when there is nothing to reduce (M or N 0).
  bool partial_subtree(const char* op, const ops::GemmParams& p);

  cudaStream_t s_;
  void* ws_;
  size_t ws_bytes_;
  StageEvents* ev_;
  Communicator* comm_ = nullptr;
  int layer_tp_ = 1;
  float* reduce_ = nullptr;
  size_t reduce_count_ = 0;
  PeerAllReduce* peer_ = nullptr;
};

}  // namespace sparkdraft::cuda
