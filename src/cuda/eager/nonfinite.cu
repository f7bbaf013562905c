// The device scan for NaN and infinity in weights (Checkpoint's deferred scan):
// the lowest index of a bf16 or fp32 element whose exponent bits are all ones,
// by atomicMin over a grid-stride loop (any grid gives the same answer).
#include "cuda/common/common.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/kernels.h"
#include "sparkdraft/cuda/check.h"

namespace sparkdraft::cuda {
namespace {

template <class U>
__global__ void first_nonfinite_kernel(const U* x, int64_t n, U exp_mask,
                                       unsigned long long* first) {
  pdl_enter();
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    if ((x[i] & exp_mask) == exp_mask) {
      atomicMin(first, static_cast<unsigned long long>(i));
      return;  // this thread's later indices are larger
    }
}

}  // namespace

void first_nonfinite(const void* data, int64_t n, bool f32, unsigned long long* first,
                     cudaStream_t stream) {
  detail::require(n >= 0, "first_nonfinite", "needs n >= 0");
  if (n == 0) return;
  detail::require(data != nullptr && first != nullptr, "first_nonfinite",
                  "data and first must not be null");
  const int threads = 256;
  const unsigned blocks =
      static_cast<unsigned>(std::min<int64_t>((n + threads - 1) / threads, 4096));
  if (f32)
    launch_kernel("first_nonfinite_kernel", first_nonfinite_kernel<uint32_t>,
                  LaunchShape{dim3(blocks), dim3(threads), 0, stream},
                  static_cast<const uint32_t*>(data), n, 0x7f800000u, first);
  else
    launch_kernel("first_nonfinite_kernel", first_nonfinite_kernel<uint16_t>,
                  LaunchShape{dim3(blocks), dim3(threads), 0, stream},
                  static_cast<const uint16_t*>(data), n, static_cast<uint16_t>(0x7f80u), first);
}

}  // namespace sparkdraft::cuda
