// The schedulers of contract.md section 9.3-9.4 (see sparkdraft/schedule.h).
#include "sparkdraft/schedule.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "sparkdraft/core/confidence.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

// lengths may be null only where the function writes none (`writes` false).
void check_shape(const char* what, const float* confidences, int rows, int steps,
                 const int* lengths, bool writes = true) {
  if (rows < 0 || steps < 1)
    throw InvalidArgument(std::string(what) + ": rows must be >= 0 and steps >= 1 (got " +
                          std::to_string(rows) + ", " + std::to_string(steps) + ")");
  if (rows > 0 && (!confidences || (writes && lengths == nullptr)))
    throw InvalidArgument(std::string(what) + ": an array is null");
}

void check_covers(const char* what, const std::vector<double>& sps, int rows) {
  check_sps_table(sps);
  if (sps.size() <= static_cast<size_t>(rows))
    throw InvalidArgument(std::string(what) + ": the steps-per-second table has " +
                          std::to_string(sps.size()) + " entries, fewer than rows + 1 = " +
                          std::to_string(rows + 1) + " (every row verifies at least one token)");
}

// Lengths from the first `k` candidates of the ranking.
void lengths_of(const std::vector<SurvivalCandidate>& ranked, size_t k, int rows, int* lengths) {
  std::fill(lengths, lengths + rows, 0);
  for (size_t i = 0; i < k; ++i) lengths[ranked[i].row] = ranked[i].step + 1;
}

}  // namespace

void threshold_lengths(const float* confidences, int rows, int steps, float threshold,
                       int* lengths) {
  check_shape("threshold_lengths", confidences, rows, steps, lengths);
  if (!(threshold >= 0.0f && threshold <= 1.0f))
    throw InvalidArgument("threshold_lengths: the threshold must be in [0, 1] (got " +
                          std::to_string(threshold) + ")");
  for (int r = 0; r < rows; ++r)
    lengths[r] = threshold_length(confidences + static_cast<int64_t>(r) * steps, steps, threshold);
}

std::vector<SurvivalCandidate> survival_ranking(const float* confidences, int rows, int steps) {
  check_shape("survival_ranking", confidences, rows, steps, nullptr, false);
  std::vector<SurvivalCandidate> ranked;
  std::vector<float> a(static_cast<size_t>(steps));
  for (int r = 0; r < rows; ++r) {
    survival_products(confidences + static_cast<int64_t>(r) * steps, steps, a.data());
    for (int j = 0; j < steps; ++j)
      if (a[static_cast<size_t>(j)] > 0.0f) ranked.push_back({r, j, a[static_cast<size_t>(j)]});
  }
  // A strict weak order on distinct (row, step): the ranking is unique.
  std::sort(ranked.begin(), ranked.end(),
            [](const SurvivalCandidate& x, const SurvivalCandidate& y) {
              if (x.survival != y.survival) return x.survival > y.survival;
              if (x.row != y.row) return x.row < y.row;
              return x.step < y.step;
            });
  return ranked;
}

void check_sps_table(const std::vector<double>& sps) {
  if (sps.empty()) throw InvalidArgument("steps-per-second table: empty");
  for (size_t b = 0; b < sps.size(); ++b)
    if (!(std::isfinite(sps[b]) && sps[b] > 0.0))
      throw InvalidArgument("steps-per-second table: entry " + std::to_string(b) +
                            " must be finite and > 0 (got " + std::to_string(sps[b]) + ")");
}

void survival_greedy_lengths(const float* confidences, int rows, int steps,
                             const std::vector<double>& sps, int* lengths) {
  check_shape("survival_greedy_lengths", confidences, rows, steps, lengths);
  check_covers("survival_greedy_lengths", sps, rows);
  const std::vector<SurvivalCandidate> ranked = survival_ranking(confidences, rows, steps);
  double tau = rows, theta = tau * sps[static_cast<size_t>(rows)];
  size_t k = 0;
  while (k < ranked.size() && static_cast<size_t>(rows) + k + 1 < sps.size()) {
    const double tau_next = tau + static_cast<double>(ranked[k].survival);
    const double theta_next = tau_next * sps[static_cast<size_t>(rows) + k + 1];
    if (!(theta_next > theta)) break;
    tau = tau_next, theta = theta_next, ++k;
  }
  lengths_of(ranked, k, rows, lengths);
}

int64_t survival_capacity(const float* confidences, int rows, int steps,
                          const std::vector<double>& sps) {
  check_shape("survival_capacity", confidences, rows, steps, nullptr, false);
  check_covers("survival_capacity", sps, rows);
  const std::vector<SurvivalCandidate> ranked = survival_ranking(confidences, rows, steps);
  const size_t kmax = std::min(ranked.size(), sps.size() - 1 - static_cast<size_t>(rows));
  double tau = rows, best = tau * sps[static_cast<size_t>(rows)];
  int64_t best_k = 0;
  for (size_t k = 1; k <= kmax; ++k) {
    tau = tau + static_cast<double>(ranked[k - 1].survival);
    const double theta = tau * sps[static_cast<size_t>(rows) + k];
    if (theta > best) best = theta, best_k = static_cast<int64_t>(k);
  }
  return best_k;
}

void survival_admit(const float* confidences, int rows, int steps, int64_t capacity, int* lengths) {
  check_shape("survival_admit", confidences, rows, steps, lengths);
  if (capacity < 0)
    throw InvalidArgument("survival_admit: capacity must be >= 0 (got " + std::to_string(capacity) +
                          ")");
  const std::vector<SurvivalCandidate> ranked = survival_ranking(confidences, rows, steps);
  lengths_of(ranked, std::min(ranked.size(), static_cast<size_t>(capacity)), rows, lengths);
}

LaggedSurvivalScheduler::LaggedSurvivalScheduler(std::vector<double> sps, int64_t initial_capacity)
    : sps_(std::move(sps)), pending_{initial_capacity, initial_capacity} {
  check_sps_table(sps_);
  if (initial_capacity < 0)
    throw InvalidArgument("LaggedSurvivalScheduler: the initial capacity must be >= 0 (got " +
                          std::to_string(initial_capacity) + ")");
}

void LaggedSurvivalScheduler::schedule(const float* confidences, int rows, int steps,
                                       int* lengths) {
  // This step's capacity first: a refused input leaves the state unchanged.
  const int64_t next = survival_capacity(confidences, rows, steps, sps_);
  survival_admit(confidences, rows, steps, pending_[0], lengths);
  last_capacity_ = pending_[0];
  pending_[0] = pending_[1];
  pending_[1] = next;
  ++step_;
}

}  // namespace sparkdraft
