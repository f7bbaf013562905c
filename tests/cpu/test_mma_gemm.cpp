// cpu::mma_gemm_rows and cpu::mma_gemm_packed against the twin's chain (core/mma.h
// mma_chain), bit for bit:
// rows built from every probe family of core/mma_probe.h (special values and
// subnormals included), odd K, one row and many, row padding in the last block of
// 8, strides, thread counts, each kernel this CPU runs. A failure names (m, n),
// the found and the expected bits; the seed is in every failure.
#include <gtest/gtest.h>
#if defined(__x86_64__)
#include <xmmintrin.h>
#endif

#include <algorithm>
#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "common/random.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/mma.h"
#include "sparkdraft/core/mma_probe.h"
#include "sparkdraft/cpu/mma_gemm.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cpu {
namespace {

constexpr int kThreadCounts[] = {1, 2, 3};
constexpr int kKs[] = {1, 7, 15, 16, 17, 33, 100, 256, 300, 512};

// The kernels this CPU runs, with the name a failure prints.
struct Kernel {
  MmaGemmKernel id;
  const char* name;
};
std::vector<Kernel> kernels() {
  std::vector<Kernel> k{{MmaGemmKernel::automatic, "automatic"},
                        {MmaGemmKernel::reference, "reference"}};
  if (mma_gemm_has_avx2()) k.push_back({MmaGemmKernel::avx2, "avx2"});
  if (mma_gemm_has_avx512()) k.push_back({MmaGemmKernel::avx512, "avx512"});
  return k;
}

std::string hex32(uint32_t u) {
  std::ostringstream os;
  os << "0x" << std::hex << u;
  return os.str();
}

// Row-major rows of length `stride` (>= K); the chain reads the first K.
struct Mat {
  int rows = 0;
  int64_t stride = 0;
  std::vector<bf16> v;
  const bf16* row(int r) const { return v.data() + r * stride; }
};

// Runs every kernel and thread count on (w, x, K) and compares each output with
// mma_chain; returns the number of mismatches (the first few are reported).
int check(const Mat& w, const Mat& x, int K, const std::string& what) {
  const int64_t out_stride = w.rows + 3;  // not the row count: the stride is honoured
  std::vector<uint32_t> want(static_cast<size_t>(x.rows) * out_stride, 0xdeadbeefu);
  for (int m = 0; m < x.rows; ++m)
    for (int n = 0; n < w.rows; ++n)
      want[m * out_stride + n] = f32_bits(mma_chain(w.row(n), x.row(m), K));
  int bad = 0;
  // Compares one run's output with want; `form` names the run in a failure.
  auto compare = [&](const std::vector<float>& out, const std::string& form) {
    for (int m = 0; m < x.rows; ++m)
      for (int64_t n = 0; n < out_stride; ++n) {
        const uint32_t got = f32_bits(out[m * out_stride + n]), exp = want[m * out_stride + n];
        if (got != exp && ++bad <= 5)
          ADD_FAILURE() << what << " K " << K << " " << form << ": (m " << m << ", n " << n
                        << ") found " << hex32(got) << " expected " << hex32(exp);
      }
  };
  for (const Kernel& kernel : kernels())
    for (int threads : kThreadCounts) {
      std::vector<float> out(want.size(), bits_f32(0xdeadbeefu));
      mma_gemm_rows_with(kernel.id, w.v.data(), w.stride, w.rows, x.v.data(), x.stride, x.rows, K,
                         out.data(), out_stride, threads);
      compare(out, "kernel " + std::string(kernel.name) + " threads " + std::to_string(threads));
    }
  // The packed form (MmaPacked, one slice, packed on 1 and 3 threads) through every
  // kernel: the same bits.
  for (int pack_threads : {1, 3}) {
    const MmaPacked pw(w.v.data(), w.stride, w.rows, K, 1, pack_threads);
    for (const Kernel& kernel : kernels())
      for (int threads : kThreadCounts) {
        std::vector<float> out(want.size(), bits_f32(0xdeadbeefu));
        mma_gemm_packed_with(kernel.id, pw, 0, x.v.data(), x.stride, x.rows, out.data(), out_stride,
                             threads);
        compare(out, "packed (on " + std::to_string(pack_threads) + " threads), kernel " +
                         std::string(kernel.name) + " threads " + std::to_string(threads));
      }
  }
  return bad;
}

// Rows from the cases of one family: step t of w row n is row (n + 5t) % 16 of
// case t's a, step t of x row m is column (m + 3t) % 8 of case t's b, so each
// chain runs through many cases and carries their c-scale sums from step to step.
void rows_from_family(MmaDist dist, uint64_t seed, int n_rows, int m_rows, int K, Mat& w, Mat& x) {
  const int steps = (K + kMmaK - 1) / kMmaK;
  w = Mat{n_rows, K + 1, std::vector<bf16>(static_cast<size_t>(n_rows) * (K + 1), bf16{0x7fc0})};
  x = Mat{m_rows, K, std::vector<bf16>(static_cast<size_t>(m_rows) * K)};
  MmaCase cs;
  for (int t = 0; t < steps; ++t) {
    make_mma_case(dist, seed, static_cast<uint64_t>(t), cs);
    for (int i = 0; i < kMmaK && t * kMmaK + i < K; ++i) {
      const int k = t * kMmaK + i;
      for (int n = 0; n < n_rows; ++n) w.v[n * w.stride + k] = cs.a[(n + 5 * t) % 16][i];
      for (int m = 0; m < m_rows; ++m) x.v[m * x.stride + k] = cs.b[(m + 3 * t) % 8][i];
    }
  }
}

TEST(CpuMmaGemm, EveryProbeFamilyBitForBit) {
  const uint64_t seed = 20261201;
  SCOPED_TRACE(test::seed_note(seed));
  for (int d = 0; d < kMmaDistCount; ++d) {
    const MmaDist dist = static_cast<MmaDist>(d);
    for (int K : kKs)
      for (uint64_t rep = 0; rep < 2; ++rep) {
        Mat w, x;
        rows_from_family(dist, seed + rep * 1000 + static_cast<uint64_t>(K), 21, 8, K, w, x);
        EXPECT_EQ(check(w, x, K, mma_dist_name(dist)), 0) << mma_dist_name(dist) << " K " << K;
      }
  }
}

// Each w row (and x row) from a family of its own: lanes of one block of 8 mix
// special, subnormal, overflowing and ordinary rows.
TEST(CpuMmaGemm, MixedFamiliesInOneBlock) {
  test::Gen rng(20261202);
  // A random row of a random family's w rows (16) or x rows (8), into dst.
  auto family_row = [&rng](bool w_side, int K, bf16* dst) {
    Mat fw, fx;
    rows_from_family(static_cast<MmaDist>(rng.integer(0, kMmaDistCount - 1)), rng.bits(), 16, 8, K,
                     fw, fx);
    const Mat& from = w_side ? fw : fx;
    const int r = static_cast<int>(rng.integer(0, from.rows - 1));
    std::copy(from.row(r), from.row(r) + K, dst);
  };
  for (int K : kKs)
    for (int rep = 0; rep < 3; ++rep) {
      const int n_rows = 37, m_rows = 5;
      Mat w{n_rows, K, std::vector<bf16>(static_cast<size_t>(n_rows) * K)};
      Mat x{m_rows, K, std::vector<bf16>(static_cast<size_t>(m_rows) * K)};
      for (int n = 0; n < n_rows; ++n) family_row(true, K, &w.v[n * K]);
      for (int m = 0; m < m_rows; ++m) family_row(false, K, &x.v[m * K]);
      EXPECT_EQ(check(w, x, K, "mixed"), 0) << "K " << K;
    }
}

// Ordinary values (the Markov case: N(0, 1) activations, small weights), one row
// and many, every row count modulo 8.
TEST(CpuMmaGemm, NormalRowsOneAndMany) {
  test::Gen rng(20261203);
  for (int K : {7, 33, 256, 300})
    for (int n_rows : {1, 2, 7, 8, 9, 15, 16, 17, 64, 203})
      for (int m_rows : {1, 3, 8}) {
        Mat w{n_rows, K, rng.normal_bf16s(static_cast<size_t>(n_rows) * K, 0.05f)};
        Mat x{m_rows, K, rng.normal_bf16s(static_cast<size_t>(m_rows) * K, 1.0f)};
        EXPECT_EQ(
            check(w, x, K, "normal n " + std::to_string(n_rows) + " m " + std::to_string(m_rows)),
            0);
      }
}

// Random bit patterns (every exponent, finite or not) and each element alone
// inf / NaN / zero / subnormal inside otherwise ordinary rows.
TEST(CpuMmaGemm, RandomBitsAndLoneSpecials) {
  test::Gen rng(20261204);
  for (int K : kKs) {
    const int n_rows = 19, m_rows = 4;
    Mat w{n_rows, K, std::vector<bf16>(static_cast<size_t>(n_rows) * K)};
    Mat x{m_rows, K, std::vector<bf16>(static_cast<size_t>(m_rows) * K)};
    for (auto& v : w.v) v.bits = static_cast<uint16_t>(rng.bits());
    for (auto& v : x.v) v.bits = static_cast<uint16_t>(rng.bits());
    EXPECT_EQ(check(w, x, K, "random bits"), 0) << "K " << K;
    const uint16_t lone[] = {0x7f80, 0xff80, 0x7fc0, 0xff81, 0x0000,
                             0x8000, 0x0001, 0x807f, 0x7f7f, 0xff7f};
    w.v = rng.normal_bf16s(w.v.size(), 0.05f);
    x.v = rng.normal_bf16s(x.v.size(), 1.0f);
    for (uint16_t s : lone) {
      Mat w2 = w, x2 = x;
      w2.v[static_cast<size_t>(rng.integer(0, static_cast<int64_t>(w2.v.size()) - 1))].bits = s;
      x2.v[static_cast<size_t>(rng.integer(0, static_cast<int64_t>(x2.v.size()) - 1))].bits = s;
      EXPECT_EQ(check(w2, x, K, "lone w " + hex32(s)), 0) << "K " << K;
      EXPECT_EQ(check(w, x2, K, "lone x " + hex32(s)), 0) << "K " << K;
    }
  }
}

// The vector kernels against the scalar one on random rows drawn from value
// classes: zeros of both signs, subnormals, the smallest and largest normals,
// ordinary values, inf and NaN, with exponent spreads from one binade to the
// whole range inside a step, long chains (K 4096) whose c outgrows the products,
// and sums that cancel to zero or overflow.
TEST(CpuMmaGemm, VectorKernelsEqualScalarOnValueClasses) {
  const uint64_t seed = 20261203;
  SCOPED_TRACE(test::seed_note(seed));
  test::Gen rng(seed);
  // A bf16 of class c (sign random): 0 zero, 1 subnormal, 2 smallest normals,
  // 3 ordinary (exponent near 0), 4 largest finite, 5 any finite exponent,
  // 6 inf, 7 NaN.
  auto value = [&rng](int c) {
    const uint16_t sign = rng.integer(0, 1) ? 0x8000u : 0u;
    const auto mant = static_cast<uint16_t>(rng.integer(0, 127));
    switch (c) {
      case 0: return bf16{sign};
      case 1: return bf16{static_cast<uint16_t>(sign | std::max<uint16_t>(mant, 1))};
      case 2: return bf16{static_cast<uint16_t>(sign | (rng.integer(1, 3) << 7) | mant)};
      case 3: return bf16{static_cast<uint16_t>(sign | (rng.integer(120, 134) << 7) | mant)};
      case 4: return bf16{static_cast<uint16_t>(sign | (rng.integer(250, 254) << 7) | mant)};
      case 5: return bf16{static_cast<uint16_t>(sign | (rng.integer(1, 254) << 7) | mant)};
      case 6: return bf16{static_cast<uint16_t>(sign | 0x7f80u)};
      default: return bf16{static_cast<uint16_t>(sign | 0x7f80u | std::max<uint16_t>(mant, 1))};
    }
  };
  // Class weights per mix: ordinary rows, wide spreads, rare specials, tiny values.
  const std::vector<std::vector<int>> mixes = {{0, 0, 0, 1, 0, 0, 0, 0}, {2, 1, 1, 10, 1, 2, 0, 0},
                                               {1, 0, 0, 6, 2, 6, 0, 0}, {1, 1, 1, 20, 0, 1, 1, 1},
                                               {3, 5, 5, 0, 0, 0, 0, 0}, {1, 0, 0, 4, 4, 0, 0, 0}};
  auto draw = [&](const std::vector<int>& weights) {
    int total = 0;
    for (int wgt : weights) total += wgt;
    int r = static_cast<int>(rng.integer(0, total - 1));
    for (int c = 0; c < 8; ++c) {
      if (r < weights[static_cast<size_t>(c)]) return value(c);
      r -= weights[static_cast<size_t>(c)];
    }
    return value(3);
  };
  for (size_t mi = 0; mi < mixes.size(); ++mi)
    for (int K : {16, 61, 4096}) {
      const int n_rows = 35, m_rows = 3;
      Mat w{n_rows, K, std::vector<bf16>(static_cast<size_t>(n_rows) * K)};
      Mat x{m_rows, K, std::vector<bf16>(static_cast<size_t>(m_rows) * K)};
      for (auto& v : w.v) v = draw(mixes[mi]);
      for (auto& v : x.v) v = draw(mixes[mi]);
      // Row 0 of w is x's row 0 negated: the chains of (w0, x0) cancel step by step.
      for (int k = 0; k < K; ++k) w.v[k] = bf16{static_cast<uint16_t>(x.v[k].bits ^ 0x8000u)};
      EXPECT_EQ(check(w, x, K, "class mix " + std::to_string(mi)), 0) << "K " << K;
    }
}

#if defined(__x86_64__)
// With MXCSR's flush-to-zero and denormals-are-zero set by someone else, the
// automatic kernel still gives the twin's bits (subnormal results kept), and the
// AVX-512 kernel asked for by name is refused.
TEST(CpuMmaGemm, FlushToZeroModeDoesNotChangeBits) {
  const uint64_t seed = 20261204;
  SCOPED_TRACE(test::seed_note(seed));
  test::Gen rng(seed);
  const int K = 48, n_rows = 20, m_rows = 2;
  Mat w{n_rows, K, std::vector<bf16>(static_cast<size_t>(n_rows) * K)};
  Mat x{m_rows, K, std::vector<bf16>(static_cast<size_t>(m_rows) * K)};
  // Products near 2^-140: fp32 subnormal results.
  for (auto& v : w.v)
    v = bf16{static_cast<uint16_t>((rng.integer(0, 1) ? 0x8000u : 0u) | (60u << 7) |
                                   static_cast<uint16_t>(rng.integer(0, 127)))};
  for (auto& v : x.v)
    v = bf16{static_cast<uint16_t>((rng.integer(0, 1) ? 0x8000u : 0u) | (52u << 7) |
                                   static_cast<uint16_t>(rng.integer(0, 127)))};
  std::vector<uint32_t> want(static_cast<size_t>(m_rows) * n_rows);
  bool subnormal = false;
  for (int m = 0; m < m_rows; ++m)
    for (int n = 0; n < n_rows; ++n) {
      want[m * n_rows + n] = f32_bits(mma_chain(w.row(n), x.row(m), K));
      subnormal = subnormal || ((want[m * n_rows + n] & 0x7f800000u) == 0 &&
                                (want[m * n_rows + n] & 0x7fffffu) != 0);
    }
  ASSERT_TRUE(subnormal) << "the case must produce subnormal results";
  const unsigned int saved = _mm_getcsr();
  _mm_setcsr(saved | 0x8040u);
  std::vector<float> out(want.size());
  mma_gemm_rows(w.v.data(), K, n_rows, x.v.data(), K, m_rows, K, out.data(), n_rows);
  bool refused = false;
  if (mma_gemm_has_avx512()) {
    try {
      std::vector<float> o2(want.size());
      mma_gemm_rows_with(MmaGemmKernel::avx512, w.v.data(), K, n_rows, x.v.data(), K, m_rows, K,
                         o2.data(), n_rows);
    } catch (const InvalidArgument&) {
      refused = true;
    }
  }
  _mm_setcsr(saved);
  for (size_t i = 0; i < want.size(); ++i)
    EXPECT_EQ(hex32(f32_bits(out[i])), hex32(want[i])) << "index " << i;
  if (mma_gemm_has_avx512()) {
    EXPECT_TRUE(refused);
  }
}
#endif

// The places where the AVX-512 kernel's fp64 form differs from a plain
// conversion: chains that overflow to +-inf part-way (sums of products near
// 2^250, the overflow check on E) and go on (inf, inf - inf); chains whose c
// becomes subnormal and then meets products far below it (c sets E at -126) or
// none (c = 0 sets nothing); results that truncate to zero from below (+0); and
// every K modulo 16 (the padded tail step), rows modulo 16.
TEST(CpuMmaGemm, OverflowSubnormalCAndSignedZeroChains) {
  const uint64_t seed = 20261205;
  SCOPED_TRACE(test::seed_note(seed));
  test::Gen rng(seed);
  auto val = [&rng](int field_lo, int field_hi, int zero_in) {
    if (rng.integer(0, zero_in - 1) == 0)
      return bf16{static_cast<uint16_t>(rng.integer(0, 1) << 15)};
    return bf16{static_cast<uint16_t>(
        (rng.integer(0, 1) << 15) | (rng.integer(field_lo, field_hi) << 7) | rng.integer(0, 127))};
  };
  struct Range {
    int lo, hi;
  };
  // Exponent-field ranges of w and x per case: huge (overflow), tiny
  // (subnormal sums), tiny then tinier (c outgrows products), mixed.
  const Range cases[][2] = {{{245, 254}, {245, 254}},
                            {{0, 6}, {0, 6}},
                            {{0, 30}, {100, 127}},
                            {{1, 254}, {1, 254}},
                            {{120, 254}, {0, 134}}};
  for (const auto& c : cases)
    for (int K : {16, 31, 48, 77, 160}) {
      const int n_rows = 33, m_rows = 3;
      Mat w{n_rows, K, std::vector<bf16>(static_cast<size_t>(n_rows) * K)};
      Mat x{m_rows, K, std::vector<bf16>(static_cast<size_t>(m_rows) * K)};
      for (auto& v : w.v) v = val(c[0].lo, c[0].hi, 5);
      for (auto& v : x.v) v = val(c[1].lo, c[1].hi, 5);
      // Row 1: step 0 large, later steps tiny (the chain's c dominates E).
      for (int k = 16; k < K; ++k) w.v[K + k] = val(0, 2, 3);
      EXPECT_EQ(check(w, x, K,
                      "fields w " + std::to_string(c[0].lo) + "-" + std::to_string(c[0].hi) +
                          " x " + std::to_string(c[1].lo) + "-" + std::to_string(c[1].hi)),
                0)
          << "K " << K;
    }
}

// The AVX2 kernel's fp32 form (taken where every lane's alignment exponent E is in
// [-100, 100]) and its edges: rows scaled so that E sweeps across both edges
// (products and c deciding E; subnormal factors with E in range), zeros, cancelling
// rows (w row = -x row), one x row and many, odd N and K, and the automatic kernel.
TEST(CpuMmaGemm, Avx2Fp32FormAndItsRangeEdges) {
  const uint64_t seed = 20261204;
  SCOPED_TRACE(test::seed_note(seed));
  test::Gen rng(seed);
  // A bf16 with exponent field near `field` (+-2), random sign and mantissa; some
  // zeros and subnormals when asked.
  auto near = [&rng](int field, bool extras) {
    const auto sign = static_cast<uint16_t>(rng.integer(0, 1) << 15);
    const auto mant = static_cast<uint16_t>(rng.integer(0, 127));
    if (extras && rng.integer(0, 9) == 0) return bf16{sign};
    if (extras && rng.integer(0, 9) == 0) return bf16{static_cast<uint16_t>(sign | mant)};
    const int f = std::clamp(field + static_cast<int>(rng.integer(-2, 2)), 1, 254);
    return bf16{static_cast<uint16_t>(sign | (f << 7) | mant)};
  };
  // E = field_w + field_x - 254 (+1 or so); the edges -100 and 100 are at field
  // sums 154 and 354.
  for (int sum : {140, 150, 153, 154, 155, 156, 200, 254, 300, 352, 354, 355, 356, 360})
    for (int K : {1, 15, 16, 17, 48, 131})
      for (int m_rows : {1, 7}) {
        const int n_rows = 19;
        const int fw = std::clamp(sum / 2 + static_cast<int>(rng.integer(-20, 20)), 3, 252);
        const int fx = std::clamp(sum - fw, 3, 252);
        const bool extras = rng.integer(0, 1) == 1;
        Mat w{n_rows, K, std::vector<bf16>(static_cast<size_t>(n_rows) * K)};
        Mat x{m_rows, K, std::vector<bf16>(static_cast<size_t>(m_rows) * K)};
        for (auto& v : w.v) v = near(fw, extras);
        for (auto& v : x.v) v = near(fx, extras);
        for (int k = 0; k < K; ++k) w.v[k] = bf16{static_cast<uint16_t>(x.v[k].bits ^ 0x8000u)};
        EXPECT_EQ(check(w, x, K,
                        "field sum " + std::to_string(sum) + " w " + std::to_string(fw) + " x " +
                            std::to_string(fx) + " m " + std::to_string(m_rows)),
                  0);
      }
  // Subnormal w against large x (E in range through a subnormal factor), and a
  // chain whose first step sets a large c that the later, smaller products meet.
  for (int K : {32, 80}) {
    const int n_rows = 17, m_rows = 3;
    Mat w{n_rows, K, std::vector<bf16>(static_cast<size_t>(n_rows) * K)};
    Mat x{m_rows, K, std::vector<bf16>(static_cast<size_t>(m_rows) * K)};
    for (auto& v : w.v)
      v = bf16{static_cast<uint16_t>((rng.integer(0, 1) << 15) | rng.integer(0, 127))};
    for (auto& v : x.v) v = near(static_cast<int>(rng.integer(200, 250)), false);
    EXPECT_EQ(check(w, x, K, "subnormal w"), 0) << "K " << K;
    for (int n = 0; n < n_rows; ++n)
      for (int k = 0; k < 16; ++k)
        w.v[n * K + k] = near(static_cast<int>(rng.integer(120, 250)), true);
    EXPECT_EQ(check(w, x, K, "large first step, subnormal w"), 0) << "K " << K;
  }
  // A first step of products near 2^-140 (c subnormal or +0 afterwards), then
  // ordinary products: c counts at -126 there, below the form's range.
  for (int K : {32, 47}) {
    const int n_rows = 18, m_rows = 2;
    Mat w{n_rows, K, std::vector<bf16>(static_cast<size_t>(n_rows) * K)};
    Mat x{m_rows, K, std::vector<bf16>(static_cast<size_t>(m_rows) * K)};
    for (int n = 0; n < n_rows; ++n)
      for (int k = 0; k < K; ++k) w.v[n * K + k] = near(k < 16 ? 57 : 124, k < 16);
    for (int m = 0; m < m_rows; ++m)
      for (int k = 0; k < K; ++k) x.v[m * K + k] = near(k < 16 ? 57 : 127, false);
    EXPECT_EQ(check(w, x, K, "subnormal c, then ordinary products"), 0) << "K " << K;
  }
}

// The AVX2 kernel reads the rows through copies of 128 values (8 steps), the
// next chunk copied and the one after it prefetched while the current one runs:
// K at and around the chunk edges (a last chunk of one value, of a whole step,
// of a part of one), rows whose stride is past K with NaN there (a copy that
// reads past K, or keeps a stale tail instead of zeros, shows), and the stride
// of 4096 values that puts every row in one L1 set.
TEST(CpuMmaGemm, Avx2RowChunksAtTheirEdges) {
  const uint64_t seed = 20261205;
  SCOPED_TRACE(test::seed_note(seed));
  test::Gen rng(seed);
  for (int K : {1, 16, 112, 127, 128, 129, 143, 144, 255, 256, 257, 383, 385, 641, 2148})
    for (int m_rows : {1, 2, 7}) {
      const int n_rows = 21;
      const int64_t stride = K + 37;
      Mat w{n_rows, stride, std::vector<bf16>(static_cast<size_t>(n_rows) * stride, bf16{0x7fc0})};
      Mat x{m_rows, K, rng.normal_bf16s(static_cast<size_t>(m_rows) * K, 1.0f)};
      for (int n = 0; n < n_rows; ++n) {
        const std::vector<bf16> r = rng.normal_bf16s(static_cast<size_t>(K), 0.05f);
        std::copy(r.begin(), r.end(), w.v.begin() + n * stride);
      }
      EXPECT_EQ(check(w, x, K, "chunk edges m " + std::to_string(m_rows)), 0);
    }
  const int K = 4096, n_rows = 17, m_rows = 3;
  Mat w{n_rows, K, rng.normal_bf16s(static_cast<size_t>(n_rows) * K, 0.05f)};
  Mat x{m_rows, K, rng.normal_bf16s(static_cast<size_t>(m_rows) * K, 1.0f)};
  EXPECT_EQ(check(w, x, K, "stride 4096"), 0);
}

// Sums whose int32 form wraps in the AVX2 kernel's fp32 form: 16 products of
// 1.9921875^2 (significand product 65025, each at E) plus a c of 1.9556 at the
// same exponent, both signs; and the same next to ordinary rows of the block.
TEST(CpuMmaGemm, Avx2Fp32FormSumNearTwoToThe31) {
  for (const bool negative : {false, true})
    for (const int field : {127, 60, 200}) {
      const int K = 32, n_rows = 9, m_rows = 2;
      const auto f = static_cast<uint16_t>(field << 7);
      const uint16_t sign = negative ? 0x8000u : 0u;
      Mat w{n_rows, K, std::vector<bf16>(static_cast<size_t>(n_rows) * K, bf16{0})};
      Mat x{m_rows, K, std::vector<bf16>(static_cast<size_t>(m_rows) * K, bf16{0})};
      for (int n = 0; n < n_rows; ++n) {
        w.v[n * K] = bf16{static_cast<uint16_t>(sign | f | 0x33u)};  // 1.3984375 * 2^(field - 127)
        for (int k = 16; k < K; ++k) w.v[n * K + k] = bf16{static_cast<uint16_t>(sign | f | 0x7fu)};
      }
      for (int k = 16; k < K; k += 3) w.v[3 * K + k] = bf16{0x3c00};  // row 3: other values
      for (int m = 0; m < m_rows; ++m) {
        x.v[m * K] = bf16{static_cast<uint16_t>(0x3f80u | 0x33u)};
        for (int k = 16; k < K; ++k) x.v[m * K + k] = bf16{0x3fffu};
      }
      x.v[K + 20] = bf16{0x3f00};  // row 1: one smaller product
      EXPECT_EQ(check(w, x, K, "sum near 2^31, field " + std::to_string(field)), 0)
          << (negative ? "negative" : "positive");
    }
}

#if defined(__x86_64__)
// The AVX2 kernel sets MXCSR for its fp32 form and puts the caller's back: under
// each rounding mode, with and without flush-to-zero / denormals-are-zero, the
// bits are the twin's and MXCSR (flags included) is unchanged afterwards.
TEST(CpuMmaGemm, Avx2KernelKeepsTheCallersMxcsr) {
  if (!mma_gemm_has_avx2()) GTEST_SKIP() << "no AVX2";
  const uint64_t seed = 20261206;
  SCOPED_TRACE(test::seed_note(seed));
  test::Gen rng(seed);
  const int K = 100, n_rows = 21, m_rows = 3;
  Mat w{n_rows, K, rng.normal_bf16s(static_cast<size_t>(n_rows) * K, 0.05f)};
  Mat x{m_rows, K, rng.normal_bf16s(static_cast<size_t>(m_rows) * K, 1.0f)};
  for (int k = 0; k < K; k += 7) w.v[k] = bf16{static_cast<uint16_t>(rng.integer(1, 127))};
  std::vector<uint32_t> want(static_cast<size_t>(m_rows) * n_rows);
  for (int m = 0; m < m_rows; ++m)
    for (int n = 0; n < n_rows; ++n)
      want[m * n_rows + n] = f32_bits(mma_chain(w.row(n), x.row(m), K));
  const unsigned int saved = _mm_getcsr();
  for (const unsigned int mode : {0x1f80u, 0x3f80u, 0x5f80u, 0x7f80u, 0x9fc0u, 0x1f81u}) {
    _mm_setcsr(mode);
    std::vector<float> out(want.size());
    mma_gemm_rows_with(MmaGemmKernel::avx2, w.v.data(), K, n_rows, x.v.data(), K, m_rows, K,
                       out.data(), n_rows);
    const unsigned int after = _mm_getcsr();
    _mm_setcsr(saved);
    EXPECT_EQ(hex32(after), hex32(mode));
    for (size_t i = 0; i < want.size(); ++i)
      EXPECT_EQ(hex32(f32_bits(out[i])), hex32(want[i]))
          << "MXCSR " << hex32(mode) << " index " << i;
  }
}
#endif

// A weight packed in S canonical slices: slice s's outputs are the chains of that
// slice alone (each slice padded to whole steps on its own), at slice lengths that
// are and are not whole steps, with specials in some rows.
TEST(CpuMmaGemm, PackedSlicesAreTheSliceChains) {
  const uint64_t seed = 20261206;
  SCOPED_TRACE(test::seed_note(seed));
  test::Gen rng(seed);
  const bf16 specials[] = {bf16{0x7f80}, bf16{0xff80}, bf16{0x7fc0}, bf16{0x0001}, bf16{0x8000}};
  for (int S : {1, 2, 4, 8})
    for (int len : {1, 7, 16, 33, 128, 300}) {
      const int K = S * len, n_rows = 35, m_rows = 3;
      const int64_t stride = K + 5;
      Mat w{n_rows, stride, std::vector<bf16>(static_cast<size_t>(n_rows) * stride, bf16{0x7fc0})};
      Mat x{m_rows, K, rng.normal_bf16s(static_cast<size_t>(m_rows) * K, 1.0f)};
      for (int n = 0; n < n_rows; ++n) {
        const std::vector<bf16> r = rng.normal_bf16s(static_cast<size_t>(K), 0.05f);
        std::copy(r.begin(), r.end(), w.v.begin() + n * stride);
      }
      for (int i = 0; i < 4; ++i)
        w.v[rng.integer(0, n_rows - 1) * stride + rng.integer(0, K - 1)] =
            specials[rng.integer(0, 4)];
      const MmaPacked pw(w.v.data(), w.stride, n_rows, K, S, 2);
      ASSERT_EQ(pw.slice_len(), len);
      for (int sl = 0; sl < S; ++sl)
        for (const Kernel& kernel : kernels()) {
          std::vector<float> out(static_cast<size_t>(m_rows) * n_rows);
          mma_gemm_packed_with(kernel.id, pw, sl, x.v.data() + sl * len, x.stride, m_rows,
                               out.data(), n_rows, 2);
          int bad = 0;
          for (int m = 0; m < m_rows; ++m)
            for (int n = 0; n < n_rows; ++n) {
              const uint32_t got = f32_bits(out[m * n_rows + n]);
              const uint32_t exp =
                  f32_bits(mma_chain(w.row(n) + sl * len, x.row(m) + sl * len, len));
              if (got != exp && ++bad <= 3)
                ADD_FAILURE() << "S " << S << " len " << len << " slice " << sl << " kernel "
                              << kernel.name << ": (m " << m << ", n " << n << ") found "
                              << hex32(got) << " expected " << hex32(exp);
            }
        }
    }
}

// MmaPackedSet finds a weight by every part of its key, and counts lookups that miss.
TEST(CpuMmaGemm, PackedSetFindsByTheWholeKey) {
  test::Gen rng(20261207);
  const std::vector<bf16> w = rng.normal_bf16s(64 * 40, 0.05f);
  MmaPackedSet set;
  set.add(w.data(), 40, 64, 32, 2);
  set.add(w.data(), 40, 64, 32, 2);  // already there
  set.add(w.data(), 40, 64, 40, 1);  // the same pointer, another key
  EXPECT_EQ(set.size(), 2u);
  EXPECT_EQ(set.bytes(), (4 * 2 * 1 + 4 * 1 * 3) * 256 * 2);  // blocks x slices x steps
  ASSERT_NE(set.find(w.data(), 40, 64, 32, 2), nullptr);
  EXPECT_EQ(set.find(w.data(), 40, 64, 32, 2)->slices(), 2);
  EXPECT_EQ(set.find(w.data(), 40, 64, 40, 1)->K(), 40);
  EXPECT_EQ(set.find(w.data(), 41, 64, 32, 2), nullptr);
  EXPECT_EQ(set.find(w.data(), 40, 63, 32, 2), nullptr);
  EXPECT_EQ(set.find(w.data(), 40, 64, 32, 4), nullptr);
  EXPECT_EQ(set.find(w.data() + 1, 40, 64, 32, 2), nullptr);
  EXPECT_EQ(set.misses(), 0);
  EXPECT_EQ(set.lookup(w.data(), 40, 64, 32, 1), nullptr);
  EXPECT_NE(set.lookup(w.data(), 40, 64, 32, 2), nullptr);
  EXPECT_EQ(set.misses(), 1);
}

TEST(CpuMmaGemm, RejectsBadShapes) {
  const bf16 one{0x3f80};
  float out = 0.0f;
  EXPECT_THROW(mma_gemm_rows(&one, 1, 1, &one, 1, 1, 0, &out, 1), InvalidArgument);
  EXPECT_THROW(mma_gemm_rows(&one, 1, -1, &one, 1, 1, 1, &out, 1), InvalidArgument);
  mma_gemm_rows(&one, 1, 0, &one, 1, 1, 1, &out, 1);  // nothing to do
  mma_gemm_rows(&one, 1, 1, &one, 1, 1, 1, &out, 1);
  EXPECT_EQ(f32_bits(out), 0x3f800000u);
  const bf16 w[6] = {one, one, one, one, one, one};
  EXPECT_THROW(MmaPacked(w, 3, 2, 3, 2), InvalidArgument);  // K not a multiple of the slices
  EXPECT_THROW(MmaPacked(w, 3, 0, 3), InvalidArgument);
  EXPECT_THROW(MmaPacked(w, 2, 2, 3), InvalidArgument);  // stride below K
  EXPECT_THROW(MmaPacked(nullptr, 3, 2, 3), InvalidArgument);
  const MmaPacked pw(w, 3, 2, 3);
  EXPECT_THROW(mma_gemm_packed(pw, 1, w, 3, 1, &out, 2), InvalidArgument);
  EXPECT_THROW(mma_gemm_packed(pw, -1, w, 3, 1, &out, 2), InvalidArgument);
  float two[2] = {0.0f, 0.0f};
  mma_gemm_packed(pw, 0, w, 3, 1, two, 2);
  EXPECT_EQ(f32_bits(two[0]), 0x40400000u);  // 3
  EXPECT_EQ(f32_bits(two[1]), 0x40400000u);
}

}  // namespace
}  // namespace sparkdraft::cpu
