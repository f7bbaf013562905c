// The CPU op table (see cpu_ops.h): the sharded o_proj / down_proj.
#include "runtime/cpu_ops.h"

#include <vector>

#include "sparkdraft/error.h"

namespace sparkdraft {

void CpuOps::gemm_all_reduce(const ops::GemmParams& p) {
  p.check("gemm_all_reduce");
  const int M = p.M, N = p.N;
  if (M == 0 || N == 0) return;  // the same on every rank (the step's shapes are replicated)
  // This rank's subtree in fp32: its slices' chains from +0 added by the tree.
  std::vector<float> sum(static_cast<size_t>(M) * N);
  ops::GemmParams sub = p;
  sub.y = sum.data();
  sub.y_stride = N;
  sub.y_dtype = StreamDType::f32;
  cpu::gemm(sub, th_, packed_);
  // The tree's upper levels over the ranks (canonical_tree_sum over tp_rank).
  if (comm_ && comm_->tp_size() > 1) comm_->all_reduce_sum(sum.data(), sum.size());
  bf16* y = p.y_bf16();
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n)
      y[m * p.y_stride + n] = to_bf16(sum[static_cast<size_t>(m) * N + n]);
}

}  // namespace sparkdraft
