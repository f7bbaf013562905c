// common/fast_math.cuh's fast forms equal core/math.h's functions on every float: the
// proof is exhaustive, all 2^32 bit patterns (NaNs, infinities, subnormals included).
// exp_fast is attention's p = exp(s - max), silu_fast SwiGLU's silu (silu_mul, the GEMM
// epilogues), sigmoid_fast_try the output gate's (o_norm_gate), tanh_fast_try the Markov
// step logits' cap (cuda/markov/device.cuh step_transform_n).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>

#include "cuda/gpu_test_util.h"
#include "cuda/kernels.h"

namespace sparkdraft {
namespace {

void expect_exhaustive(cuda::FastMath f, const char* name, const char* domain) {
  uint32_t first_bad = 0;
  uint64_t slow = 0;
  const uint64_t bad = cuda::fast_math_mismatches(f, &first_bad, &slow);
  std::printf("[fast %s] mismatches %llu of 2^32; slow path for %llu of the floats in %s\n", name,
              static_cast<unsigned long long>(bad), static_cast<unsigned long long>(slow), domain);
  EXPECT_EQ(bad, 0u) << name << ": first mismatching bit pattern 0x" << std::hex << first_bad;
}

TEST(CudaFastMath, ExpEqualsExpF32OnEveryFloat) {
  SD_REQUIRE_GPU();
  expect_exhaustive(cuda::FastMath::exp, "exp", "[-87, 0]");
}

TEST(CudaFastMath, SiluEqualsSiluF32OnEveryFloat) {
  SD_REQUIRE_GPU();
  expect_exhaustive(cuda::FastMath::silu, "silu", "[-80, 40]");
}

TEST(CudaFastMath, SigmoidEqualsSigmoidF32OnEveryFloat) {
  SD_REQUIRE_GPU();
  expect_exhaustive(cuda::FastMath::sigmoid, "sigmoid", "[-87, 40]");
}

TEST(CudaFastMath, TanhEqualsTanhF32OnEveryFloat) {
  SD_REQUIRE_GPU();
  expect_exhaustive(cuda::FastMath::tanh, "tanh", "[-10, 10]");
}

}  // namespace
}  // namespace sparkdraft
