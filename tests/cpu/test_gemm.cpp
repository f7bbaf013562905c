// cpu::gemm (ops/gemm.h) against an independent reference, bit for bit: every
// output is bf16 of core/mma.h's mma_chain per canonical K slice, the slices
// added by the tree written out literally. Odd shapes (M 1..9, N 1..33, K with
// and without a partial last step), padded strides (the padding must stay
// untouched), NaN / inf / -0 / subnormal entries, k_slices 1, 2, 4, 8, thread
// counts; canonical_k_slices; the refusals. The seed is in every failure.
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "common/bits.h"
#include "common/random.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/mma.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/error.h"
#include "sparkdraft/ops/gemm.h"

namespace sparkdraft {
namespace {

struct Problem {
  int M, N, K;
  int64_t x_stride, y_stride;
  std::vector<bf16> x, w, y0;  // y0: the initial y (its padding must survive)
};

// Normal values with, per matrix, a few special entries: NaN, +-inf, -0, +0 and
// subnormals (also whole rows of tiny values, where every term is subnormal).
void sprinkle(test::Gen& gen, std::vector<bf16>& v) {
  const uint16_t specials[] = {0x7fc0, 0xffc1, 0x7f80, 0xff80, 0x8000, 0x0000,
                               0x0001, 0x807f, 0x0040, 0x8001, 0x0080, 0x7f7f};
  const size_t n = v.size() / 23 + 1;
  for (size_t i = 0; i < n; ++i)
    v[static_cast<size_t>(gen.integer(0, static_cast<int64_t>(v.size()) - 1))] =
        bf16{specials[gen.integer(0, 11)]};
}

Problem make(test::Gen& gen, int M, int N, int K, int x_pad, int y_pad, bool specials) {
  Problem p{M, N, K, K + x_pad, N + y_pad, {}, {}, {}};
  p.x = gen.bf16s(static_cast<size_t>(M) * p.x_stride, -2.0f, 2.0f);
  p.w = gen.bf16s(static_cast<size_t>(N) * K, -1.0f, 1.0f);
  if (specials) {
    sprinkle(gen, p.x);
    sprinkle(gen, p.w);
    // One w row of tiny values (subnormal products only).
    for (int k = 0; k < K; ++k)
      p.w[static_cast<size_t>(N - 1) * K + k] = bf16{static_cast<uint16_t>(gen.integer(0, 0x807f))};
  }
  // NaN in x's row padding: the product must never read past K.
  for (int m = 0; m < M; ++m)
    for (int64_t k = K; k < p.x_stride; ++k) p.x[m * p.x_stride + k] = bf16{0x7fc0};
  p.y0 = gen.bf16s(static_cast<size_t>(M) * p.y_stride, 50.0f, 60.0f);
  return p;
}

// The reference: bf16 of the slice chains added by the literal tree of contract.md section 6.
std::vector<bf16> reference(const Problem& p, int S) {
  std::vector<bf16> y = p.y0;
  const int len = p.K / S;
  for (int m = 0; m < p.M; ++m)
    for (int n = 0; n < p.N; ++n) {
      float q[8] = {};
      for (int s = 0; s < S; ++s)
        q[s] = mma_chain(p.x.data() + m * p.x_stride + s * len,
                         p.w.data() + static_cast<int64_t>(n) * p.K + s * len, len);
      float sum = q[0];
      if (S == 2) sum = q[0] + q[1];
      if (S == 4) sum = (q[0] + q[1]) + (q[2] + q[3]);
      if (S == 8) sum = ((q[0] + q[1]) + (q[2] + q[3])) + ((q[4] + q[5]) + (q[6] + q[7]));
      y[m * p.y_stride + n] = to_bf16(sum);
    }
  return y;
}

::testing::AssertionResult run_and_compare(const Problem& p, int S, int threads) {
  std::vector<bf16> y = p.y0;
  cpu::gemm(
      ops::gemm_of(p.x.data(), p.x_stride, p.w.data(), p.M, p.N, p.K, y.data(), p.y_stride, S),
      threads);
  return test::same_bits(y, reference(p, S), {p.y_stride});
}

std::string what(const Problem& p, int S, int threads, uint64_t seed) {
  return "seed " + std::to_string(seed) + " M " + std::to_string(p.M) + " N " +
         std::to_string(p.N) + " K " + std::to_string(p.K) + " x_stride " +
         std::to_string(p.x_stride) + " y_stride " + std::to_string(p.y_stride) + " k_slices " +
         std::to_string(S) + " threads " + std::to_string(threads);
}

TEST(CpuGemm, OddShapesEqualTheChainBitForBit) {
  const uint64_t seed = 0x6E11A;
  test::Gen gen(seed);
  for (int K : {1, 15, 16, 17, 100, 128, 130})
    for (int M = 1; M <= 9; ++M)
      for (int N : {1, 2, 7, 8, 15, 16, 17, 31, 33}) {
        const bool specials = (M + N) % 3 == 0;
        const Problem p = make(gen, M, N, K, M % 3, N % 2 ? 3 : 0, specials);
        const int threads = 1 + (M + N) % 3;
        EXPECT_TRUE(run_and_compare(p, 1, threads)) << what(p, 1, threads, seed);
      }
}

TEST(CpuGemm, CanonicalSlicesEqualTheLiteralTree) {
  const uint64_t seed = 0x511CE;
  test::Gen gen(seed);
  for (int K : {16, 32, 64, 128, 256, 384, 1024})
    for (int S : {1, 2, 4, 8}) {
      if (K % (16 * S) != 0) continue;
      for (const auto& mn : {std::pair<int, int>{1, 1}, {3, 17}, {7, 33}, {9, 8}}) {
        const Problem p = make(gen, mn.first, mn.second, K, 5, 1, (K / 16 + S) % 2 == 0);
        for (int threads : {1, 3})
          EXPECT_TRUE(run_and_compare(p, S, threads)) << what(p, S, threads, seed);
      }
    }
}

// gemm with an fp32 output on a TP rank's K columns (slices [s0, s0 + n) of 8, w's rows of
// the full K) is the fp32 subtree of the literal 8-slice tree, unrounded; the
// subtrees of the ranks, added by the tree over ranks, are the whole tree.
TEST(CpuGemm, SlicesF32OfASliceRangeIsItsSubtreeOfTheTree) {
  const uint64_t seed = 0x5B7EE;
  test::Gen gen(seed);
  const int M = 5, N = 19, K = 8 * 48, len = K / 8;
  const Problem p = make(gen, M, N, K, 3, 0, true);
  std::vector<float> q(static_cast<size_t>(M) * N * 8);  // [m][n][slice]
  for (int m = 0; m < M; ++m)
    for (int n = 0; n < N; ++n)
      for (int s = 0; s < 8; ++s)
        q[(static_cast<size_t>(m) * N + n) * 8 + s] =
            mma_chain(p.x.data() + m * p.x_stride + s * len,
                      p.w.data() + static_cast<int64_t>(n) * K + s * len, len);
  for (int t : {1, 2, 4, 8}) {
    std::vector<std::vector<float>> sub(t);
    for (int r = 0; r < t; ++r) {
      const int s0 = 8 * r / t, n_slices = 8 / t;
      sub[r].assign(static_cast<size_t>(M) * (N + 2), -7.0f);  // out_stride N + 2
      cpu::gemm(ops::gemm_f32_of(p.x.data() + s0 * len, p.x_stride, p.w.data() + s0 * len, K, M, N,
                                 n_slices * len, sub[r].data(), N + 2, n_slices),
                1 + r % 2);
      std::vector<float> expected = sub[r];
      for (int m = 0; m < M; ++m)
        for (int n = 0; n < N; ++n) {
          const float* v = &q[(static_cast<size_t>(m) * N + n) * 8 + s0];
          float e = v[0];
          if (n_slices == 2) e = v[0] + v[1];
          if (n_slices == 4) e = (v[0] + v[1]) + (v[2] + v[3]);
          if (n_slices == 8) e = ((v[0] + v[1]) + (v[2] + v[3])) + ((v[4] + v[5]) + (v[6] + v[7]));
          expected[static_cast<size_t>(m) * (N + 2) + n] = e;
        }
      // Any NaN matches any NaN: fp32 adds of two NaNs keep one operand's bits.
      EXPECT_TRUE(test::same_bits(sub[r], expected, {N + 2, true}))
          << "seed " << seed << " tp " << t << " rank " << r;
    }
    // The tree over ranks of the subtrees, rounded: gemm with 8 slices.
    std::vector<bf16> whole = p.y0, y(static_cast<size_t>(M) * p.y_stride);
    cpu::gemm(
        ops::gemm_of(p.x.data(), p.x_stride, p.w.data(), M, N, K, whole.data(), p.y_stride, 8));
    for (int m = 0; m < M; ++m)
      for (int n = 0; n < N; ++n) {
        float r4[8] = {};
        for (int r = 0; r < t; ++r) r4[r] = sub[r][static_cast<size_t>(m) * (N + 2) + n];
        float e = r4[0];
        if (t == 2) e = r4[0] + r4[1];
        if (t == 4) e = (r4[0] + r4[1]) + (r4[2] + r4[3]);
        if (t == 8) e = ((r4[0] + r4[1]) + (r4[2] + r4[3])) + ((r4[4] + r4[5]) + (r4[6] + r4[7]));
        EXPECT_EQ(to_bf16(e).bits, whole[m * p.y_stride + n].bits)
            << "seed " << seed << " tp " << t << " m " << m << " n " << n;
      }
  }
  std::vector<float> out(4);
  EXPECT_THROW(
      cpu::gemm(ops::gemm_f32_of(p.x.data(), K, p.w.data(), K - 1, 1, 1, K, out.data(), 1, 8)),
      InvalidArgument);  // w_stride < K
}

// The slices are not a no-op: on the same data S = 8 and S = 1 differ somewhere
// (one chain over K truncates differently from 8 chains and a tree).
TEST(CpuGemm, SlicesChangeTheBits) {
  const uint64_t seed = 0xD1FF;
  test::Gen gen(seed);
  const Problem p = make(gen, 4, 64, 1024, 0, 0, false);
  std::vector<bf16> y1 = p.y0, y8 = p.y0;
  cpu::gemm(
      ops::gemm_of(p.x.data(), p.x_stride, p.w.data(), p.M, p.N, p.K, y1.data(), p.y_stride, 1));
  cpu::gemm(
      ops::gemm_of(p.x.data(), p.x_stride, p.w.data(), p.M, p.N, p.K, y8.data(), p.y_stride, 8));
  int differ = 0;
  for (size_t i = 0; i < y1.size(); ++i) differ += y1[i].bits != y8[i].bits;
  EXPECT_GT(differ, 0) << "seed " << seed;
}

TEST(CpuGemm, SpecialValuesFollowTheInstruction) {
  // x row 0: a NaN; row 1: +inf against positive w; row 2: +inf against a zero w;
  // row 3: all -0 (the chain starts at +0 and a zero sum is +0).
  const int M = 4, N = 2, K = 20;
  std::vector<bf16> x(static_cast<size_t>(M) * K, to_bf16(0.5f)), w(static_cast<size_t>(N) * K);
  for (int k = 0; k < K; ++k) {
    w[k] = to_bf16(1.0f);
    w[K + k] = to_bf16(-1.0f);
  }
  x[3] = bf16{0x7fc0};
  x[K + 18] = bf16{0x7f80};
  w[19] = bf16{0x0000};
  x[2 * K + 19] = bf16{0x7f80};
  for (int k = 0; k < K; ++k) x[3 * K + k] = bf16{0x8000};
  std::vector<bf16> y(static_cast<size_t>(M) * N);
  cpu::gemm(ops::gemm_of(x.data(), K, w.data(), M, N, K, y.data(), N, 1));
  EXPECT_EQ(y[0].bits, kBf16CanonicalNan);
  EXPECT_EQ(y[1].bits, kBf16CanonicalNan);
  EXPECT_EQ(y[2].bits, 0x7f80);             // +inf * 1
  EXPECT_EQ(y[3].bits, 0xff80);             // +inf * -1
  EXPECT_EQ(y[4].bits, kBf16CanonicalNan);  // inf * 0 in w row 0
  EXPECT_EQ(y[5].bits, 0xff80);
  EXPECT_EQ(y[6].bits, 0x0000);  // -0 * 1 summed from +0: +0
  EXPECT_EQ(y[7].bits, 0x0000);
}

TEST(CpuGemm, CanonicalKSlices) {
  EXPECT_EQ(ops::canonical_k_slices(4096), 8);
  EXPECT_EQ(ops::canonical_k_slices(12288), 8);
  EXPECT_EQ(ops::canonical_k_slices(16384), 8);
  EXPECT_EQ(ops::canonical_k_slices(128), 8);
  EXPECT_EQ(ops::canonical_k_slices(192), 4);
  EXPECT_EQ(ops::canonical_k_slices(64), 4);
  EXPECT_EQ(ops::canonical_k_slices(96), 2);
  EXPECT_EQ(ops::canonical_k_slices(32), 2);
  EXPECT_EQ(ops::canonical_k_slices(48), 1);
  EXPECT_EQ(ops::canonical_k_slices(16), 1);
  EXPECT_EQ(ops::canonical_k_slices(100), 1);
  EXPECT_EQ(ops::canonical_k_slices(1), 1);
  EXPECT_EQ(ops::canonical_k_slices(0), 1);
}

TEST(CpuGemm, BadArgumentsAreRefused) {
  std::vector<bf16> b(4096, to_bf16(1.0f));
  bf16* p = b.data();
  EXPECT_THROW(cpu::gemm(ops::gemm_of(p, 4, p, -1, 4, 4, p, 4, 1)), InvalidArgument);
  EXPECT_THROW(cpu::gemm(ops::gemm_of(p, 4, p, 2, -1, 4, p, 4, 1)), InvalidArgument);
  EXPECT_THROW(cpu::gemm(ops::gemm_of(p, 4, p, 2, 4, 0, p, 4, 1)), InvalidArgument);
  EXPECT_THROW(cpu::gemm(ops::gemm_of(p, 3, p, 2, 4, 4, p, 4, 1)),
               InvalidArgument);  // x_stride < K
  EXPECT_THROW(cpu::gemm(ops::gemm_of(p, 4, p, 2, 4, 4, p, 3, 1)),
               InvalidArgument);  // y_stride < N
  EXPECT_THROW(cpu::gemm(ops::gemm_of(p, 64, p, 2, 4, 64, p, 4, 3)),
               InvalidArgument);  // S not a power of 2
  EXPECT_THROW(cpu::gemm(ops::gemm_of(p, 64, p, 2, 4, 64, p, 4, 16)), InvalidArgument);  // S > 8
  EXPECT_THROW(cpu::gemm(ops::gemm_of(p, 96, p, 2, 4, 96, p, 4, 4)),
               InvalidArgument);  // 96 % 64 != 0
  EXPECT_THROW(cpu::gemm(ops::gemm_of(p, 100, p, 2, 4, 100, p, 4, 2)), InvalidArgument);
  EXPECT_THROW(cpu::gemm(ops::gemm_of(nullptr, 4, p, 2, 4, 4, p, 4, 1)), InvalidArgument);
  EXPECT_NO_THROW(cpu::gemm(ops::gemm_of(nullptr, 4, nullptr, 0, 4, 4, nullptr, 4, 1)));  // M == 0
  EXPECT_NO_THROW(cpu::gemm(ops::gemm_of(nullptr, 4, nullptr, 3, 0, 4, nullptr, 4, 1)));  // N == 0
}

}  // namespace
}  // namespace sparkdraft
