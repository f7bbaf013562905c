// The adaptive-length schedulers of contract.md section 9.3-9.4: the threshold cut,
// the ranking (ties by row, then step; NaN and zero never candidates), Algorithm 1's
// greedy admission, the capacity's argmax over the whole curve, and the two-step lag.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "common/random.h"
#include "sparkdraft/core/confidence.h"
#include "sparkdraft/error.h"
#include "sparkdraft/schedule.h"

namespace sparkdraft {
namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

std::vector<int> threshold(const std::vector<float>& c, int rows, int steps, float t) {
  std::vector<int> n(static_cast<size_t>(rows), -1);
  threshold_lengths(c.data(), rows, steps, t, n.data());
  return n;
}

TEST(Schedule, ThresholdCutsAtTheFirstPositionBelow) {
  const std::vector<float> c = {0.9f, 0.8f, 0.3f, 0.9f,   // row 0: cut at step 2
                                0.2f, 0.9f, 0.9f, 0.9f,   // row 1: cut at step 0
                                0.7f, 0.7f, 0.7f, 0.7f,   // row 2: never cut
                                0.9f, kNaN, 0.9f, 0.9f};  // row 3: the NaN cuts
  EXPECT_EQ(threshold(c, 4, 4, 0.7f), (std::vector<int>{2, 0, 4, 1}));
  EXPECT_EQ(threshold(c, 4, 4, 0.0f), (std::vector<int>{4, 4, 4, 1}));
  EXPECT_EQ(threshold(c, 4, 4, 1.0f), (std::vector<int>{0, 0, 0, 0}));
  std::vector<int> n(4);
  for (float bad : {-0.1f, 1.5f, kNaN})
    EXPECT_THROW(threshold_lengths(c.data(), 4, 4, bad, n.data()), InvalidArgument) << bad;
  EXPECT_THROW(threshold_lengths(c.data(), 4, 0, 0.5f, n.data()), InvalidArgument);
  EXPECT_THROW(threshold_lengths(nullptr, 4, 4, 0.5f, n.data()), InvalidArgument);
}

TEST(Schedule, RankingOrdersBySurvivalThenRowThenStep) {
  // Row 0: a = 0.5, 0.25, 0.25 (c = 1 keeps a); row 1: 0.5, 0 (never), NaN (never);
  // row 2: padding (+0).
  const std::vector<float> c = {0.5f, 0.5f, 1.0f, 0.5f, 0.0f, kNaN, 0.0f, 0.0f, 0.0f};
  const std::vector<SurvivalCandidate> r = survival_ranking(c.data(), 3, 3);
  ASSERT_EQ(r.size(), 4u);
  const int want[4][2] = {{0, 0}, {1, 0}, {0, 1}, {0, 2}};
  for (size_t i = 0; i < r.size(); ++i) {
    EXPECT_EQ(r[i].row, want[i][0]) << "rank " << i;
    EXPECT_EQ(r[i].step, want[i][1]) << "rank " << i;
  }
  EXPECT_EQ(r[0].survival, 0.5f);
  EXPECT_EQ(r[3].survival, 0.25f);
}

// Every prefix of the ranking is a prefix of every row (seeded, ties included).
TEST(Schedule, AdmittingAnyCapacityAdmitsPrefixes) {
  const uint64_t seed = 2601;
  test::Gen rng(seed);
  const int rows = 7, steps = 6;
  std::vector<float> c(rows * steps);
  for (float& x : c) x = static_cast<float>(rng.integer(0, 4)) / 4.0f;  // many ties, zeros, ones
  const std::vector<SurvivalCandidate> ranked = survival_ranking(c.data(), rows, steps);
  std::vector<int> n(rows);
  for (int64_t cap = 0; cap <= static_cast<int64_t>(ranked.size()) + 2; ++cap) {
    survival_admit(c.data(), rows, steps, cap, n.data());
    int total = 0;
    std::vector<int> seen(rows, 0);
    for (int64_t i = 0; i < std::min<int64_t>(cap, static_cast<int64_t>(ranked.size())); ++i) {
      const SurvivalCandidate& k = ranked[static_cast<size_t>(i)];
      EXPECT_EQ(k.step, seen[static_cast<size_t>(k.row)]) << "capacity " << cap << ": not a prefix";
      seen[static_cast<size_t>(k.row)] = k.step + 1;
    }
    for (int r = 0; r < rows; ++r) {
      EXPECT_EQ(n[static_cast<size_t>(r)], seen[static_cast<size_t>(r)]) << "capacity " << cap;
      total += n[static_cast<size_t>(r)];
    }
    EXPECT_EQ(total, std::min<int64_t>(cap, static_cast<int64_t>(ranked.size())));
  }
}

TEST(Schedule, GreedyStopsAtTheFirstNonImprovement) {
  // Two rows: a = 0.9, 0.45 and 0.8, 0.08. Ranking: (0,0) .9, (1,0) .8, (0,1) .45, (1,1) .08.
  const std::vector<float> c = {0.9f, 0.5f, 0.8f, 0.1f};
  // theta_K = tau_K * sps[2 + K], tau = 2, 2.9, 3.7, 4.15, 4.23.
  // A flat table admits everything; a falling one stops where the gain no longer pays.
  std::vector<int> n(2);
  survival_greedy_lengths(c.data(), 2, 2, {1, 1, 1, 1, 1, 1, 1}, n.data());
  EXPECT_EQ(n, (std::vector<int>{2, 2}));
  // sps 2.9*0.8 = 2.32 > 2; 3.7*0.6 = 2.22 < 2.32: stop at K = 1.
  survival_greedy_lengths(c.data(), 2, 2, {1, 1, 1.0, 0.8, 0.6, 0.6, 0.6}, n.data());
  EXPECT_EQ(n, (std::vector<int>{1, 0}));
  // A table that ends early bounds the batch (rows + K < size).
  survival_greedy_lengths(c.data(), 2, 2, {1, 1, 1, 1}, n.data());
  EXPECT_EQ(n, (std::vector<int>{1, 0}));
  EXPECT_THROW(survival_greedy_lengths(c.data(), 2, 2, {1, 1}, n.data()), InvalidArgument);
  EXPECT_THROW(survival_greedy_lengths(c.data(), 2, 2, {1, 0, 1}, n.data()), InvalidArgument);
  EXPECT_THROW(survival_greedy_lengths(c.data(), 2, 2, {1, NAN, 1}, n.data()), InvalidArgument);
}

TEST(Schedule, CapacityScansTheWholeStaircase) {
  const std::vector<float> c = {0.9f, 0.5f, 0.8f, 0.1f};
  // theta: K0 2*1 = 2, K1 2.9*0.6 = 1.74, K2 3.7*0.6 = 2.22, K3 4.15*0.6 = 2.49,
  // K4 4.23*0.6 = 2.538: greedy stops at 0, the capacity is 4.
  const std::vector<double> stairs = {1, 1, 1.0, 0.6, 0.6, 0.6, 0.6};
  std::vector<int> n(2);
  survival_greedy_lengths(c.data(), 2, 2, stairs, n.data());
  EXPECT_EQ(n, (std::vector<int>{0, 0}));
  EXPECT_EQ(survival_capacity(c.data(), 2, 2, stairs), 4);
  // Ties keep the smallest K: every theta equal.
  const std::vector<float> zero_gain = {0.0f, 0.0f, 0.0f, 0.0f};
  EXPECT_EQ(survival_capacity(zero_gain.data(), 2, 2, {1, 1, 1, 1, 1}), 0);
  EXPECT_EQ(survival_capacity(c.data(), 2, 2, {1, 1, 1}), 0);  // no room beyond the rows
}

TEST(Schedule, LaggedSchedulerUsesTheCapacityOfTwoStepsBefore) {
  const std::vector<double> sps = {1, 1, 1, 1, 1, 1, 1, 1, 1};  // flat: capacity = candidates
  LaggedSurvivalScheduler s(sps, 1);
  const std::vector<float> all = {0.9f, 0.9f, 0.9f, 0.8f, 0.8f, 0.8f};  // 6 candidates
  const std::vector<float> two = {0.9f, 0.0f, 0.0f, 0.8f, 0.0f, 0.0f};  // 2 candidates
  std::vector<int> n(2);
  s.schedule(all.data(), 2, 3, n.data());  // step 0: the initial capacity
  EXPECT_EQ(s.last_capacity(), 1);
  EXPECT_EQ(n, (std::vector<int>{1, 0}));
  s.schedule(two.data(), 2, 3, n.data());  // step 1: still the initial capacity
  EXPECT_EQ(s.last_capacity(), 1);
  EXPECT_EQ(n, (std::vector<int>{1, 0}));
  s.schedule(two.data(), 2, 3, n.data());  // step 2: step 0's capacity (6), 2 candidates
  EXPECT_EQ(s.last_capacity(), 6);
  EXPECT_EQ(n, (std::vector<int>{1, 1}));
  s.schedule(all.data(), 2, 3, n.data());  // step 3: step 1's capacity (2): a .9, .81
  EXPECT_EQ(s.last_capacity(), 2);
  EXPECT_EQ(n, (std::vector<int>{2, 0}));
  s.schedule(all.data(), 2, 3, n.data());  // step 4: step 2's capacity (2)
  EXPECT_EQ(n, (std::vector<int>{2, 0}));
  s.schedule(all.data(), 2, 3, n.data());  // step 5: step 3's capacity (6)
  EXPECT_EQ(n, (std::vector<int>{3, 3}));
  EXPECT_EQ(s.step(), 6);
  // A refused input changes nothing.
  EXPECT_THROW(s.schedule(all.data(), 9, 3, n.data()), InvalidArgument);  // table < rows + 1
  EXPECT_EQ(s.step(), 6);
  EXPECT_THROW(LaggedSurvivalScheduler({1, 1}, -1), InvalidArgument);
  EXPECT_THROW(LaggedSurvivalScheduler({}, 0), InvalidArgument);
}

}  // namespace
}  // namespace sparkdraft
