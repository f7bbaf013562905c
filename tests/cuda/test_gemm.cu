// cuda::GemmRunner (cuBLASLt, pinned algorithm per shape) against cpu::gemm within
// a stated bf16-ulp budget, and its determinism: the same call gives the same bits,
// and a call captured in a CUDA graph gives the bits of the eager call.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/bits.h"
#include "common/random.h"
#include "cuda/common/graph.h"
#include "cuda/gpu_test_util.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/gemm.h"

namespace sparkdraft {
namespace {

using cuda::DeviceBuffer;
using cuda::DeviceStream;
using cuda::GemmRunner;

struct Shape {
  int M, N, K;
  int x_pad, y_pad;  // row stride = K + x_pad, N + y_pad
};

std::string describe(const Shape& s, uint64_t seed) {
  std::ostringstream os;
  os << "gemm seed " << seed << " M " << s.M << " N " << s.N << " K " << s.K << " x_stride "
     << s.K + s.x_pad << " y_stride " << s.N + s.y_pad;
  return os.str();
}

double bf16_ulp(double v) {  // spacing of bf16 at |v| (8 significant bits), v finite
  if (v == 0.0) return 0x1p-133;
  int e = 0;
  std::frexp(std::fabs(v), &e);
  return std::ldexp(1.0, std::max(e - 8, -133));
}

// Odd and aligned sizes, 1 to 64 rows, padded strides, K up to the 4096 of a real layer.
const Shape kShapes[] = {
    {1, 17, 24, 0, 0},     {2, 64, 64, 0, 0},      {7, 96, 200, 8, 0},
    {16, 257, 136, 0, 3},  {33, 128, 4096, 0, 0},  {64, 5, 37, 3, 1},
    {64, 1000, 512, 0, 0}, {3, 4096, 1024, 16, 8}, {13, 33, 1, 0, 0},
};

struct GemmData {
  std::vector<bf16> x, w, y0;
  int64_t x_stride, y_stride;
};

GemmData make_data(const Shape& s, uint64_t seed) {
  test::Gen gen(seed);
  GemmData d;
  d.x_stride = s.K + s.x_pad;
  d.y_stride = s.N + s.y_pad;
  d.x = gen.bf16s(static_cast<size_t>(s.M) * d.x_stride, -2.0f, 2.0f);
  d.w = gen.bf16s(static_cast<size_t>(s.N) * s.K, -1.0f, 1.0f);
  d.y0 = gen.bf16s(static_cast<size_t>(s.M) * d.y_stride, 50.0f, 60.0f);  // padding marker
  return d;
}

std::vector<bf16> run_gpu(GemmRunner& runner, const Shape& s, const GemmData& d,
                          cudaStream_t stream) {
  DeviceBuffer<bf16> x(d.x, stream), w(d.w, stream), y(d.y0, stream);
  runner.run(x.data(), d.x_stride, w.data(), s.M, s.N, s.K, y.data(), d.y_stride, stream);
  return y.download(stream);
}

// Budget: |gpu - cpu| <= 1 bf16 ulp of the expected value + K * 2^-22 * sum_k |x_k w_k|.
// Products of two bf16 are exact in fp32, so the two sides differ only in how they
// sum K fp32 terms: any summation order is within K * 2^-24 * sum|terms| of the exact
// sum (K * 2^-23 for tensor-core accumulation that truncates), so the two fp32 results
// are within K * (2^-24 + 2^-23) * sum|terms| < K * 2^-22 * sum|terms| of each other;
// rounding each to bf16 adds at most 1 bf16 ulp where they straddle a rounding
// boundary. Where the sum does not cancel this is a few bf16 ulps at most.
::testing::AssertionResult within_budget(const Shape& s, const GemmData& d,
                                         const std::vector<bf16>& found,
                                         const std::vector<bf16>& expected, size_t* exact,
                                         double* worst_ulps) {
  std::ostringstream os;
  size_t bad = 0;
  for (int m = 0; m < s.M; ++m)
    for (int64_t n = 0; n < d.y_stride; ++n) {
      const size_t i = static_cast<size_t>(m) * d.y_stride + n;
      if (n >= s.N) {  // padding columns: untouched
        if (found[i].bits != d.y0[i].bits && ++bad <= 8)
          os << "\n  padding (row " << m << ", col " << n
             << ") overwritten: " << test::hex_bits(found[i].bits, 2) << ", was "
             << test::hex_bits(d.y0[i].bits, 2);
        continue;
      }
      double abs_sum = 0.0;
      for (int k = 0; k < s.K; ++k)
        abs_sum +=
            std::fabs(static_cast<double>(to_f32(d.x[static_cast<size_t>(m) * d.x_stride + k])) *
                      to_f32(d.w[static_cast<size_t>(n) * s.K + k]));
      const double e = to_f32(expected[i]), f = to_f32(found[i]);
      const double allowed = bf16_ulp(e) + s.K * 0x1p-22 * abs_sum;
      const double diff = std::fabs(f - e);
      *exact += found[i].bits == expected[i].bits;
      *worst_ulps = std::max(*worst_ulps, diff / bf16_ulp(e));
      if (!(diff <= allowed) && ++bad <= 8)
        os << "\n  index " << i << " (row " << m << ", col " << n << "): found "
           << test::hex_bits(found[i].bits, 2) << " (" << f << "), expected "
           << test::hex_bits(expected[i].bits, 2) << " (" << e << "), |diff| " << diff
           << " > allowed " << allowed;
    }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " outputs out of budget:" << os.str();
}

TEST(CudaGemm, MatchesCpuWithinBudget) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  GemmRunner runner;
  uint64_t seed = 0x5D1000;
  size_t total = 0, exact = 0;
  double worst = 0.0;
  for (const Shape& s : kShapes) {
    ++seed;
    SCOPED_TRACE(describe(s, seed));
    const GemmData d = make_data(s, seed);
    std::vector<bf16> expected = d.y0;
    cpu::gemm(d.x.data(), d.x_stride, d.w.data(), s.M, s.N, s.K, expected.data(), d.y_stride);
    const std::vector<bf16> found = run_gpu(runner, s, d, stream.get());
    total += static_cast<size_t>(s.M) * s.N;
    EXPECT_TRUE(within_budget(s, d, found, expected, &exact, &worst));
  }
  std::printf("[gemm] %zu outputs, %zu bit-exact vs cpu::gemm, worst %.3g bf16 ulps\n", total,
              exact, worst);
}

// The same call twice gives the same bits and reuses the shape's pinned plan; a
// graph captured from the call replays those bits, launch after launch.
TEST(CudaGemm, SameCallAndItsGraphGiveSameBits) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  GemmRunner runner;
  uint64_t seed = 0x5D1100;
  for (const Shape& s : kShapes) {
    ++seed;
    SCOPED_TRACE(describe(s, seed));
    const GemmData d = make_data(s, seed);
    DeviceBuffer<bf16> x(d.x, stream.get()), w(d.w, stream.get()), y(d.y0, stream.get());
    auto call = [&](cudaStream_t st) {
      runner.run(x.data(), d.x_stride, w.data(), s.M, s.N, s.K, y.data(), d.y_stride, st);
    };
    call(stream.get());  // pins the shape's algorithm
    const std::vector<bf16> first = y.download(stream.get());
    const size_t pinned = runner.pinned_shapes();
    y.upload(d.y0, stream.get());
    call(stream.get());
    EXPECT_EQ(runner.pinned_shapes(), pinned) << "the second call of a shape must reuse its plan";
    EXPECT_TRUE(test::same_bits(y.download(stream.get()), first, {d.y_stride}))
        << "second call vs first";
    y.upload(d.y0, stream.get());
    const cuda::GraphExec graph(stream.get(), call);
    for (int launch = 0; launch < 2; ++launch) {
      graph.launch(stream.get());
      EXPECT_TRUE(test::same_bits(y.download(stream.get()), first, {d.y_stride}))
          << "graph launch " << launch << " vs eager";
      y.upload(d.y0, stream.get());
    }
  }
}

// Batch invariance: a row's bits do not depend on how many rows share the call
// (every M of a GEMM family runs the family's one algorithm).
TEST(CudaGemm, RowBitsDoNotDependOnTheRowCount) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  GemmRunner runner;
  const uint64_t seed = 0xBA7C4;
  test::Gen gen(seed);
  for (const auto& nk :
       {std::pair<int, int>{1000, 64}, {4096, 4096}, {151936, 256}, {2560, 2048}}) {
    const int N = nk.first, K = nk.second, max_m = 64;
    SCOPED_TRACE("seed " + std::to_string(seed) + " N " + std::to_string(N) + " K " +
                 std::to_string(K));
    const std::vector<bf16> hx = gen.bf16s(static_cast<size_t>(max_m) * K, -2.0f, 2.0f);
    const std::vector<bf16> hw = gen.bf16s(static_cast<size_t>(N) * K, -0.1f, 0.1f);
    DeviceBuffer<bf16> x(hx, stream.get()), w(hw, stream.get());
    DeviceBuffer<bf16> y(static_cast<size_t>(max_m) * N);
    runner.run(x.data(), K, w.data(), max_m, N, K, y.data(), N, stream.get());
    const std::vector<bf16> full = y.download(stream.get());
    for (int m : {1, 2, 3, 7, 8, 13, 32, 56, 63}) {
      runner.run(x.data(), K, w.data(), m, N, K, y.data(), N, stream.get());
      const std::vector<bf16> part = y.download(stream.get());
      EXPECT_TRUE(test::same_bits(part.data(), full.data(), static_cast<size_t>(m) * N, {N}))
          << "M " << m << " (expected: the rows of M 64)";
    }
  }
}

TEST(CudaGemm, UnwarmedShapeIsRefusedDuringCapture) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  GemmRunner runner;
  const Shape s{4, 48, 64, 0, 0};
  const GemmData d = make_data(s, 0x5D1300);
  DeviceBuffer<bf16> x(d.x, stream.get()), w(d.w, stream.get()), y(d.y0, stream.get());
  // capture_graph ends the capture and drops the partial graph before rethrowing.
  EXPECT_THROW(cuda::capture_graph(stream.get(),
                                   [&](cudaStream_t st) {
                                     runner.run(x.data(), d.x_stride, w.data(), s.M, s.N, s.K,
                                                y.data(), d.y_stride, st);
                                   }),
               InvalidArgument);
  cudaStreamCaptureStatus status = cudaStreamCaptureStatusActive;
  SD_CUDA_CHECK(cudaStreamIsCapturing(stream.get(), &status));
  EXPECT_EQ(status, cudaStreamCaptureStatusNone);
  EXPECT_EQ(runner.pinned_shapes(), 0u);
}

TEST(CudaGemm, BadArgumentsAreRefused) {
  SD_REQUIRE_GPU();
  GemmRunner runner;
  DeviceBuffer<bf16> buf(64);
  bf16* p = buf.data();
  EXPECT_THROW(runner.run(p, 4, p, -1, 4, 4, p, 4, nullptr), InvalidArgument);
  EXPECT_THROW(runner.run(p, 4, p, 2, 0, 4, p, 4, nullptr), InvalidArgument);
  EXPECT_THROW(runner.run(p, 4, p, 2, 4, 0, p, 4, nullptr), InvalidArgument);
  EXPECT_THROW(runner.run(p, 3, p, 2, 4, 4, p, 4, nullptr), InvalidArgument);  // x_stride < K
  EXPECT_THROW(runner.run(p, 4, p, 2, 4, 4, p, 3, nullptr), InvalidArgument);  // y_stride < N
  EXPECT_THROW(runner.run(nullptr, 4, p, 2, 4, 4, p, 4, nullptr), InvalidArgument);
  EXPECT_NO_THROW(runner.run(nullptr, 4, nullptr, 0, 4, 4, nullptr, 4, nullptr));  // M == 0
  EXPECT_EQ(runner.pinned_shapes(), 0u);
}

}  // namespace
}  // namespace sparkdraft
