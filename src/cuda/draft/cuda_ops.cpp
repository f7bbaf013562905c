#include "cuda/draft/cuda_ops.h"

#include <string>

#include "cuda/fused/backbone/backbone.h"
#include "cuda/kernels.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {

StageEvents::StageEvents() {
  for (auto& x : e) SD_CUDA_CHECK(cudaEventCreate(&x));
}

StageEvents::~StageEvents() {
  for (auto& x : e) cudaEventDestroy(x);
}

void CudaOps::shard_layers(Communicator* comm, int layer_tp, float* reduce, size_t reduce_count,
                           PeerAllReduce* peer) {
  comm_ = comm;
  layer_tp_ = layer_tp;
  reduce_ = reduce;
  reduce_count_ = reduce_count;
  peer_ = peer;
}

void CudaOps::gemm_all_reduce(const ops::GemmParams& p) {
  if (layer_tp_ == 1) return StepOps::gemm_all_reduce(p);
  if (!partial_subtree("gemm_all_reduce", p)) return;
  const size_t count = static_cast<size_t>(p.M) * p.N;
  comm_->all_reduce_sum(reduce_, count, s_);
  cuda::narrow(reduce_, static_cast<int64_t>(count), p.y_bf16(), s_);
}

void CudaOps::gemm_all_reduce_boundary(const ops::GemmParams& p, const ops::BoundaryParams& b,
                                       void* residual, bf16* next) {
  if (layer_tp_ == 1 || !peer_) return StepOps::gemm_all_reduce_boundary(p, b, residual, next);
  if (!partial_subtree("gemm_all_reduce_boundary", p)) return;
  peer_->residual_boundary(b, reduce_, residual, next, s_);
}

void CudaOps::gemm(const ops::GemmParams& p) { cuda::gemm(p, s_); }
void CudaOps::rms_norm(const ops::RmsNormParams& p) { cuda::rms_norm(p, s_); }
void CudaOps::head_rms_norm(const ops::HeadNormParams& p) { cuda::head_rms_norm(p, s_); }
void CudaOps::rope(const ops::RopeParams& p) { cuda::rope(p, s_); }
void CudaOps::kv_insert(const ops::KvInsertParams& p) { cuda::kv_insert(p, s_); }
void CudaOps::prepare_query_block(const ops::QueryBlockParams& p) {
  cuda::prepare_query_block(p, s_);
}
void CudaOps::select_drafted_rows(const ops::DraftedRowsParams& p) {
  cuda::select_drafted_rows(p, s_);
}
void CudaOps::embed(const ops::EmbedParams& p) { cuda::embed(p, s_); }
void CudaOps::widen(const ops::WidenParams& p) { cuda::widen(p, s_); }
void CudaOps::attention(const ops::AttentionParams& p, const bf16* q, const bf16* cache,
                        bf16* out) {
  cuda::attention(p, q, cache, out, ws_, ws_bytes_, s_);
}
void CudaOps::o_norm_gate(const ops::ONormGateParams& p) { cuda::o_norm_gate(p, s_); }
void CudaOps::residual_boundary(const ops::BoundaryParams& p, const bf16* branch, void* residual,
                                bf16* next) {
  cuda::residual_boundary(p, branch, residual, next, s_);
}
void CudaOps::silu_mul(const ops::SiluMulParams& p) { cuda::silu_mul(p, s_); }
void CudaOps::confidence(const ops::ConfidenceParams& p) { cuda::confidence(p, s_); }

void CudaOps::gate_up_swiglu(const ops::GateUpParams& p) {
  if (gate_up_fused(p.rows))
    cuda::gemm_swiglu(p, s_);
  else
    eager_gate_up_swiglu(*this, p);
}

void CudaOps::qkv_front(const ops::QkvFrontParams& p) {
  if (front_fused(p))
    cuda::qkv_front(p, s_);
  else
    eager_qkv_front(*this, p);
}

void CudaOps::embed_norm(const ops::EmbedNormParams& p) {
  if (fusion.embed_norm)
    cuda::embed_norm(p, s_);
  else
    eager_embed_norm(*this, p);
}

void CudaOps::mark(int stage) {
  if (ev_) SD_CUDA_CHECK(cudaEventRecord(ev_->e[stage], s_));
}

bool CudaOps::partial_subtree(const char* op, const ops::GemmParams& p) {
  p.check(op);
  const size_t count = static_cast<size_t>(p.M) * p.N;
  if (p.w_row_stride() != p.K || p.y_stride != p.N || count > reduce_count_)
    throw InvalidArgument(std::string(op) +
                          ": the GPU op table takes packed shards (w_stride == K), dense outputs "
                          "(y_stride == N) and at most its reduce buffer's " +
                          std::to_string(reduce_count_) + " outputs");
  if (count == 0) return false;
  ops::GemmParams sub = p;
  sub.y = reduce_;
  sub.y_dtype = StreamDType::f32;
  cuda::gemm(sub, s_);
  return true;
}

}  // namespace sparkdraft::cuda
