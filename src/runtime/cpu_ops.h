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

  void gemm(const bf16* x, int64_t xs, const bf16* w, int M, int N, int K, bf16* y, int64_t ys,
            int k_slices) override {
    cpu::gemm(x, xs, w, M, N, K, y, ys, k_slices, th_);
  }
  // cpu::gemm_slices_f32 of this rank's slices, all_reduce_sum over the ranks (when
  // sharded), one bf16 rounding: at every TP size the bits of cpu::gemm over the
  // whole K with every canonical slice.
  void gemm_all_reduce(const bf16* x, int64_t x_stride, const bf16* w, int64_t w_stride, int M,
                       int N, int K, bf16* y, int64_t y_stride, int k_slices) override;
  int layer_tp_size() const override { return comm_ ? comm_->tp_size() : 1; }
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
  Communicator* comm_;
};

}  // namespace sparkdraft
