// cuda::fast_math_mismatches (cuda/kernels.h): common/fast_math.cuh's fast forms of exp,
// silu, sigmoid and tanh (each try with its slow path) against core/math.h's exp_f32,
// silu_f32, sigmoid_f32 and tanh_f32 on every float bit pattern.
#include "cuda/common/fast_math.cuh"
#include "cuda/kernels.h"
#include "sparkdraft/cuda/check.h"

namespace sparkdraft::cuda {
namespace {

// The fast form (its try, then the function itself where not ok, as exp_fast and
// silu_fast do), the reference, and the working domain whose fallbacks are counted.
template <FastMath F>
struct Fast;
template <>
struct Fast<FastMath::exp> {
  __device__ static float try_(float x, bool* ok) { return exp_fast_try(x, ok); }
  __device__ static float slow(float x) { return exp_slow(x); }
  __device__ static float ref(float x) { return exp_f32(x); }
  __device__ static bool domain(float x) { return x >= -87.0f && x <= 0.0f; }  // s - max
};
template <>
struct Fast<FastMath::silu> {
  __device__ static float try_(float x, bool* ok) { return silu_fast_try(x, ok); }
  __device__ static float slow(float x) { return silu_slow(x); }
  __device__ static float ref(float x) { return silu_f32(x); }
  __device__ static bool domain(float x) { return x >= -80.0f && x <= 40.0f; }
};

template <>
struct Fast<FastMath::sigmoid> {
  __device__ static float try_(float x, bool* ok) { return sigmoid_fast_try(x, ok); }
  __device__ static float slow(float x) { return sigmoid_slow(x); }
  __device__ static float ref(float x) { return sigmoid_f32(x); }
  __device__ static bool domain(float x) { return x >= -87.0f && x <= 40.0f; }
};

template <>
struct Fast<FastMath::tanh> {
  __device__ static float try_(float x, bool* ok) { return tanh_fast_try(x, ok); }
  __device__ static float slow(float x) { return tanh_slow(x); }
  __device__ static float ref(float x) { return tanh_f32(x); }
  __device__ static bool domain(float x) { return x >= -10.0f && x <= 10.0f; }
};

template <FastMath F>
__global__ void fast_math_check_kernel(unsigned long long* mismatches, unsigned int* first_bad,
                                       unsigned long long* slow) {
  unsigned long long bad = 0, rare = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < (uint64_t{1} << 32); i += stride) {
    const uint32_t u = static_cast<uint32_t>(i);
    const float x = bits_f32(u);
    bool ok;
    float f = Fast<F>::try_(x, &ok);
    if (!ok) {
      f = Fast<F>::slow(x);
      if (Fast<F>::domain(x)) ++rare;
    }
    if (f32_bits(f) != f32_bits(Fast<F>::ref(x))) {
      ++bad;
      atomicMin(first_bad, u);
    }
  }
  if (bad != 0) atomicAdd(mismatches, bad);
  if (rare != 0) atomicAdd(slow, rare);
}

}  // namespace

uint64_t fast_math_mismatches(FastMath f, uint32_t* first_bad, uint64_t* slow_in_domain) {
  unsigned long long* d_counts = nullptr;  // mismatches, slow
  unsigned int* d_first = nullptr;
  SD_CUDA_CHECK(cudaMalloc(&d_counts, 2 * sizeof(unsigned long long)));
  SD_CUDA_CHECK(cudaMalloc(&d_first, sizeof(unsigned int)));
  SD_CUDA_CHECK(cudaMemset(d_counts, 0, 2 * sizeof(unsigned long long)));
  SD_CUDA_CHECK(cudaMemset(d_first, 0xff, sizeof(unsigned int)));
  const LaunchShape shape{dim3(132 * 16), dim3(256), 0, nullptr};
  const auto kernel = f == FastMath::exp       ? fast_math_check_kernel<FastMath::exp>
                      : f == FastMath::silu    ? fast_math_check_kernel<FastMath::silu>
                      : f == FastMath::sigmoid ? fast_math_check_kernel<FastMath::sigmoid>
                                               : fast_math_check_kernel<FastMath::tanh>;
  launch_kernel("fast_math_check_kernel", kernel, shape, d_counts, d_first, d_counts + 1);
  unsigned long long counts[2] = {0, 0};
  unsigned int first = 0;
  SD_CUDA_CHECK(cudaMemcpy(counts, d_counts, sizeof(counts), cudaMemcpyDeviceToHost));
  SD_CUDA_CHECK(cudaMemcpy(&first, d_first, sizeof(first), cudaMemcpyDeviceToHost));
  SD_CUDA_CHECK(cudaFree(d_counts));
  SD_CUDA_CHECK(cudaFree(d_first));
  if (first_bad != nullptr) *first_bad = first;
  if (slow_in_domain != nullptr) *slow_in_domain = counts[1];
  return counts[0];
}

}  // namespace sparkdraft::cuda
