// The GPU verifier's kept-set selection (src/cuda/verify/select.h): the radix
// descent over the order key, run here on one thread with the kernel's own bucket
// steps, keeps exactly the set of contract.md section 8.3 written by sorting (the
// first k ids of the order, then the ids whose earlier top-k mass is below
// top_p * Zi), over seeded rows with ties, +-0, -inf and logits scaled by small
// temperatures; and the order key sorts as the sampling rule.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "common/random.h"
#include "cuda/verify/select.h"

namespace sparkdraft {
namespace {

using verify_select::kBuckets;
using verify_select::order_key;

// The descent as the kernel runs it (histograms built sequentially here).
uint64_t descend(const std::vector<float>& s, float M, int top_k, float top_p) {
  const int V = static_cast<int>(s.size());
  uint64_t thr_k = 0;
  if (top_k > 0 && top_k < V) {
    uint64_t prefix = 0, mask = 0;
    uint32_t k_left = static_cast<uint32_t>(top_k);
    for (int shift = 56; shift >= 0; shift -= 8) {
      uint32_t count[kBuckets] = {};
      for (int v = 0; v < V; ++v) {
        const uint64_t key = order_key(s[v], v);
        if ((key & mask) == prefix) ++count[verify_select::digit(key, shift)];
      }
      prefix |= static_cast<uint64_t>(verify_select::top_k_bucket(count, k_left)) << shift;
      mask |= uint64_t{0xff} << shift;
    }
    thr_k = prefix;
  }
  if (!(top_p < 1.0f)) return thr_k;
  U128 total, above;
  for (int v = 0; v < V; ++v)
    if (order_key(s[v], v) >= thr_k) total = u128_add(total, verify_select::sum_term(s[v], M));
  uint64_t prefix = 0, mask = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    uint32_t count[kBuckets] = {};
    std::vector<U128> sum(kBuckets);
    for (int v = 0; v < V; ++v) {
      const uint64_t key = order_key(s[v], v);
      if (key >= thr_k && (key & mask) == prefix) {
        const int b = verify_select::digit(key, shift);
        ++count[b];
        sum[b] = u128_add(sum[b], verify_select::sum_term(s[v], M));
      }
    }
    const int b = verify_select::top_p_bucket(count, sum.data(), above, top_p, total);
    EXPECT_GE(b, 0) << "no bucket at shift " << shift;
    prefix |= static_cast<uint64_t>(b) << shift;
    mask |= uint64_t{0xff} << shift;
  }
  return prefix;
}

// Section 8.3 by sorting.
std::vector<bool> kept_by_sorting(const std::vector<float>& s, float M, int top_k, float top_p) {
  const int V = static_cast<int>(s.size());
  std::vector<int> ids(V);
  for (int v = 0; v < V; ++v) ids[v] = v;
  std::sort(ids.begin(), ids.end(), [&](int a, int b) { return better(s[a], a, s[b], b); });
  const int keep_k = top_k > 0 && top_k < V ? top_k : V;
  std::vector<bool> kept(V, false);
  for (int i = 0; i < keep_k; ++i) kept[ids[i]] = true;
  if (top_p < 1.0f) {
    U128 total, before;
    for (int i = 0; i < keep_k; ++i) total = u128_add(total, law_term(s[ids[i]], M));
    for (int i = 0; i < keep_k; ++i) {
      if (!top_p_keeps(before, top_p, total)) kept[ids[i]] = false;
      before = u128_add(before, law_term(s[ids[i]], M));
    }
  }
  return kept;
}

TEST(VerifySelect, RadixDescentKeepsTheSetOfSection8_3) {
  test::Gen g(8303);
  const float ninf = -std::numeric_limits<float>::infinity();
  int cases = 0;
  for (int it = 0; it < 1500; ++it) {
    const int V = static_cast<int>(g.integer(1, 700));
    const int kind = static_cast<int>(g.integer(0, 3));
    std::vector<float> s(V);
    for (float& x : s) {
      const float u = g.uniform(-6.0f, 6.0f);
      x = kind == 0   ? round_bf16(u)  // bf16 logits: many ties
          : kind == 1 ? std::round(u)  // integers: large tie groups
          : kind == 2 ? u / 0.05f      // T 0.05: most terms below 2^-64
                      : (g.integer(0, 2) == 0 ? ninf : u);
      if (g.integer(0, 49) == 0) x = 0.0f;
      if (g.integer(0, 49) == 0) x = -0.0f;
    }
    int f = 0;
    for (int v = 1; v < V; ++v)
      if (better(s[v], v, s[f], f)) f = v;
    if (s[f] == ninf) continue;  // degenerate: no selection
    const int ks[] = {0, 1, 2, 5, V - 1, V, V + 3, 50};
    const float ps[] = {1.0f, 0.9f, 0.5f, 0.01f, 0.999f, 1e-30f, 0.3f};
    const int top_k = ks[g.integer(0, 7)];
    const float top_p = ps[g.integer(0, 6)];
    if (!((top_k > 0 && top_k < V) || top_p < 1.0f)) continue;
    ++cases;
    const std::vector<bool> want = kept_by_sorting(s, s[f], top_k, top_p);
    const uint64_t thr = descend(s, s[f], top_k, top_p);
    for (int v = 0; v < V; ++v)
      ASSERT_EQ(order_key(s[v], v) >= thr, want[v])
          << "case " << it << ": V " << V << ", top_k " << top_k << ", top_p " << top_p << ", id "
          << v << " (s " << s[v] << ")";
  }
  EXPECT_GT(cases, 1000);
}

// The key orders as better(): a larger key exactly when the id comes first.
TEST(VerifySelect, OrderKeySortsAsTheSamplingRule) {
  test::Gen g(11);
  const float vals[] = {std::numeric_limits<float>::quiet_NaN(),
                        std::numeric_limits<float>::infinity(),
                        -std::numeric_limits<float>::infinity(),
                        0.0f,
                        -0.0f,
                        1.5f,
                        -1.5f,
                        1e-40f,
                        -1e-40f,
                        3.0f};
  for (int it = 0; it < 20000; ++it) {
    const float a = g.integer(0, 1) ? vals[g.integer(0, 9)] : g.uniform(-4.0f, 4.0f);
    const float b = g.integer(0, 1) ? vals[g.integer(0, 9)] : g.uniform(-4.0f, 4.0f);
    const int32_t ia = static_cast<int32_t>(g.integer(0, 1000));
    int32_t ib = static_cast<int32_t>(g.integer(0, 1000));
    if (ib == ia) ib = ia + 1;
    ASSERT_EQ(order_key(a, ia) > order_key(b, ib), better(a, ia, b, ib))
        << a << " id " << ia << " vs " << b << " id " << ib;
  }
}

// FirstKey (the first pass's per-thread fold) is the largest order key over the ids
// in increasing order: NaNs of either sign and any payload, +-0, +-inf, subnormals,
// ties; and 0 for no id.
TEST(VerifySelect, FirstKeyIsTheLargestOrderKey) {
  const uint64_t seed = 48;
  test::Gen g(seed);
  EXPECT_EQ(verify_select::FirstKey{}.key(), 0u);
  const float specials[] = {bits_f32(0x7fc00000u),
                            bits_f32(0xffc00001u),
                            bits_f32(0x7f800001u),
                            0.0f,
                            -0.0f,
                            std::numeric_limits<float>::infinity(),
                            -std::numeric_limits<float>::infinity(),
                            bits_f32(1u),
                            bits_f32(0x80000003u),
                            3.0f};
  for (int it = 0; it < 3000; ++it) {
    const int n = static_cast<int>(g.integer(1, 60));
    const int stride = static_cast<int>(g.integer(1, 5));
    verify_select::FirstKey f;
    uint64_t want = 0;
    for (int i = 0; i < n; ++i) {
      const int v = static_cast<int>(g.integer(0, 3)) + i * stride * 4;  // increasing
      const int kind = static_cast<int>(g.integer(0, 9));
      const float x = kind < 3 ? specials[g.integer(0, 9)] : (kind < 6 ? 3.0f : g.uniform(-4, 4));
      f.add(x, v);
      want = std::max(want, verify_select::order_key(x, v));
    }
    ASSERT_EQ(f.key(), want) << "seed " << seed << ", trial " << it;
  }
}

// sum_term's road is exact: the clamp at -87 (every term below -45 is 0), exp_law_bits
// and the one shift give law_term's bits.
TEST(VerifySelect, SumTermEqualsLawTerm) {
  test::Gen g(45);
  for (int it = 0; it < 200000; ++it) {
    const float M = g.uniform(-20.0f, 20.0f);
    const float s = M - g.uniform(0.0f, 120.0f);
    const U128 a = verify_select::sum_term(s, M), b = law_term(s, M);
    ASSERT_TRUE(a.lo == b.lo && a.hi == b.hi) << "s " << s << ", M " << M;
  }
  // Every 29th float of [-inf, 0] (and both ends) as s - M: E = 1 included, every d
  // below -87 (clamped) and -inf. (The whole range, 2^31 floats, was checked once.)
  const uint32_t lo = f32_bits(-0.0f), hi = 0xff800000u;  // -inf
  for (uint32_t step = 0;; ++step) {
    const uint32_t b = static_cast<uint32_t>(std::min<uint64_t>(lo + uint64_t{29} * step, hi));
    const float d = bits_f32(b);
    const verify_select::LawTerm t = verify_select::law_term_of_diff(d);
    const U128 y = fixed64_of_unit(exp_law(d));
    ASSERT_TRUE(t.lo == y.lo && t.one == y.hi) << "s - M = " << d;
    if (d >= -87.0f) {
      ASSERT_EQ(exp_law_bits(d), f32_bits(exp_law(d))) << "d = " << d;
    }
    if (b == hi) break;
  }
  const U128 one = verify_select::sum_term(3.0f, 3.0f);
  EXPECT_TRUE(one.lo == 0 && one.hi == 1) << "E = 1 is 2^64";
}

// TermSum (a thread's 96-bit partial) is the 128-bit sum of its terms: carries out of
// the low 64 bits and the E = 1 terms.
TEST(VerifySelect, TermSumIsTheExactSum) {
  test::Gen g(46);
  for (int it = 0; it < 200; ++it) {
    verify_select::TermSum acc;
    U128 ref;
    const int n = static_cast<int>(g.integer(1, 3000));
    for (int i = 0; i < n; ++i) {
      const float d = g.integer(0, 9) == 0 ? 0.0f : -g.uniform(0.0f, 2.0f);
      acc.add(verify_select::law_term_of_diff(d));
      ref = u128_add(ref, law_term(d, 0.0f));
    }
    const U128 w = acc.wide();
    ASSERT_TRUE(w.lo == ref.lo && w.hi == ref.hi) << "trial " << it;
  }
}

// The draw kernel's race_fold skips an id by two lower bounds of its noise
// e = -log_law(u): e >= 2^-25 and e >= fsub(1, u), over every float u the uniform can
// return ([0x1.fffffep-32, 1 - 2^-24]; all 2^28 floats of the range, about 2 s).
TEST(VerifyMath, RaceNoiseLowerBounds) {
  const uint32_t lo = f32_bits(kUniformScale), hi = f32_bits(1.0f - 0x1p-24f);
  for (uint32_t b = lo; b <= hi; ++b) {
    const float u = bits_f32(b);
    const float e = -log_law(u);
    ASSERT_TRUE(e >= 0x1p-25f && e >= fsub_rn(1.0f, u)) << "u " << u << ", e " << e;
  }
  EXPECT_EQ(uniform_of_word(0u), kUniformScale);
  EXPECT_EQ(uniform_of_word(0x7fffffffu), 1.0f - 0x1p-24f);
}

// race_fold (the draw kernel's fold with the noise skipped where an id cannot win)
// and race_fold_u (the same given the uniform, drawn for every id) give the packet of
// the plain race, per strided "thread" and after the fold across them: weights over
// many orders of magnitude, zeros skipped, ties of weight.
TEST(VerifySelect, RaceFoldEqualsThePlainRace) {
  const uint64_t seed = 47;
  test::Gen g(seed);
  for (int it = 0; it < 400; ++it) {
    const int V = static_cast<int>(g.integer(1, 3000)),
              threads = static_cast<int>(g.integer(1, 64));
    const uint32_t gd = static_cast<uint32_t>(g.bits());
    const float spread = it % 4 == 0 ? 0.5f : (it % 4 == 1 ? 8.0f : 40.0f);
    std::vector<float> w(V);
    for (int v = 0; v < V; ++v) {
      const int kind = static_cast<int>(g.integer(0, 19));
      w[v] = kind == 0 ? 0.0f : (kind == 1 ? 1.0f : exp_law(-g.uniform(0.0f, spread)));
    }
    MarkovPacket plain{bits_f32(0xff800000u), 0x7fffffff, 0}, fast = plain, given = plain;
    for (int t = 0; t < threads; ++t) {
      MarkovPacket a{bits_f32(0xff800000u), 0x7fffffff, 0}, b = a, c = a;
      for (int v = t; v < V; v += threads) {
        const float u = philox_uniform_u32(gd, static_cast<uint32_t>(v));
        if (!(w[v] > 0.0f)) continue;
        fold_first(a, race_score(w[v], race_noise(gd, v)), v);
        verify_select::race_fold(b, w[v], gd, v);
        verify_select::race_fold_u(c, w[v], u, v);
      }
      ASSERT_TRUE(f32_bits(a.value) == f32_bits(b.value) && a.id == b.id)
          << "seed " << seed << ", trial " << it << ", thread " << t << ": race_fold";
      ASSERT_TRUE(f32_bits(a.value) == f32_bits(c.value) && a.id == c.id)
          << "seed " << seed << ", trial " << it << ", thread " << t << ": race_fold_u";
      plain = first_of(plain, a);
      fast = first_of(fast, b);
      given = first_of(given, c);
    }
    ASSERT_EQ(plain.id, fast.id) << "seed " << seed << ", trial " << it;
    ASSERT_EQ(plain.id, given.id) << "seed " << seed << ", trial " << it;
  }
}

// exp_law (contract.md section 8.2): its fixed points, 0 <= E <= 1, within 1 ulp of
// exp over every 61st float of [-87, 0] (the sequence measures 0.89 ulp at worst),
// and 0 below -87; every float in [-87, -45) gives a zero term (sum_term's shortcut).
TEST(VerifyMath, ExpLawIsWithinOneUlpOfExp) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f32_bits(exp_law(0.0f)), f32_bits(1.0f));
  EXPECT_EQ(f32_bits(exp_law(-0.0f)), f32_bits(1.0f));
  EXPECT_EQ(f32_bits(exp_law(-inf)), 0u);
  EXPECT_EQ(f32_bits(exp_law(std::nextafter(-87.0f, -inf))), 0u);
  EXPECT_GE(exp_law(-87.0f), std::numeric_limits<float>::min()) << "E is normal at -87";
  double worst = 0.0;
  float worst_at = 0.0f;
  const uint32_t lo = f32_bits(-0.0f), hi = f32_bits(-87.0f);  // -0 .. -87 by bits
  for (uint32_t step = 0;; ++step) {  // every 61st pattern, then -87 itself
    const uint32_t b = std::min<uint64_t>(lo + uint64_t{61} * step, hi);
    const float d = bits_f32(b);
    const float e = exp_law(d);
    ASSERT_TRUE(e >= 0.0f && e <= 1.0f) << "exp_law(" << d << ") = " << e;
    const long double want = std::exp(static_cast<long double>(d));
    const float wf = static_cast<float>(want);
    const long double ulp =
        static_cast<long double>(std::nextafter(wf, inf)) - static_cast<long double>(wf);
    const double err = static_cast<double>(std::fabs(static_cast<long double>(e) - want) / ulp);
    if (err > worst) {
      worst = err;
      worst_at = d;
    }
    if (b == hi) break;
  }
  std::printf("  exp_law: worst %.4f ulp at %a\n", worst, static_cast<double>(worst_at));
  EXPECT_LE(worst, 1.0) << "at " << worst_at;
  for (uint32_t b = f32_bits(-45.0f) + 1; b <= hi; ++b) {
    const U128 t = fixed64_of_unit(exp_law(bits_f32(b)));
    ASSERT_TRUE(t.lo == 0 && t.hi == 0) << "a nonzero term at " << bits_f32(b);
  }
}

// log_law (contract.md section 8.4) on the verifier's uniforms: within 1 ulp of log
// over every 7th float of [2^-33, 1 - 2^-24], and log_law(1) = 0; the race noise
// -log_law(u) is positive and finite for every uniform philox_uniform can return
// (its smallest and largest included).
TEST(VerifyMath, LogLawIsWithinOneUlpOfLog) {
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(f32_bits(log_law(1.0f)), 0u);
  double worst = 0.0;
  float worst_at = 0.0f;
  const uint32_t lo = f32_bits(0x1p-33f), hi = f32_bits(1.0f) - 1;
  for (uint32_t step = 0;; ++step) {
    const uint32_t b = static_cast<uint32_t>(std::min<uint64_t>(lo + uint64_t{7} * step, hi));
    const float x = bits_f32(b);
    const float y = log_law(x);
    const long double want = std::log(static_cast<long double>(x));
    const float wf = static_cast<float>(want);
    const long double ulp = static_cast<long double>(std::nextafter(std::fabs(wf), inf)) -
                            static_cast<long double>(std::fabs(wf));
    const double err = static_cast<double>(std::fabs(static_cast<long double>(y) - want) / ulp);
    if (err > worst) {
      worst = err;
      worst_at = x;
    }
    ASSERT_LT(y, 0.0f) << "log_law(" << x << ") = " << y;
    if (b == hi) break;
  }
  std::printf("  log_law: worst %.4f ulp at %a\n", worst, static_cast<double>(worst_at));
  EXPECT_LE(worst, 1.0) << "at " << worst_at;
  for (float u : {0x1.fffffep-33f, 0x1.fffffep-32f, 0x1.fffffep-1f, 0.5f}) {
    const float e = -log_law(u);
    EXPECT_TRUE(e > 0.0f && e < 23.0f) << "noise " << e << " at u " << u;
  }
}

}  // namespace
}  // namespace sparkdraft
