// Every CPU reference op (cpu/ops.h) against a naive version written here,
// straight from the formula in the header comment: loops over the documented
// order (the canonical reduction as 32 literal lane arrays), bit for bit
// wherever the contract is exact, and attention also against a double-precision
// reference within a stated bf16-ulp budget (gemm: tests/cpu/test_gemm.cpp). Shapes are
// small and odd, inputs seeded (the seed is in every failure message), with
// special rows (NaN, +-inf, ties, all equal, padding), and every threaded op
// is run with 1, 2 and 3 threads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/bits.h"
#include "common/random.h"
#include "core/canonical_order.h"
#include "core/mma_model.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/core/sampling.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cpu {
namespace {

using test::same_bits;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();
constexpr int kThreadCounts[] = {1, 2, 3};
constexpr NormGain kGains[] = {NormGain::weight, NormGain::one_plus_weight, NormGain::none};

// ---- naive references -------------------------------------------------------------

// core/reduce.h order written out (core/canonical_order.h: 32 literal lane
// accumulators, element i in lane (i / 8) % 32, one fmaf per term in increasing
// i, then the butterfly).
using test::canonical_order_dot;

// One RMSNorm row from the header formula.
std::vector<bf16> naive_rms(const std::vector<float>& x, const bf16* w, NormGain gain, float eps) {
  const float ss = canonical_order_dot(x, x);
  const float mean = ss / static_cast<float>(x.size());
  const float r = 1.0f / std::sqrt(mean + eps);
  std::vector<bf16> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const float xr = x[i] * r;
    float v = xr;
    if (gain == NormGain::weight) v = xr * to_f32(w[i]);
    if (gain == NormGain::one_plus_weight) v = xr * (1.0f + to_f32(w[i]));
    y[i] = to_bf16(v);
  }
  return y;
}

std::vector<float> widen(const bf16* x, size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = to_f32(x[i]);
  return v;
}

// ---- RMSNorm ----------------------------------------------------------------------

// Puts the special rows into a [rows, stride] matrix: row 1 has a NaN, row 2 a
// +inf and a -inf, row 3 is all equal, row 4 is zero (ss = 0, r = 1/sqrt(eps)).
template <class T>
void add_special_rows(std::vector<T>& x, int rows, int n, int64_t stride, T (*make)(float)) {
  if (rows > 1) x[static_cast<size_t>(stride + n / 2)] = make(kNaN);
  if (rows > 2) {
    x[static_cast<size_t>(2 * stride)] = make(kInf);
    x[static_cast<size_t>(2 * stride + n - 1)] = make(-kInf);
  }
  if (rows > 3)
    for (int i = 0; i < n; ++i) x[static_cast<size_t>(3 * stride + i)] = make(-1.375f);
  if (rows > 4)
    for (int i = 0; i < n; ++i) x[static_cast<size_t>(4 * stride + i)] = make(0.0f);
}

bf16 make_bf16(float v) { return to_bf16(v); }
float make_f32(float v) { return v; }

TEST(CpuOpsRmsNorm, Bf16InputMatchesNaiveBitForBit) {
  const uint64_t seed = 1001;
  test::Gen rng(seed);  // names the seed in any failure
  const float eps = 1e-6f;
  for (int rows : {1, 3, 5}) {
    for (int n : {1, 7, 9, 33, 100, 130, 300}) {
      const int64_t xs = n + 3, ys = n + 5;
      std::vector<bf16> x = rng.bf16s(static_cast<size_t>(rows * xs), -4.0f, 4.0f);
      add_special_rows(x, rows, n, xs, make_bf16);
      const std::vector<bf16> w = rng.bf16s(static_cast<size_t>(n), -1.5f, 1.5f);
      for (NormGain gain : kGains) {
        SCOPED_TRACE("rows " + std::to_string(rows) + " n " + std::to_string(n) + " gain " +
                     std::to_string(static_cast<int>(gain)));
        std::vector<bf16> want(static_cast<size_t>(rows * ys), bf16{0x7e7e});
        for (int r = 0; r < rows; ++r) {
          const auto y = naive_rms(widen(&x[static_cast<size_t>(r * xs)], static_cast<size_t>(n)),
                                   w.data(), gain, eps);
          std::copy(y.begin(), y.end(), want.begin() + r * ys);
        }
        for (int threads : kThreadCounts) {
          std::vector<bf16> y(static_cast<size_t>(rows * ys), bf16{0x7e7e});
          rms_norm(
              ops::rms_norm_of(x.data(), xs, rows, n, gain == NormGain::none ? nullptr : w.data(),
                               gain, eps, y.data(), ys),
              threads);
          EXPECT_TRUE(same_bits(y, want)) << "threads " << threads;
        }
        // In place (y == x, same stride): the rows only, padding columns untouched.
        std::vector<bf16> inplace = x;
        rms_norm(
            ops::rms_norm_of(inplace.data(), xs, rows, n, w.data(), gain, eps, inplace.data(), xs),
            2);
        for (int r = 0; r < rows; ++r)
          for (int i = 0; i < xs; ++i) {
            const size_t at = static_cast<size_t>(r * xs + i);
            const uint16_t expect = i < n ? want[static_cast<size_t>(r * ys + i)].bits : x[at].bits;
            ASSERT_EQ(inplace[at].bits, expect) << "in place, row " << r << " col " << i;
          }
      }
    }
  }
}

TEST(CpuOpsRmsNorm, F32InputMatchesNaiveBitForBit) {
  const uint64_t seed = 1002;
  test::Gen rng(seed);  // names the seed in any failure
  const float eps = 1e-5f;
  for (int rows : {1, 3, 5}) {
    for (int n : {1, 7, 9, 33, 100, 130, 300}) {
      const int64_t xs = n + 1, ys = n;
      std::vector<float> x =
          rng.floats(static_cast<size_t>(rows * xs), -8.0f, 8.0f);  // full fp32 mantissas
      add_special_rows(x, rows, n, xs, make_f32);
      const std::vector<bf16> w = rng.bf16s(static_cast<size_t>(n), -1.5f, 1.5f);
      for (NormGain gain : kGains) {
        SCOPED_TRACE("rows " + std::to_string(rows) + " n " + std::to_string(n) + " gain " +
                     std::to_string(static_cast<int>(gain)));
        std::vector<bf16> want;
        for (int r = 0; r < rows; ++r) {
          const auto y = naive_rms(std::vector<float>(x.begin() + r * xs, x.begin() + r * xs + n),
                                   w.data(), gain, eps);
          want.insert(want.end(), y.begin(), y.end());
        }
        for (int threads : kThreadCounts) {
          std::vector<bf16> y(static_cast<size_t>(rows * ys));
          rms_norm(ops::rms_norm_of(x.data(), xs, rows, n, w.data(), gain, eps, y.data(), ys),
                   threads);
          EXPECT_TRUE(same_bits(y, want)) << "threads " << threads;
        }
      }
    }
  }
}

TEST(CpuOpsRmsNorm, SpecialRowsBehaveAsIeeeSays) {
  // A NaN poisons its row; an inf gives ss = inf, r = 0: finite entries -> 0,
  // the infinite entry -> inf * 0 = NaN; equal entries give equal outputs.
  const int n = 9;
  std::vector<bf16> x(static_cast<size_t>(3 * n), to_bf16(2.0f));
  x[3] = to_bf16(kNaN);
  x[static_cast<size_t>(n + 4)] = to_bf16(kInf);
  std::vector<bf16> y(x.size());
  rms_norm(ops::rms_norm_of(x.data(), n, 3, n, nullptr, NormGain::none, 1e-6f, y.data(), n));
  for (int i = 0; i < n; ++i) {
    EXPECT_TRUE(bf16_is_nan(y[static_cast<size_t>(i)])) << "NaN row, col " << i;
    if (i == 4) {
      EXPECT_TRUE(bf16_is_nan(y[static_cast<size_t>(n + i)])) << "inf entry";
    } else {
      EXPECT_EQ(y[static_cast<size_t>(n + i)].bits & 0x7fffu, 0u) << "inf row, col " << i;
    }
    EXPECT_EQ(y[static_cast<size_t>(2 * n + i)].bits, y[static_cast<size_t>(2 * n)].bits);
  }
  // 2 * 1/sqrt(4 + 1e-6) rounds to 1.0 in bf16.
  EXPECT_EQ(y[static_cast<size_t>(2 * n)].bits, to_bf16(1.0f).bits);
}

// Gains that put (x_i * r) * g_i within one fp32 ulp of a bf16 rounding
// midpoint (low 16 bits 0x7fff..0x8001) wherever a candidate gain does, so a
// different r (another summation order) or another association of the
// products flips the rounding of those outputs. Random data alone would
// almost never show such a change through the bf16 rounding. Candidates: the
// 128 bf16 significands in [1, 2) for w, w in [0.25, 1) for 1 + w; about one
// element in 200 finds one.
std::vector<bf16> knife_edge_gains(const std::vector<float>& x, float r, NormGain gain,
                                   test::Gen& rng, int& edges) {
  std::vector<bf16> w(x.size());
  const uint16_t first = gain == NormGain::weight ? 0x3f80 : 0x3e80;
  const int count = gain == NormGain::weight ? 128 : 256;
  for (size_t i = 0; i < x.size(); ++i) {
    const float a = x[i] * r;
    w[i] = to_bf16(rng.uniform(0.5f, 2.0f));
    for (int c = 0; c < count; ++c) {
      const bf16 cand{static_cast<uint16_t>(first + c)};
      const float g = gain == NormGain::weight ? to_f32(cand) : 1.0f + to_f32(cand);
      const uint32_t low = f32_bits(a * g) & 0xffffu;
      if (low >= 0x7fffu && low <= 0x8001u) {
        w[i] = cand;
        ++edges;
        break;
      }
    }
  }
  return w;
}

TEST(CpuOpsRmsNorm, KnifeEdgeGainsPinTheOrderOfOperations) {
  const uint64_t seed = 1004;
  test::Gen rng(seed);  // names the seed in any failure
  const float eps = 1e-6f;
  const int rows = 8;
  for (NormGain gain : {NormGain::weight, NormGain::one_plus_weight})
    for (int n : {300, 1000, 2048})
      for (bool f32_input : {false, true}) {
        SCOPED_TRACE("gain " + std::to_string(static_cast<int>(gain)) + " n " + std::to_string(n) +
                     " f32 input " + std::to_string(f32_input));
        int edges = 0;
        for (int row = 0; row < rows; ++row) {
          std::vector<float> x = rng.floats(static_cast<size_t>(n), -3.0f, 3.0f);
          if (!f32_input)
            for (float& v : x) v = round_bf16(v);
          const float r = 1.0f / std::sqrt(canonical_order_dot(x, x) / static_cast<float>(n) + eps);
          const auto w = knife_edge_gains(x, r, gain, rng, edges);
          const auto want = naive_rms(x, w.data(), gain, eps);
          std::vector<bf16> y(static_cast<size_t>(n));
          if (f32_input) {
            rms_norm(ops::rms_norm_of(x.data(), n, 1, n, w.data(), gain, eps, y.data(), n));
          } else {
            std::vector<bf16> xb(static_cast<size_t>(n));
            for (int i = 0; i < n; ++i)
              xb[static_cast<size_t>(i)] = to_bf16(x[static_cast<size_t>(i)]);
            rms_norm(ops::rms_norm_of(xb.data(), n, 1, n, w.data(), gain, eps, y.data(), n));
          }
          EXPECT_TRUE(same_bits(y, want)) << "row " << row;
        }
        EXPECT_GE(edges, rows * n / 400) << "too few knife-edge gains found";
      }
}

// ---- per-head RMSNorm -----------------------------------------------------------------

// Every head of every token is one naive RMSNorm row (weight shared by the heads); the
// columns past heads * head_dim of a token stay as they were. Odd head sizes, padded
// token strides, and heads holding a NaN, +-inf, all zeros or huge values.
TEST(CpuOpsHeadRmsNorm, EveryHeadMatchesNaiveBitForBit) {
  const uint64_t seed = 1501;
  test::Gen rng(seed);  // names the seed in any failure
  const float eps = 1e-6f;
  for (int tokens : {1, 2, 5})
    for (int heads : {1, 3, 4})
      for (int hd : {1, 7, 8, 33, 128})
        for (int pad : {0, 5}) {
          const int64_t stride = static_cast<int64_t>(heads) * hd + pad;
          std::vector<bf16> x = rng.bf16s(static_cast<size_t>(tokens * stride), -4.0f, 4.0f);
          // Special heads: (token t, head h) with (t * heads + h) % 6 picks the kind.
          for (int t = 0; t < tokens; ++t)
            for (int h = 0; h < heads; ++h) {
              bf16* head = &x[static_cast<size_t>(t * stride + h * hd)];
              const int at = static_cast<int>(rng.integer(0, hd - 1));
              switch ((t * heads + h) % 6) {
                case 1: head[at] = to_bf16(kNaN); break;
                case 2: head[at] = to_bf16(kInf); break;
                case 3: head[at] = to_bf16(-kInf); break;
                case 4:
                  for (int i = 0; i < hd; ++i) head[i] = to_bf16(0.0f);
                  break;
                case 5:
                  for (int i = 0; i < hd; ++i) head[i] = to_bf16(rng.uniform(1e37f, 3e38f));
                  break;
                default: break;
              }
            }
          const std::vector<bf16> w = rng.bf16s(static_cast<size_t>(hd), -1.5f, 1.5f);
          for (NormGain gain : kGains) {
            SCOPED_TRACE("tokens " + std::to_string(tokens) + " heads " + std::to_string(heads) +
                         " head_dim " + std::to_string(hd) + " pad " + std::to_string(pad) +
                         " gain " + std::to_string(static_cast<int>(gain)));
            const bf16* wp = gain == NormGain::none ? nullptr : w.data();
            std::vector<bf16> want = x;
            for (int t = 0; t < tokens; ++t)
              for (int h = 0; h < heads; ++h) {
                bf16* head = &want[static_cast<size_t>(t * stride + h * hd)];
                const auto y = naive_rms(widen(head, static_cast<size_t>(hd)), wp, gain, eps);
                std::copy(y.begin(), y.end(), head);
              }
            for (int threads : kThreadCounts) {
              std::vector<bf16> y = x;
              head_rms_norm(ops::head_norm(y.data(), stride, tokens, heads, hd, wp, gain, eps),
                            threads);
              EXPECT_TRUE(same_bits(y, want, {stride})) << "threads " << threads;
            }
          }
        }
}

// A head is exactly one rms_norm row: the op equals rms_norm run head by head.
TEST(CpuOpsHeadRmsNorm, EqualsRmsNormOfEachHead) {
  const uint64_t seed = 1502;
  test::Gen rng(seed);  // names the seed in any failure
  const int tokens = 3, heads = 5, hd = 31;
  const int64_t stride = heads * hd + 2;
  const std::vector<bf16> x = rng.bf16s(static_cast<size_t>(tokens * stride), -8.0f, 8.0f);
  const std::vector<bf16> w = rng.bf16s(static_cast<size_t>(hd), -0.9f, 0.9f);
  std::vector<bf16> y = x, want = x;
  head_rms_norm(ops::head_norm(y.data(), stride, tokens, heads, hd, w.data(),
                               NormGain::one_plus_weight, 1e-5f));
  for (int t = 0; t < tokens; ++t)
    for (int h = 0; h < heads; ++h) {
      bf16* head = &want[static_cast<size_t>(t * stride + h * hd)];
      rms_norm(
          ops::rms_norm_of(head, hd, 1, hd, w.data(), NormGain::one_plus_weight, 1e-5f, head, hd));
    }
  EXPECT_TRUE(same_bits(y, want, {stride}));
}

TEST(CpuOpsHeadRmsNorm, BadShapesAreRefused) {
  std::vector<bf16> buf(64, to_bf16(1.0f));
  EXPECT_THROW(
      head_rms_norm(ops::head_norm(buf.data(), 8, 2, 0, 8, nullptr, NormGain::none, 1e-6f)),
      InvalidArgument);
  EXPECT_THROW(
      head_rms_norm(ops::head_norm(buf.data(), 8, 2, 1, 0, nullptr, NormGain::none, 1e-6f)),
      InvalidArgument);
  EXPECT_THROW(
      head_rms_norm(ops::head_norm(buf.data(), 7, 2, 2, 4, nullptr, NormGain::none, 1e-6f)),
      InvalidArgument);
  EXPECT_THROW(
      head_rms_norm(ops::head_norm(buf.data(), 8, 2, 2, 4, nullptr, NormGain::weight, 1e-6f)),
      InvalidArgument);
  EXPECT_NO_THROW(
      head_rms_norm(ops::head_norm(buf.data(), 8, 0, 2, 4, nullptr, NormGain::none, 1e-6f)));
}

// ---- residual boundary -------------------------------------------------------------

struct BoundaryCase {
  StreamDType dtype;
  bool post_norm;
  int residual;  // 0 plain, 1 random alpha/beta, 2 alpha = beta = 1
};

// The boundary from its header formula. stream: fp32 values (bf16 streams hold
// bf16-representable values), updated in place; returns next.
std::vector<bf16> naive_boundary(const ops::BoundaryParams& p, const std::vector<bf16>& branch,
                                 std::vector<float>& stream) {
  std::vector<bf16> next;
  const int h = p.hidden;
  for (int r = 0; r < p.rows; ++r) {
    std::vector<bf16> b(branch.begin() + r * h, branch.begin() + (r + 1) * h);
    if (p.post_norm) b = naive_rms(widen(b.data(), b.size()), p.post_weight, p.gain, p.eps);
    std::vector<float> rounded(static_cast<size_t>(h));
    for (int i = 0; i < h; ++i) {
      float& s = stream[static_cast<size_t>(r * h + i)];
      const float bi = to_f32(b[static_cast<size_t>(i)]);
      float out;
      if (p.alpha) {
        const float as = p.alpha[i] * s;
        const float bb = p.beta[i] * bi;
        out = as + bb;
      } else {
        out = s + bi;
      }
      s = p.residual_dtype == StreamDType::bf16 ? round_bf16(out) : out;
      rounded[static_cast<size_t>(i)] = round_bf16(out);
    }
    const auto y = naive_rms(rounded, p.pre_weight, p.gain, p.eps);
    next.insert(next.end(), y.begin(), y.end());
  }
  return next;
}

// Runs the op on a copy of the stream given as fp32 values; returns (stream, next).
std::pair<std::vector<float>, std::vector<bf16>> run_boundary(const ops::BoundaryParams& p,
                                                              const std::vector<bf16>& branch,
                                                              const std::vector<float>& stream0,
                                                              int threads) {
  std::vector<bf16> next(branch.size());
  std::vector<float> out(stream0.size());
  if (p.residual_dtype == StreamDType::f32) {
    out = stream0;
    residual_boundary(p, branch.data(), out.data(), next.data(), threads);
  } else {
    std::vector<bf16> s(stream0.size());
    for (size_t i = 0; i < s.size(); ++i) s[i] = to_bf16(stream0[i]);
    residual_boundary(p, branch.data(), s.data(), next.data(), threads);
    for (size_t i = 0; i < s.size(); ++i) out[i] = to_f32(s[i]);
  }
  return {out, next};
}

TEST(CpuOpsResidualBoundary, MatchesNaiveBitForBit) {
  const uint64_t seed = 2001;
  test::Gen rng(seed);  // names the seed in any failure
  for (StreamDType dtype : {StreamDType::bf16, StreamDType::f32})
    for (bool post_norm : {false, true})
      for (int residual : {0, 1, 2})
        for (NormGain gain : kGains)
          for (int rows : {1, 3, 5})
            for (int h : {1, 7, 33, 130}) {
              SCOPED_TRACE("dtype " + std::to_string(static_cast<int>(dtype)) + " post_norm " +
                           std::to_string(post_norm) + " residual " + std::to_string(residual) +
                           " gain " + std::to_string(static_cast<int>(gain)) + " rows " +
                           std::to_string(rows) + " H " + std::to_string(h));
              const auto post_w = rng.bf16s(static_cast<size_t>(h), -1.0f, 1.0f);
              const auto pre_w = rng.bf16s(static_cast<size_t>(h), -1.0f, 1.0f);
              std::vector<float> alpha = rng.floats(static_cast<size_t>(h), 0.5f, 1.5f);
              std::vector<float> beta = rng.floats(static_cast<size_t>(h), -1.0f, 1.0f);
              if (residual == 2) alpha.assign(alpha.size(), 1.0f), beta.assign(beta.size(), 1.0f);
              auto branch = rng.bf16s(static_cast<size_t>(rows * h), -3.0f, 3.0f);
              auto stream0 = rng.floats(static_cast<size_t>(rows * h), -20.0f, 20.0f);
              if (dtype == StreamDType::bf16)
                for (float& s : stream0) s = round_bf16(s);
              if (rows > 1) branch[static_cast<size_t>(h)] = to_bf16(kNaN);
              if (rows > 2) stream0[static_cast<size_t>(2 * h)] = kInf;

              ops::BoundaryParams p;
              p.rows = rows;
              p.hidden = h;
              p.residual_dtype = dtype;
              p.post_norm = post_norm;
              p.post_weight = post_norm ? post_w.data() : nullptr;
              p.alpha = residual ? alpha.data() : nullptr;
              p.beta = residual ? beta.data() : nullptr;
              p.pre_weight = pre_w.data();
              p.gain = gain;
              p.eps = 1e-6f;
              std::vector<float> want_stream = stream0;
              const auto want_next = naive_boundary(p, branch, want_stream);
              for (int threads : kThreadCounts) {
                const auto [stream, next] = run_boundary(p, branch, stream0, threads);
                EXPECT_TRUE(same_bits(stream, want_stream)) << "stream, threads " << threads;
                EXPECT_TRUE(same_bits(next, want_next)) << "next, threads " << threads;
              }
            }
}

TEST(CpuOpsResidualBoundary, UnitCoefficientsGivePlainAddBits) {
  // contract.md section 3: the norm-preserving residual with alpha = beta = 1 gives
  // exactly the bits of s + b, in both stream dtypes.
  const uint64_t seed = 2002;
  test::Gen rng(seed);  // names the seed in any failure
  for (StreamDType dtype : {StreamDType::bf16, StreamDType::f32})
    for (bool post_norm : {false, true}) {
      const int rows = 5, h = 130;
      const auto post_w = rng.bf16s(static_cast<size_t>(h), -1.0f, 1.0f);
      const auto pre_w = rng.bf16s(static_cast<size_t>(h), -1.0f, 1.0f);
      const std::vector<float> ones(static_cast<size_t>(h), 1.0f);
      const auto branch = rng.bf16s(static_cast<size_t>(rows * h), -3.0f, 3.0f);
      auto stream0 = rng.floats(static_cast<size_t>(rows * h), -50.0f, 50.0f);
      if (dtype == StreamDType::bf16)
        for (float& s : stream0) s = round_bf16(s);
      ops::BoundaryParams p;
      p.rows = rows;
      p.hidden = h;
      p.residual_dtype = dtype;
      p.post_norm = post_norm;
      p.post_weight = post_w.data();
      p.pre_weight = pre_w.data();
      const auto plain = run_boundary(p, branch, stream0, 1);
      p.alpha = ones.data();
      p.beta = ones.data();
      const auto unit = run_boundary(p, branch, stream0, 1);
      EXPECT_TRUE(same_bits(unit.first, plain.first)) << "dtype " << static_cast<int>(dtype);
      EXPECT_TRUE(same_bits(unit.second, plain.second)) << "dtype " << static_cast<int>(dtype);
      // And the plain stream is s + b itself (no post-norm) rounded per dtype.
      if (!post_norm)
        for (size_t i = 0; i < stream0.size(); ++i) {
          const float sum = stream0[i] + to_f32(branch[i]);
          const float want = dtype == StreamDType::bf16 ? round_bf16(sum) : sum;
          ASSERT_EQ(f32_bits(plain.first[i]), f32_bits(want)) << "index " << i;
        }
    }
}

// ---- RoPE ---------------------------------------------------------------------------

TEST(CpuOpsRope, TableMatchesDoubleFormulaBitForBit) {
  for (double theta : {10000.0, 1e6, 500000.0})
    for (int hd : {2, 6, 8, 64, 80, 96, 128}) {  // 6, 80, 96: 2i/d inexact
      const int64_t positions = 4099;
      std::vector<float> table(static_cast<size_t>(positions * hd), kNaN);
      rope_table(theta, hd, positions, table.data());
      for (int64_t pos = 0; pos < positions; ++pos)
        for (int i = 0; i < hd / 2; ++i) {
          const float inv = static_cast<float>(1.0 / std::pow(theta, (2.0 * i) / hd));
          const double angle = static_cast<double>(pos) * inv;
          const float c = static_cast<float>(std::cos(angle)),
                      s = static_cast<float>(std::sin(angle));
          const size_t at = static_cast<size_t>(pos * hd + i);
          ASSERT_EQ(f32_bits(table[at]), f32_bits(c))
              << "cos theta " << theta << " hd " << hd << " pos " << pos << " i " << i;
          ASSERT_EQ(f32_bits(table[at + static_cast<size_t>(hd / 2)]), f32_bits(s))
              << "sin theta " << theta << " hd " << hd << " pos " << pos << " i " << i;
        }
      EXPECT_EQ(table[0], 1.0f);
      EXPECT_EQ(f32_bits(table[static_cast<size_t>(hd / 2)]), 0u);
    }
}

TEST(CpuOpsRope, NeoxAndGptjMatchNaiveBitForBit) {
  const uint64_t seed = 3001;
  test::Gen rng(seed);  // names the seed in any failure
  const int64_t max_pos = 300;
  for (RopeStyle style : {RopeStyle::neox, RopeStyle::gptj})
    for (int hd : {2, 8, 14, 64})
      for (int heads : {1, 3})
        for (int tokens : {1, 3, 5}) {
          SCOPED_TRACE("style " + std::to_string(static_cast<int>(style)) + " hd " +
                       std::to_string(hd) + " heads " + std::to_string(heads) + " tokens " +
                       std::to_string(tokens));
          std::vector<float> table(static_cast<size_t>(max_pos * hd));
          rope_table(1e4, hd, max_pos, table.data());
          const int64_t stride = heads * hd + 5;
          auto x0 = rng.bf16s(static_cast<size_t>(tokens * stride), -3.0f, 3.0f);
          if (tokens > 2) x0[static_cast<size_t>(2 * stride + 1)] = to_bf16(kInf);
          std::vector<int64_t> pos(static_cast<size_t>(tokens));
          for (auto& p : pos) p = rng.integer(0, max_pos - 1);
          pos[0] = 0;  // position 0 rotates by nothing
          std::vector<bf16> want = x0;
          for (int t = 0; t < tokens; ++t)
            for (int h = 0; h < heads; ++h)
              for (int i = 0; i < hd / 2; ++i) {
                const size_t base = static_cast<size_t>(t * stride + h * hd);
                const size_t a = base + static_cast<size_t>(style == RopeStyle::neox ? i : 2 * i);
                const size_t b =
                    base + static_cast<size_t>(style == RopeStyle::neox ? i + hd / 2 : 2 * i + 1);
                const float c = table[static_cast<size_t>(pos[static_cast<size_t>(t)] * hd + i)];
                const float s =
                    table[static_cast<size_t>(pos[static_cast<size_t>(t)] * hd + hd / 2 + i)];
                const float x1 = to_f32(x0[a]), x2 = to_f32(x0[b]);
                const float p1 = x1 * c, p2 = x2 * s, p3 = x2 * c, p4 = x1 * s;
                want[a] = to_bf16(p1 - p2);
                want[b] = to_bf16(p3 + p4);
              }
          for (int threads : kThreadCounts) {
            std::vector<bf16> x = x0;
            rope(ops::rope_heads(x.data(), stride, tokens, heads, hd, pos.data(), table.data(),
                                 style),
                 threads);
            EXPECT_TRUE(same_bits(x, want)) << "threads " << threads;
            for (int i = 0; i < heads * hd; ++i)
              ASSERT_EQ(x[static_cast<size_t>(i)].bits, x0[static_cast<size_t>(i)].bits)
                  << "position 0, col " << i;
          }
        }
}

// ---- KV cache, embedding, activations -------------------------------------------------

TEST(CpuOpsKvInsert, CopiesToSlotsAndSkipsMinusOne) {
  const uint64_t seed = 4001;
  test::Gen rng(seed);  // names the seed in any failure
  const int kv_heads = 3, hd = 5, tokens = 7, slots_total = 20;
  const int64_t ks = kv_heads * hd + 2, vs = kv_heads * hd + 7;
  const auto k = rng.bf16s(static_cast<size_t>(tokens * ks), -2.0f, 2.0f);
  const auto v = rng.bf16s(static_cast<size_t>(tokens * vs), -2.0f, 2.0f);
  const std::vector<int64_t> slots = {4, -1, 0, 19, 7, -1, 12};
  const size_t cache_size = static_cast<size_t>(slots_total * kv_heads * 2 * hd);
  std::vector<bf16> cache(cache_size, bf16{0x7fc1}), want = cache;
  for (int t = 0; t < tokens; ++t) {
    if (slots[static_cast<size_t>(t)] < 0) continue;
    for (int h = 0; h < kv_heads; ++h)
      for (int i = 0; i < hd; ++i) {
        const int64_t row = slots[static_cast<size_t>(t)] * kv_heads + h;
        want[static_cast<size_t>((row * 2 + 0) * hd + i)] =
            k[static_cast<size_t>(t * ks + h * hd + i)];
        want[static_cast<size_t>((row * 2 + 1) * hd + i)] =
            v[static_cast<size_t>(t * vs + h * hd + i)];
      }
  }
  kv_insert(ops::kv_insert_of(k.data(), ks, v.data(), vs, tokens, kv_heads, hd, slots.data(),
                              cache.data()));
  EXPECT_TRUE(same_bits(cache, want));
}

TEST(CpuOpsKvInsert, SlotOfPositionFollowsBlockTable) {
  const int32_t table[] = {5, 0, 9};
  EXPECT_EQ(ops::kv_slot(table, 16, 0), 80);
  EXPECT_EQ(ops::kv_slot(table, 16, 15), 95);
  EXPECT_EQ(ops::kv_slot(table, 16, 16), 0);
  EXPECT_EQ(ops::kv_slot(table, 16, 40), 9 * 16 + 8);
}

TEST(CpuOpsEmbed, CopiesTableRows) {
  const uint64_t seed = 4002;
  test::Gen rng(seed);  // names the seed in any failure
  const int vocab = 11, hidden = 9;
  auto table = rng.bf16s(static_cast<size_t>(vocab * hidden), -1.0f, 1.0f);
  table[static_cast<size_t>(3 * hidden + 2)] = to_bf16(kNaN);
  const std::vector<int64_t> ids = {3, 0, 10, 3, 7};
  std::vector<bf16> out(ids.size() * hidden), want;
  for (int64_t id : ids)
    want.insert(want.end(), table.begin() + id * hidden, table.begin() + (id + 1) * hidden);
  embed(ops::embed_of(ids.data(), static_cast<int>(ids.size()), table.data(), hidden, out.data()));
  EXPECT_TRUE(same_bits(out, want));
}

TEST(CpuOpsSiluMul, MatchesNaiveBitForBit) {
  const uint64_t seed = 4003;
  test::Gen rng(seed);  // names the seed in any failure
  for (int rows : {1, 3, 5})
    for (int inter : {1, 7, 9, 33, 130}) {
      auto gu = rng.bf16s(static_cast<size_t>(rows * 2 * inter), -8.0f, 8.0f);
      if (rows > 1) gu[static_cast<size_t>(2 * inter)] = to_bf16(kNaN);   // gate NaN
      if (rows > 2) gu[static_cast<size_t>(4 * inter)] = to_bf16(kInf);   // gate +inf
      if (rows > 3) gu[static_cast<size_t>(6 * inter)] = to_bf16(-kInf);  // gate -inf
      if (rows > 4) gu[static_cast<size_t>(9 * inter)] = to_bf16(kInf);   // up +inf
      std::vector<bf16> want;
      for (int r = 0; r < rows; ++r)
        for (int i = 0; i < inter; ++i) {
          const float g = to_f32(gu[static_cast<size_t>(r * 2 * inter + i)]);
          const float u = to_f32(gu[static_cast<size_t>(r * 2 * inter + inter + i)]);
          want.push_back(to_bf16(silu_f32(g) * u));
        }
      for (int threads : kThreadCounts) {
        std::vector<bf16> y(want.size());
        silu_mul(ops::silu_mul_of(gu.data(), rows, inter, y.data()), threads);
        EXPECT_TRUE(same_bits(y, want))
            << "rows " << rows << " inter " << inter << " threads " << threads;
      }
    }
}

TEST(CpuOpsONormGate, MatchesNaiveBitForBit) {
  const uint64_t seed = 4004;
  test::Gen rng(seed);  // names the seed in any failure
  for (bool o_norm : {false, true})
    for (bool gate : {false, true})
      for (NormGain gain : kGains)
        for (int tokens : {1, 3})
          for (int heads : {1, 3})
            for (int hd : {1, 7, 8, 33}) {
              SCOPED_TRACE("o_norm " + std::to_string(o_norm) + " gate " + std::to_string(gate) +
                           " gain " + std::to_string(static_cast<int>(gain)) + " tokens " +
                           std::to_string(tokens) + " heads " + std::to_string(heads) + " hd " +
                           std::to_string(hd));
              const int width = heads * hd;
              const int64_t gs = 2 * width + 3;  // e.g. g inside a fused q|g projection
              auto o0 = rng.bf16s(static_cast<size_t>(tokens * width), -4.0f, 4.0f);
              auto g = rng.bf16s(static_cast<size_t>(tokens * gs), -6.0f, 6.0f);
              const auto w = rng.bf16s(static_cast<size_t>(hd), -1.0f, 1.0f);
              if (tokens > 1) g[static_cast<size_t>(gs)] = to_bf16(-kInf);
              std::vector<bf16> want = o0;
              for (int t = 0; t < tokens; ++t)
                for (int h = 0; h < heads; ++h) {
                  bf16* oh = &want[static_cast<size_t>(t * width + h * hd)];
                  if (o_norm) {
                    const auto y =
                        naive_rms(widen(oh, static_cast<size_t>(hd)), w.data(), gain, 1e-6f);
                    std::copy(y.begin(), y.end(), oh);
                  }
                  if (gate)
                    for (int i = 0; i < hd; ++i)
                      oh[i] =
                          to_bf16(to_f32(oh[i]) *
                                  sigmoid_f32(to_f32(g[static_cast<size_t>(t * gs + h * hd + i)])));
                }
              for (int threads : kThreadCounts) {
                std::vector<bf16> o = o0;
                o_norm_gate(ops::o_norm_gate_of(o.data(), tokens, heads, hd, o_norm, w.data(), gain,
                                                1e-6f, gate ? g.data() : nullptr, gs),
                            threads);
                EXPECT_TRUE(same_bits(o, want)) << "threads " << threads;
              }
            }
}

// ---- Markov bias, step logits, sampling ---------------------------------------------------

TEST(CpuOpsMarkovBias, MatchesTheTensorCoreChainBitForBit) {
  const uint64_t seed = 7001;
  test::Gen rng(seed);  // names the seed in any failure
  for (int rows : {1, 3, 5})
    for (int rank : {1, 7, 9, 16, 33, 100, 130, 256, 300})
      for (int vocab : {1, 7, 33, 130}) {
        SCOPED_TRACE("rows " + std::to_string(rows) + " rank " + std::to_string(rank) + " vocab " +
                     std::to_string(vocab));
        auto e = rng.bf16s(static_cast<size_t>(rows * rank), -1.0f, 1.0f);
        auto w2 = rng.bf16s(static_cast<size_t>(vocab) * rank, -0.5f, 0.5f);
        if (rows > 1) e[static_cast<size_t>(rank + rank / 2)] = to_bf16(kNaN);
        if (vocab > 1) w2[static_cast<size_t>(rank)] = to_bf16(kInf);
        if (rows > 2)  // an all-equal row of e
          for (int k = 0; k < rank; ++k) e[static_cast<size_t>(2 * rank + k)] = to_bf16(0.25f);
        std::vector<bf16> want;
        for (int r = 0; r < rows; ++r)
          for (int v = 0; v < vocab; ++v)
            want.push_back(to_bf16(test::mma_chain_f64(&w2[static_cast<size_t>(v) * rank],
                                                       &e[static_cast<size_t>(r * rank)], rank)));
        for (int threads : kThreadCounts) {
          std::vector<bf16> bias(want.size());
          markov_bias(e.data(), rows, w2.data(), vocab, rank, bias.data(), threads);
          EXPECT_TRUE(same_bits(bias, want)) << "threads " << threads;
        }
      }
}

// Rows whose first k16 step cancels exactly (w2[v][k + 8] = w2[v][k], e[r][k + 8] =
// -e[r][k], large): in increasing order it adds +0 first; in any other order the
// later steps' sum is truncated on the large terms' grid. The test shows that the
// two orders give different bf16 biases, then that markov_bias follows the chain.
TEST(CpuOpsMarkovBias, CancellingRowsPinTheStepOrder) {
  const uint64_t seed = 7006;
  test::Gen rng(seed);  // names the seed in any failure
  int order_matters = 0;
  for (int rank : {32, 48, 256, 512}) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    const int rows = 3, vocab = 200;
    auto e = rng.bf16s(static_cast<size_t>(rows * rank), -1.0f, 1.0f);
    auto w2 = rng.bf16s(static_cast<size_t>(vocab) * rank, -1.0f, 1.0f);
    for (int r = 0; r < rows; ++r)
      for (int k = 0; k < 8; ++k) {
        bf16* er = &e[static_cast<size_t>(r * rank)];
        er[k] = to_bf16(to_f32(er[k]) * 4096.0f);
        er[k + 8] = bf16{static_cast<uint16_t>(er[k].bits ^ 0x8000u)};
      }
    for (int v = 0; v < vocab; ++v)
      for (int k = 0; k < 8; ++k) {
        bf16* wv = &w2[static_cast<size_t>(v) * rank];
        wv[k] = to_bf16(to_f32(wv[k]) * 4096.0f);
        wv[k + 8] = wv[k];
      }
    std::vector<bf16> want;
    for (int r = 0; r < rows; ++r)
      for (int v = 0; v < vocab; ++v) {
        const bf16* wv = &w2[static_cast<size_t>(v) * rank];
        const bf16* er = &e[static_cast<size_t>(r * rank)];
        want.push_back(to_bf16(test::mma_chain_f64(wv, er, rank)));
        if (want.back().bits != to_bf16(test::mma_chain_f64(wv, er, rank, true)).bits)
          ++order_matters;
      }
    for (int threads : kThreadCounts) {
      std::vector<bf16> bias(want.size());
      markov_bias(e.data(), rows, w2.data(), vocab, rank, bias.data(), threads);
      EXPECT_TRUE(same_bits(bias, want)) << "threads " << threads;
    }
  }
  EXPECT_GT(order_matters, 300) << "the step order rarely changes a bias: the test cannot see it";
}

TEST(CpuOpsLogitTransform, FromConfig) {
  ModelConfig c;
  ops::LogitTransform t = ops::LogitTransform::from_config(c);
  EXPECT_FALSE(t.enabled);
  EXPECT_FALSE(t.has_cap);
  EXPECT_EQ(t.multiplier, 1.0f);

  c.logit_multiplier = 0.8f;
  t = ops::LogitTransform::from_config(c);
  EXPECT_TRUE(t.enabled);
  EXPECT_FALSE(t.has_cap);
  EXPECT_EQ(f32_bits(t.multiplier), f32_bits(0.8f));

  c.logit_multiplier.reset();
  c.logit_soft_cap = 30.0f;
  t = ops::LogitTransform::from_config(c);
  EXPECT_TRUE(t.enabled);
  EXPECT_TRUE(t.has_cap);
  EXPECT_EQ(t.multiplier, 1.0f);
  EXPECT_EQ(f32_bits(t.cap), f32_bits(30.0f));
  const float thirty = 30.0f;
  EXPECT_EQ(f32_bits(t.inv_cap), f32_bits(1.0f / thirty));

  c.logit_multiplier = 2.5f;
  c.logit_soft_cap = 7.0f;
  t = ops::LogitTransform::from_config(c);
  EXPECT_TRUE(t.enabled && t.has_cap);
  EXPECT_EQ(t.multiplier, 2.5f);
  const float seven = 7.0f;
  EXPECT_EQ(f32_bits(t.inv_cap), f32_bits(1.0f / seven));

  for (float bad : {0.0f, -3.0f, kInf, kNaN}) {
    c.logit_soft_cap = bad;
    EXPECT_THROW(ops::LogitTransform::from_config(c), ConfigError) << "cap " << bad;
  }
  c.logit_soft_cap.reset();
  c.logit_multiplier = kNaN;
  EXPECT_THROW(ops::LogitTransform::from_config(c), ConfigError);
}

TEST(CpuOpsStepLogits, MatchesNaiveWithAndWithoutTransform) {
  const uint64_t seed = 7002;
  test::Gen rng(seed);  // names the seed in any failure
  struct Tr {
    bool enabled, has_cap;
    float mult, cap;
  };
  // Caps 15 and 7 have inexact inverses (t * inv_cap differs from t / cap).
  for (Tr tr : {Tr{false, false, 1.0f, 0.0f}, Tr{true, false, 0.7f, 0.0f},
                Tr{true, true, 1.0f, 15.0f}, Tr{true, true, 1.9f, 7.0f}})
    for (int n : {1, 7, 130, 65536}) {
      SCOPED_TRACE("enabled " + std::to_string(tr.enabled) + " cap " + std::to_string(tr.has_cap) +
                   " n " + std::to_string(n));
      auto base = rng.bf16s(static_cast<size_t>(n), -40.0f, 40.0f);
      auto bias = rng.bf16s(static_cast<size_t>(n), -4.0f, 4.0f);
      if (n == 65536) {
        // Every bf16 bit pattern as the base with a zero bias, so s runs through
        // every bf16 value: at multiplier 1.9 and cap 7, 238 of them round
        // differently if t / cap were used instead of t * inv_cap.
        for (int i = 0; i < n; ++i) base[static_cast<size_t>(i)] = bf16{static_cast<uint16_t>(i)};
        bias.assign(bias.size(), to_bf16(0.0f));
      }
      if (n > 5 && n < 65536) {
        base[1] = to_bf16(kNaN);
        base[2] = to_bf16(kInf);
        base[3] = to_bf16(-kInf);
        base[4] = to_bf16(3.0e38f);  // base + bias overflows bf16 only if bias is positive
      }
      ops::LogitTransform t;
      t.enabled = tr.enabled;
      t.multiplier = tr.mult;
      t.has_cap = tr.has_cap;
      t.cap = tr.cap;
      t.inv_cap = tr.has_cap ? 1.0f / tr.cap : 0.0f;
      std::vector<bf16> want;
      for (int i = 0; i < n; ++i) {
        const float s =
            round_bf16(to_f32(base[static_cast<size_t>(i)]) + to_f32(bias[static_cast<size_t>(i)]));
        if (!tr.enabled) {
          want.push_back(to_bf16(s));
          continue;
        }
        float v = s * tr.mult;
        if (tr.has_cap) {
          const float scaled = v * t.inv_cap;
          v = tanh_f32(scaled) * tr.cap;
        }
        want.push_back(to_bf16(v));
      }
      std::vector<bf16> l(static_cast<size_t>(n));
      step_logits(base.data(), bias.data(), n, t, l.data());
      EXPECT_TRUE(same_bits(l, want));
      if (tr.has_cap && n > 5 && n < 65536) {
        EXPECT_EQ(to_f32(l[2]), round_bf16(tr.cap)) << "tanh(inf) * cap";
      }
    }
}

// The sampling contract's noise, written from contract.md section 4 independently of
// core/philox.h: Philox4x32-10 word 0, two levels, u, g = -log(-log1p(-u)).
uint32_t naive_randint(int64_t seed, int64_t off) {
  const uint64_t s = static_cast<uint64_t>(seed), o = static_cast<uint64_t>(off);
  uint32_t c[4] = {static_cast<uint32_t>(o), static_cast<uint32_t>(o >> 32), 0, 0};
  uint32_t k0 = static_cast<uint32_t>(s), k1 = static_cast<uint32_t>(s >> 32);
  for (int round = 0; round < 10; ++round) {
    const uint64_t a = 0xD2511F53ull * c[0], b = 0xCD9E8D57ull * c[2];
    const uint32_t n[4] = {static_cast<uint32_t>(b >> 32) ^ c[1] ^ k0, static_cast<uint32_t>(b),
                           static_cast<uint32_t>(a >> 32) ^ c[3] ^ k1, static_cast<uint32_t>(a)};
    std::memcpy(c, n, sizeof(c));
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  return c[0];
}

float naive_noise(uint32_t step_seed, int64_t v) {
  int32_t x = static_cast<int32_t>(naive_randint(static_cast<int64_t>(step_seed), v));
  if (x < 0) x = ~x;
  float u = static_cast<float>(x) * 0x1.fffffep-32f;
  if (u < 0x1.fffffep-32f) u = 0x1.fffffep-32f;
  return -log_f32(-log1p_f32(-u));
}

RowBest naive_sample(const std::vector<bf16>& l, int64_t offset, float temperature,
                     uint32_t step_seed) {
  std::vector<float> z(l.size());
  for (size_t i = 0; i < l.size(); ++i) {
    const float logit = to_f32(l[i]);
    z[i] = temperature > 0.0f
               ? logit / temperature + naive_noise(step_seed, offset + static_cast<int64_t>(i))
               : logit;
  }
  for (size_t i = 0; i < z.size(); ++i)
    if (std::isnan(z[i])) return RowBest{z[i], offset + static_cast<int64_t>(i)};
  size_t best = 0;
  for (size_t i = 1; i < z.size(); ++i)
    if (z[i] > z[best]) best = i;
  return RowBest{z[best], offset + static_cast<int64_t>(best)};
}

TEST(CpuOpsSampleRow, NaiveNoiseMatchesSpecVectors) {
  // Anchors the test's own Philox on contract.md section 4 before it is used below.
  EXPECT_EQ(naive_randint(0, 0), 1713891541u);
  EXPECT_EQ(naive_randint(12345, 77), 668326920u);
  EXPECT_EQ(naive_randint(-5, 9), 2883358565u);
  EXPECT_EQ(naive_randint((int64_t{1} << 40) + 987654321, (int64_t{1} << 30) + 4096), 1595797246u);
  EXPECT_EQ(naive_randint(12345, 77 + (int64_t{1} << 30)), 2211821518u);
}

TEST(CpuOpsSampleRow, MatchesNaiveScanAtZeroAndPositiveTemperature) {
  const uint64_t seed = 7003;
  test::Gen rng(seed);  // names the seed in any failure
  int noise_changed_winner = 0;
  for (float temperature : {0.0f, 0.6f, 1.0f, 2.5f})
    for (int n : {1, 7, 33, 130, 1000})
      for (int64_t offset : {int64_t{0}, int64_t{75968}})
        for (int trial = 0; trial < 3; ++trial) {
          const uint32_t step_seed = static_cast<uint32_t>(rng.integer(0, 0xffffffffll));
          SCOPED_TRACE("T " + std::to_string(temperature) + " n " + std::to_string(n) + " offset " +
                       std::to_string(offset) + " step_seed " + std::to_string(step_seed));
          const auto l = rng.bf16s(static_cast<size_t>(n), -3.0f, 3.0f);
          const RowBest got = sample_row(l.data(), n, offset, temperature, step_seed);
          const RowBest want = naive_sample(l, offset, temperature, step_seed);
          EXPECT_EQ(got.id, want.id);
          EXPECT_EQ(f32_bits(got.value), f32_bits(want.value));
          if (temperature > 0.0f && got.id != naive_sample(l, offset, 0.0f, 0).id)
            ++noise_changed_winner;
        }
  EXPECT_GT(noise_changed_winner, 0) << "T > 0 never moved the winner: is the noise applied?";
}

TEST(CpuOpsSampleRow, SpecialRowsFollowTheRule) {
  const uint64_t seed = 7004;
  test::Gen rng(seed);  // names the seed in any failure
  const int n = 33;
  const int64_t offset = 1000;
  for (float temperature : {0.0f, 1.0f}) {
    SCOPED_TRACE("T " + std::to_string(temperature));
    const uint32_t gs = 0xC0FFEEu;
    // Ties: all equal -> at T = 0 the lowest id.
    std::vector<bf16> equal(static_cast<size_t>(n), to_bf16(1.5f));
    RowBest b = sample_row(equal.data(), n, offset, temperature, gs);
    EXPECT_EQ(b.id, naive_sample(equal, offset, temperature, gs).id);
    if (temperature == 0.0f) {
      EXPECT_EQ(b.id, offset);
    }
    // Two maxima: the lower id.
    auto two = rng.bf16s(static_cast<size_t>(n), -3.0f, 3.0f);
    two[9] = two[20] = to_bf16(kInf);
    b = sample_row(two.data(), n, offset, temperature, gs);
    EXPECT_EQ(b.id, offset + 9);
    // NaNs win, the lowest NaN id, whatever the maximum.
    auto nan = two;
    nan[25] = nan[12] = to_bf16(kNaN);
    b = sample_row(nan.data(), n, offset, temperature, gs);
    EXPECT_EQ(b.id, offset + 12);
    EXPECT_TRUE(std::isnan(b.value));
    // All -inf: every score is -inf, the lowest id.
    std::vector<bf16> neg(static_cast<size_t>(n), to_bf16(-kInf));
    b = sample_row(neg.data(), n, offset, temperature, gs);
    EXPECT_EQ(b.id, offset);
    EXPECT_EQ(b.value, -kInf);
    // +0 and -0 tie: the lower id.
    std::vector<bf16> zeros(static_cast<size_t>(2), to_bf16(-0.0f));
    zeros[1] = to_bf16(0.0f);
    if (temperature == 0.0f) {
      EXPECT_EQ(sample_row(zeros.data(), 2, 0, 0.0f, gs).id, 0);
    }
  }
}

TEST(CpuOpsSampleRow, SlicesCombineToTheWholeRow) {
  // A vocab split (contract.md section 4 invariance): best of slices == best of the row.
  const uint64_t seed = 7005;
  test::Gen rng(seed);  // names the seed in any failure
  const int n = 999;
  auto l = rng.bf16s(static_cast<size_t>(n), -2.0f, 2.0f);
  l[500] = l[100] = to_bf16(2.0f);
  for (float temperature : {0.0f, 0.8f}) {
    const RowBest whole = sample_row(l.data(), n, 0, temperature, 77u);
    for (int cut : {1, 100, 101, 500, 998}) {
      const RowBest a = sample_row(l.data(), cut, 0, temperature, 77u);
      const RowBest b = sample_row(l.data() + cut, n - cut, cut, temperature, 77u);
      const RowBest best = better(b.value, b.id, a.value, a.id) ? b : a;
      EXPECT_EQ(best.id, whole.id) << "cut " << cut << " T " << temperature;
      EXPECT_EQ(f32_bits(best.value), f32_bits(whole.value));
    }
  }
}

// ---- bad input --------------------------------------------------------------------------

TEST(CpuOpsErrors, BadInputIsRefusedWithInvalidArgument) {
  std::vector<bf16> buf(64, to_bf16(1.0f));
  std::vector<float> table(64, 0.0f);
  EXPECT_THROW(rms_norm(ops::rms_norm_of(buf.data(), 8, 2, 8, nullptr, NormGain::weight, 1e-6f,
                                         buf.data(), 8)),
               InvalidArgument);
  EXPECT_THROW(rms_norm(ops::rms_norm_of(buf.data(), 4, 2, 8, nullptr, NormGain::none, 1e-6f,
                                         buf.data(), 8)),
               InvalidArgument);
  ops::BoundaryParams p;
  p.rows = 1;
  p.hidden = 8;
  p.pre_weight = buf.data();
  std::vector<float> alpha(8, 1.0f);
  p.alpha = alpha.data();  // beta missing
  EXPECT_THROW(residual_boundary(p, buf.data(), buf.data(), buf.data() + 8), InvalidArgument);
  EXPECT_THROW(rope_table(1e4, 7, 4, table.data()), InvalidArgument);
  const int64_t neg_pos = -1;
  EXPECT_THROW(
      rope(ops::rope_heads(buf.data(), 8, 1, 1, 8, &neg_pos, table.data(), RopeStyle::neox)),
      InvalidArgument);
  const int64_t bad_slot = -2;
  EXPECT_THROW(
      kv_insert(ops::kv_insert_of(buf.data(), 4, buf.data(), 4, 1, 1, 4, &bad_slot, buf.data())),
      InvalidArgument);
  const int64_t bad_id = -1;
  EXPECT_THROW(embed(ops::embed_of(&bad_id, 1, buf.data(), 4, buf.data())), InvalidArgument);
  EXPECT_THROW(gemm(ops::gemm_of(buf.data(), 2, buf.data(), 1, 1, 4, buf.data(), 1)),
               InvalidArgument);
  EXPECT_THROW(sample_row(buf.data(), 4, 0, -1.0f, 0), InvalidArgument);
  EXPECT_THROW(sample_row(buf.data(), 4, 0, kInf, 0), InvalidArgument);
  EXPECT_THROW(sample_row(buf.data(), 0, 0, 1.0f, 0), InvalidArgument);
  ops::AttentionParams a;
  a.tokens = 1;
  a.requests = 1;
  a.heads = 3;
  a.kv_heads = 2;  // not a divisor
  a.head_dim = 4;
  a.page_size = 4;
  a.max_pages = 1;
  a.q_stride = 12;
  a.max_kv_len = 4;
  EXPECT_THROW(attention(a, buf.data(), buf.data(), buf.data()), InvalidArgument);
  const int32_t req = 0, page = 0;
  const int64_t pos = 9, kv_len = 3;  // window start past kv_len
  a.heads = 2;
  a.q_stride = 8;
  a.window = 2;
  a.block_tables = &page;
  a.token_request = &req;
  a.positions = &pos;
  a.kv_lens = &kv_len;
  EXPECT_THROW(attention(a, buf.data(), buf.data(), buf.data()), InvalidArgument);
}

}  // namespace
}  // namespace sparkdraft::cpu
