// The CPU reference of the confidence head (ops/confidence.h): one value per
// (row, step), each the element arithmetic of core/confidence.h.
#include "sparkdraft/cpu/confidence.h"

#include "common/parallel.h"
#include "sparkdraft/core/confidence.h"

namespace sparkdraft::cpu {

void confidence(const ops::ConfidenceParams& p, int threads) {
  p.check();
  const int N = p.steps;
  parallel_for(static_cast<int64_t>(p.rows) * N, threads, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int64_t r = t / N, j = t % N;
      if (!p.runs(r, j)) {
        p.out[t] = 0.0f;
        continue;
      }
      const int64_t prev = j == 0 ? p.anchor_tokens[r] : p.draft_tokens[r * N + j - 1];
      const bf16* e = p.rank > 0 ? p.w1 + prev * p.rank : nullptr;
      p.out[t] = confidence_value(p.hidden_states + t * p.hidden, p.hidden, e, p.rank, p.weight,
                                  *p.bias, p.temperature(static_cast<int>(j)));
    }
  });
}

}  // namespace sparkdraft::cpu
