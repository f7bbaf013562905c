// The fused all-reduce boundary (cuda/comm/peer_reduce.h) over a fp32 residual stream: the
// kernels of residual_boundary.cuh with the peer tree as their branch
// (peer_reduce_device.cuh); the bf16 stream's are in peer_reduce_boundary_bf16.cu.
#include "cuda/comm/peer_reduce_device.cuh"

namespace sparkdraft::cuda::peer_detail {

void launch_peer_boundary_f32(const ops::BoundaryParams& p, const PeerArgs& a, const float* partial,
                              bool vec, float* residual, bf16* next, cudaStream_t stream) {
  launch_peer_boundary<float>(p, a, partial, vec, residual, next, stream);
}

int64_t peer_boundary_resident_rows_f32(int hidden, int tp) {
  return peer_boundary_resident_rows<float>(hidden, tp);
}

}  // namespace sparkdraft::cuda::peer_detail
