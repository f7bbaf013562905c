// The CPU op table of the draft step (runtime/step.h): the reference ops of
// cpu/ops.h on host buffers (the matrix products on the tensor-core twin), for
// one TP thread rank. With a communicator (a rank of run_thread_group, comm.h)
// the layers are sharded over its ranks: gemm_all_reduce adds this rank's
// canonical K slices in its subtree, completes the tree with the communicator's
// all_reduce_sum and rounds once (contract.md section 6); without one it holds every
// slice (TP 1, or replicated layers).
#pragma once

#include <chrono>
#include <cstdint>

#include "runtime/step.h"
#include "sparkdraft/comm.h"
#include "sparkdraft/cpu/confidence.h"
#include "sparkdraft/cpu/ops.h"

namespace sparkdraft {

class CpuOps : public StepOps {
 public:
  using Clock = std::chrono::steady_clock;
  // `comm`: the thread rank's communicator when the layers are sharded (null:
  // replicated layers). Not owned.
  explicit CpuOps(int threads, Communicator* comm = nullptr) : th_(threads), comm_(comm) {}
  Clock::time_point marks[3];

  int threads() const { return th_; }
  Communicator* comm() const { return comm_; }

  // The backend's packed weights (cpu/mma_gemm.h; not owned; null: none): gemm and
  // gemm_all_reduce run a weight found there on mma_gemm_packed.
  void set_packed(const cpu::MmaPackedSet* packed) { packed_ = packed; }
  void gemm(const ops::GemmParams& p) override { cpu::gemm(p, th_, packed_); }
  // cpu::gemm's fp32 tree of this rank's slices, all_reduce_sum over the ranks (when
  // sharded), one bf16 rounding: at every TP size the bits of cpu::gemm over the
  // whole K with every canonical slice.
  void gemm_all_reduce(const ops::GemmParams& p) override;
  int layer_tp_size() const override { return comm_ ? comm_->tp_size() : 1; }
  void rms_norm(const ops::RmsNormParams& p) override { cpu::rms_norm(p, th_); }
  void head_rms_norm(const ops::HeadNormParams& p) override { cpu::head_rms_norm(p, th_); }
  void rope(const ops::RopeParams& p) override { cpu::rope(p, th_); }
  void kv_insert(const ops::KvInsertParams& p) override { cpu::kv_insert(p); }
  void prepare_query_block(const ops::QueryBlockParams& p) override { cpu::prepare_query_block(p); }
  void select_drafted_rows(const ops::DraftedRowsParams& p) override {
    cpu::select_drafted_rows(p);
  }
  void embed(const ops::EmbedParams& p) override { cpu::embed(p); }
  void widen(const ops::WidenParams& p) override { cpu::widen(p); }
  void attention(const ops::AttentionParams& p, const bf16* q, const bf16* cache,
                 bf16* out) override {
    cpu::attention(p, q, cache, out, th_);
  }
  void o_norm_gate(const ops::ONormGateParams& p) override { cpu::o_norm_gate(p, th_); }
  void residual_boundary(const ops::BoundaryParams& p, const bf16* branch, void* residual,
                         bf16* next) override {
    cpu::residual_boundary(p, branch, residual, next, th_);
  }
  void silu_mul(const ops::SiluMulParams& p) override { cpu::silu_mul(p, th_); }
  void gate_up_swiglu(const ops::GateUpParams& p) override { eager_gate_up_swiglu(*this, p); }
  void qkv_front(const ops::QkvFrontParams& p) override { eager_qkv_front(*this, p); }
  void embed_norm(const ops::EmbedNormParams& p) override { eager_embed_norm(*this, p); }
  void confidence(const ops::ConfidenceParams& p) override { cpu::confidence(p, th_); }
  void mark(int stage) override { marks[stage] = Clock::now(); }

 private:
  int th_;
  Communicator* comm_;
  const cpu::MmaPackedSet* packed_ = nullptr;
};

}  // namespace sparkdraft
