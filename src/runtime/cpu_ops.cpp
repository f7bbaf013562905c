// The CPU op table (see cpu_ops.h): the sharded o_proj / down_proj.
#include "runtime/cpu_ops.h"

#include <vector>

#include "sparkdraft/error.h"

namespace sparkdraft {

void CpuOps::gemm_all_reduce(const bf16* x, int64_t x_stride, const bf16* w, int64_t w_stride,
                             int M, int N, int K, bf16* y, int64_t y_stride, int k_slices) {
  ops::check_gemm_args("gemm_all_reduce", x, x_stride, w, M, N, K, y, y_stride, k_slices);
  if (M == 0 || N == 0) return;  // the same on every rank (the step's shapes are replicated)
  // This rank's subtree in fp32: its slices' chains from +0 added by the tree.
  std::vector<float> sum(static_cast<size_t>(M) * N);
  cpu::gemm_slices_f32(x, x_stride, w, w_stride, M, N, K, sum.data(), N, k_slices, th_);
  // The tree's upper levels over the ranks (canonical_tree_sum over tp_rank).
  if (comm_ && comm_->tp_size() > 1) comm_->all_reduce_sum(sum.data(), sum.size());
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n) y[m * y_stride + n] = to_bf16(sum[static_cast<size_t>(m) * N + n]);
}

}  // namespace sparkdraft
