// One residual boundary over rows of H, bit for bit cpu::residual_boundary: the
// kernel of residual_boundary.cuh (what it computes, where it rounds, the launch)
// over a bf16 branch in memory. (Its previous form walked the row in 2-byte
// steps: 14.5 us a boundary at H 4096, L2 flushed; the 16-byte loads issued at
// once made it 7.6 us.)
#include "cuda/kernels.h"
#include "sparkdraft/cuda/check.h"

#include "cuda/common/residual_boundary.cuh"

namespace sparkdraft::cuda {

void residual_boundary(const ops::BoundaryParams& p, const bf16* branch, void* residual, bf16* next,
                       cudaStream_t stream) {
  p.check();
  if (p.rows == 0) return;
  detail::require(branch != nullptr && residual != nullptr && next != nullptr, "residual_boundary",
                  "branch, residual and next must not be null");
  detail::check_boundary_hidden(p.hidden, "residual_boundary");
  const bool vec = detail::boundary_vec(p, detail::aligned16(branch), residual, next);
  detail::launch_boundary(p, detail::BranchBf16{branch}, residual, next, vec, stream);
}

}  // namespace sparkdraft::cuda
