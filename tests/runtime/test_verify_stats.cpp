// What proves the verifier lossless (contract.md section 8): the emitted tokens
// follow the target's law p at every output position (a chi-square goodness of
// fit over the trials that reached the position, bins with an expected count
// below 5 merged, threshold df + 10 sqrt(2 df)); the number of accepted drafts
// follows prod a_i (1 - a_k); ids of probability zero are never emitted; block
// verification passes the same test and accepts at least as many drafts on
// average. The drafts are drawn by the CPU backend's own Markov sampler.
//
// Size: SPARKDRAFT_VERIFY_STATS_SCALE (default 1; 0.1 under ASan/UBSan, where
// the full size takes minutes) multiplies every trial count (at least 200); the
// thresholds hold at any size.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <numeric>
#include <sstream>
#include <string>

#include "common/random.h"
#include "common/verify_case.h"

#if defined(__SANITIZE_ADDRESS__)
#define SD_TEST_SANITIZED 1
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(undefined_behavior_sanitizer)
#define SD_TEST_SANITIZED 1
#endif
#endif
#ifndef SD_TEST_SANITIZED
#define SD_TEST_SANITIZED 0
#endif

namespace sparkdraft {
namespace {

double stats_scale() {
  if (const char* s = std::getenv("SPARKDRAFT_VERIFY_STATS_SCALE")) return std::atof(s);
  return SD_TEST_SANITIZED ? 0.1 : 1.0;
}
int scaled(int trials) { return std::max(200, static_cast<int>(trials * stats_scale())); }

struct ChiSquare {
  double stat = 0;
  int df = 0;
  double threshold = 0;
  int64_t n = 0;
  std::string zero_emitted;  // ids of probability 0 that were emitted
  bool pass() const { return zero_emitted.empty() && stat <= threshold; }
};

std::ostream& operator<<(std::ostream& os, const ChiSquare& c) {
  return os << "chi2 " << c.stat << " df " << c.df << " threshold " << c.threshold << " n " << c.n
            << (c.zero_emitted.empty() ? "" : " zero-probability ids emitted:" + c.zero_emitted);
}

// Goodness of fit of counts against p: bins with expected < 5 pooled (and the
// pool, if still below 5, added to the smallest other bin).
ChiSquare chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p) {
  ChiSquare c;
  c.n = std::accumulate(counts.begin(), counts.end(), int64_t{0});
  std::vector<std::pair<double, int64_t>> bins;  // expected, observed
  double pool_e = 0;
  int64_t pool_o = 0;
  for (size_t v = 0; v < p.size(); ++v) {
    if (p[v] == 0.0) {
      if (counts[v] > 0) c.zero_emitted.append(1, ' ').append(std::to_string(v));
      continue;
    }
    const double e = p[v] * static_cast<double>(c.n);
    if (e < 5) {
      pool_e += e;
      pool_o += counts[v];
    } else {
      bins.push_back({e, counts[v]});
    }
  }
  if (pool_e > 0) {
    if (pool_e >= 5 || bins.empty()) {
      bins.push_back({pool_e, pool_o});
    } else {
      auto smallest = std::min_element(bins.begin(), bins.end());
      smallest->first += pool_e;
      smallest->second += pool_o;
    }
  }
  for (const auto& [e, o] : bins) c.stat += (o - e) * (o - e) / e;
  c.df = std::max(1, static_cast<int>(bins.size()) - 1);
  c.threshold = c.df + 10.0 * std::sqrt(2.0 * c.df);
  return c;
}

// Trials of one setting: every trial a row with its own seed, the same logits.
struct Trials {
  int N = 0, V = 0;
  std::vector<int64_t> tokens;  // [trials, N + 1]
  std::vector<int32_t> accepted;
  int count() const { return static_cast<int>(accepted.size()); }
};

struct Setting {
  int V = 16, N = 3;
  float T = 1.0f;
  std::vector<bf16> base;     // [N, V] the draft's base logits (the cache rows)
  std::vector<float> target;  // [N + 1, V]
  int32_t top_k = 0;
  float top_p = 1.0f;
  VerifyMethod method = VerifyMethod::standard;
  int64_t accept_salt = kVerifyAcceptSalt;
};

Trials run_trials(const Setting& s, int trials, int64_t seed0) {
  Trials t;
  t.N = s.N;
  t.V = s.V;
  const int chunk = std::max(1, std::min(trials, (1 << 22) / ((s.N + 1) * s.V)));
  for (int done = 0; done < trials; done += chunk) {
    const int R = std::min(chunk, trials - done);
    test::VerifyCase vc(R, s.N, s.V);
    vc.dtype = LogitsDType::f32;
    vc.method = s.method;
    vc.accept_salt = s.accept_salt;
    std::vector<bf16> base(static_cast<size_t>(R) * s.N * s.V);
    for (int r = 0; r < R; ++r) {
      vc.seeds[r] = seed0 + done + r;
      vc.anchors[r] = 100 + (done + r) % 7;
      vc.temps[r] = s.T;
      vc.top_k[r] = s.top_k;
      vc.top_p[r] = s.top_p;
      std::copy(s.base.begin(), s.base.end(), base.begin() + static_cast<size_t>(r) * s.N * s.V);
      for (int j = 0; j <= s.N; ++j)
        for (int v = 0; v < s.V; ++v) vc.tf32(r, j, v) = s.target[static_cast<size_t>(j) * s.V + v];
    }
    vc.draft_with_markov(base);
    vc.run();
    t.tokens.insert(t.tokens.end(), vc.out.begin(), vc.out.end());
    t.accepted.insert(t.accepted.end(), vc.num_accepted.begin(), vc.num_accepted.end());
  }
  return t;
}

// The target's law at position j (top-k / top-p masks computed here, in long double).
std::vector<double> target_law(const Setting& s, int j) {
  std::vector<float> l(s.target.begin() + static_cast<size_t>(j) * s.V,
                       s.target.begin() + static_cast<size_t>(j + 1) * s.V);
  std::vector<bool> masked(s.V, false);
  std::vector<int> ids(s.V);
  std::iota(ids.begin(), ids.end(), 0);
  std::sort(ids.begin(), ids.end(), [&](int a, int b) { return better(l[a], a, l[b], b); });
  if (s.top_k > 0)
    for (int i = s.top_k; i < s.V; ++i) masked[ids[i]] = true;
  if (s.top_p < 1.0f) {
    const std::vector<double> pk = test::softmax_law(l, s.T, masked);
    double before = 0;
    for (int id : ids) {
      if (masked[id]) continue;
      if (before >= s.top_p) masked[id] = true;
      before += pk[id];
    }
  }
  return test::softmax_law(l, s.T, masked);
}

std::vector<double> draft_law(const Setting& s, int j) {
  std::vector<float> l(s.V);
  for (int v = 0; v < s.V; ++v) l[v] = to_f32(s.base[static_cast<size_t>(j) * s.V + v]);
  return test::softmax_law(l, s.T);
}

// The chi-square of every output position 0..N over the trials that reached it.
std::vector<ChiSquare> per_position(const Setting& s, const Trials& t) {
  std::vector<ChiSquare> out;
  for (int i = 0; i <= s.N; ++i) {
    std::vector<int64_t> counts(s.V, 0);
    for (int r = 0; r < t.count(); ++r) {
      if (t.accepted[r] < i) continue;
      const int64_t x = t.tokens[static_cast<size_t>(r) * (s.N + 1) + i];
      EXPECT_TRUE(x >= 0 && x < s.V) << "trial " << r << " position " << i << " token " << x;
      if (x >= 0 && x < s.V) ++counts[x];
    }
    out.push_back(chi_square(counts, target_law(s, i)));
  }
  return out;
}

void expect_all_pass(const std::vector<ChiSquare>& cs, const std::string& what) {
  for (size_t i = 0; i < cs.size(); ++i)
    if (cs[i].n > 0) {
      EXPECT_TRUE(cs[i].pass()) << what << " position " << i << ": " << cs[i];
    }
}

Setting random_setting(uint64_t seed, int V, int N, float T, float scale) {
  test::Gen g(seed);
  Setting s;
  s.V = V;
  s.N = N;
  s.T = T;
  s.base = g.normal_bf16s(static_cast<size_t>(N) * V, scale);
  s.target.resize(static_cast<size_t>(N + 1) * V);
  for (auto& x : s.target) x = to_f32(to_bf16(g.uniform(-scale * 2, scale * 2)));
  return s;
}

// (a) V 4096, N 1 and 3, T 0.6 and 1, 10 V = 40 960 trials per setting (about 100 s
// of one core at N 3 on the 2-core CI machine).
void large_vocabulary(int N, float T) {
  const Setting s = random_setting(11 + N, 4096, N, T, 2.0f);
  const Trials t = run_trials(s, scaled(10 * 4096), 1'000'000);
  const std::vector<ChiSquare> cs = per_position(s, t);
  expect_all_pass(cs, "V 4096");
  for (size_t i = 0; i < cs.size(); ++i)
    std::cout << "  N " << N << " T " << T << " position " << i << ": " << cs[i] << "\n";
}
TEST(VerifyStats, ChiSquareLargeVocabularyN1T06) { large_vocabulary(1, 0.6f); }
TEST(VerifyStats, ChiSquareLargeVocabularyN1T1) { large_vocabulary(1, 1.0f); }
TEST(VerifyStats, ChiSquareLargeVocabularyN3T06) { large_vocabulary(3, 0.6f); }
TEST(VerifyStats, ChiSquareLargeVocabularyN3T1) { large_vocabulary(3, 1.0f); }

// (b) V 16, 200 000 trials, draft logits the negated target (most drafts are
// rejected), drafts by the Markov sampler; the verifier that reuses the draft's
// noise for u fails the same test.
Setting negated_setting() {
  Setting s = random_setting(23, 16, 3, 1.0f, 1.5f);
  for (int j = 0; j < s.N; ++j)
    for (int v = 0; v < s.V; ++v)
      s.target[static_cast<size_t>(j) * s.V + v] =
          -to_f32(s.base[static_cast<size_t>(j) * s.V + v]);
  return s;
}

TEST(VerifyStats, ChiSquareNegatedDraftFromMarkovSampler) {
  const Setting s = negated_setting();
  const Trials t = run_trials(s, scaled(200'000), 5'000'000);
  const std::vector<ChiSquare> cs = per_position(s, t);
  expect_all_pass(cs, "V 16");
  for (size_t i = 0; i < cs.size(); ++i) std::cout << "  position " << i << ": " << cs[i] << "\n";
}

TEST(VerifyStats, BrokenVerifierReusingDraftNoiseFails) {
  Setting s = negated_setting();
  s.accept_salt = kDraftNoiseSalt;  // u_j = the uniform behind the draft's noise of x_j
  const Trials t = run_trials(s, scaled(200'000), 5'000'000);
  const std::vector<ChiSquare> cs = per_position(s, t);
  double worst = 0;
  for (size_t i = 0; i < cs.size(); ++i) {
    std::cout << "  broken, position " << i << ": " << cs[i] << "\n";
    worst = std::max(worst, cs[i].stat / cs[i].threshold);
  }
  EXPECT_GT(worst, 1.0) << "the chi-square test did not catch a verifier that reuses the draft's "
                           "noise: it cannot tell a biased verifier from a lossless one";
}

// (3) The law of the accepted count: P(k) = prod_{i<k} a_i (1 - a_k) (k < N),
// prod a_i (k = N), a_i = sum min(p_i, q_i); 6 sigma bounds.
TEST(VerifyStats, AcceptedCountLaw) {
  for (const Setting& s : {negated_setting(), random_setting(31, 16, 3, 0.7f, 1.0f)}) {
    const Trials t = run_trials(s, scaled(200'000), 9'000'000);
    std::vector<double> a(s.N);
    for (int i = 0; i < s.N; ++i) {
      const std::vector<double> p = target_law(s, i), q = draft_law(s, i);
      for (int v = 0; v < s.V; ++v) a[i] += std::min(p[v], q[v]);
    }
    std::vector<int64_t> counts(s.N + 1, 0);
    for (int k : t.accepted) ++counts[k];
    double prefix = 1;
    for (int k = 0; k <= s.N; ++k) {
      const double pk = k < s.N ? prefix * (1 - a[k]) : prefix;
      if (k < s.N) prefix *= a[k];
      const double n = t.count(), mean = n * pk, sd = std::sqrt(n * pk * (1 - pk));
      EXPECT_LE(std::abs(counts[k] - mean), 6 * sd + 1)
          << "k " << k << ": " << counts[k] << " trials against " << mean << " expected (sd " << sd
          << ")";
    }
  }
}

// Ids outside top-k / top-p have probability 0: never emitted; the rest follow the
// truncated law.
TEST(VerifyStats, TopKAndTopPFollowTheTruncatedLaw) {
  for (int mode = 0; mode < 2; ++mode) {
    Setting s = random_setting(41 + mode, 16, 2, 1.0f, 1.5f);
    if (mode == 0) s.top_k = 5;
    if (mode == 1) s.top_p = 0.6f;
    const Trials t = run_trials(s, scaled(100'000), 20'000'000);
    SCOPED_TRACE(mode == 0 ? "top-k 5" : "top-p 0.6");
    expect_all_pass(per_position(s, t), "truncated");
  }
}

// (5) Block verification: the same chi-square (p and q the same at every
// position, where the per-position law of a round is the target's), and at least
// the token-wise mean accepted length on the same inputs and noise.
TEST(VerifyStats, BlockVerificationIsLosslessAndAcceptsMore) {
  Setting s = random_setting(53, 16, 4, 1.0f, 1.2f);
  for (int j = 1; j < s.N; ++j)
    std::copy(s.base.begin(), s.base.begin() + s.V, s.base.begin() + static_cast<size_t>(j) * s.V);
  for (int j = 1; j <= s.N; ++j)
    std::copy(s.target.begin(), s.target.begin() + s.V,
              s.target.begin() + static_cast<size_t>(j) * s.V);
  const int trials = scaled(200'000);
  s.method = VerifyMethod::block;
  const Trials block = run_trials(s, trials, 30'000'000);
  expect_all_pass(per_position(s, block), "block");
  s.method = VerifyMethod::standard;
  const Trials standard = run_trials(s, trials, 30'000'000);
  expect_all_pass(per_position(s, standard), "standard");
  double sum = 0, sum2 = 0;
  for (int r = 0; r < trials; ++r) {
    const double d = block.accepted[r] - standard.accepted[r];
    sum += d;
    sum2 += d * d;
  }
  const double mean = sum / trials,
               se = std::sqrt(std::max(0.0, sum2 / trials - mean * mean) / trials);
  const double mb = std::accumulate(block.accepted.begin(), block.accepted.end(), 0.0) / trials;
  std::cout << "  mean accepted: block " << mb << ", token-wise " << mb - mean << " (difference "
            << mean << ", se " << se << ")\n";
  EXPECT_GE(mean, -6 * se) << "block verification accepted fewer drafts than token-wise";
}

}  // namespace
}  // namespace sparkdraft
