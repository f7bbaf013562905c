// Adaptive draft length from the confidence head (contract.md section 9.2-9.4): per
// request row, how many of its N drafts to verify. Host functions over the
// confidences [rows, N] that propose returns; the element arithmetic (survival
// products, the threshold cut) is core/confidence.h, which device code can call too.
//
//   candidate (r, j): a_{r,j} = c_{r,0} * ... * c_{r,j} (fp32, left to right) > 0
//   ranking: larger a first, then lower row, then lower j (a row's candidates in
//            increasing j: every prefix of the ranking is a prefix of each row)
//   tau_0 = rows, tau_K = tau_{K-1} + a_K, theta_K = tau_K * sps[rows + K]   (fp64)
// Every output is lengths[r] in [0, N]: verify the drafts x_1 .. x_{lengths[r]}.
#pragma once

#include <cstdint>
#include <vector>

namespace sparkdraft {

// Section 9.3: lengths[r] = the number of leading c_{r,j} >= threshold (a NaN cuts).
// InvalidArgument unless threshold is in [0, 1] and rows >= 0, steps >= 1.
void threshold_lengths(const float* confidences, int rows, int steps, float threshold,
                       int* lengths);

// The candidates of section 9.2 in ranking order (row, step) with their a.
struct SurvivalCandidate {
  int row = 0, step = 0;
  float survival = 0.0f;
};
std::vector<SurvivalCandidate> survival_ranking(const float* confidences, int rows, int steps);

// A steps-per-second table: sps[b] for a verify batch of b tokens, b = 0 .. size-1
// (what `bench` profiles once). InvalidArgument for an empty table or a value that
// is not finite and > 0.
void check_sps_table(const std::vector<double>& sps);

// Section 9.4, Algorithm 1 as written: admit in ranking order while theta improves
// (strictly), stop at the first candidate that does not. InvalidArgument unless the
// table covers the rows (sps.size() > rows).
void survival_greedy_lengths(const float* confidences, int rows, int steps,
                             const std::vector<double>& sps, int* lengths);

// Section 9.4: K*, the smallest K in [0, Kmax] with the largest theta_K (the whole
// curve, no early stop); Kmax = min(candidates, sps.size() - 1 - rows).
int64_t survival_capacity(const float* confidences, int rows, int steps,
                          const std::vector<double>& sps);

// The first min(capacity, candidates) candidates of this call's ranking, as lengths.
void survival_admit(const float* confidences, int rows, int steps, int64_t capacity, int* lengths);

// The production scheduler (section 9.4, lagged): step t admits by the capacity
// computed from the confidences of step t - 2 (initial_capacity at steps 0 and 1),
// so the decision never waits on, or depends on, this step's capacity.
class LaggedSurvivalScheduler {
 public:
  // InvalidArgument for a bad table or a negative initial capacity.
  LaggedSurvivalScheduler(std::vector<double> sps, int64_t initial_capacity);
  // Lengths for this step's confidences; records this step's capacity for step t + 2.
  void schedule(const float* confidences, int rows, int steps, int* lengths);
  // The capacity this call used (for tests and logs) and the step count so far.
  int64_t last_capacity() const { return last_capacity_; }
  int64_t step() const { return step_; }

 private:
  std::vector<double> sps_;
  int64_t pending_[2];  // capacities for steps t and t + 1
  int64_t last_capacity_ = 0;
  int64_t step_ = 0;
};

}  // namespace sparkdraft
