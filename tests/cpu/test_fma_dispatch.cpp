// The host loops compiled twice (common/fma_dispatch.h): the form with FMA
// instructions gives the baseline form's bits, on the Markov sampler's rows and on
// whole verify calls. Skips, and says so, on a CPU without FMA (one form only).
#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "common/bits.h"
#include "common/fma_dispatch.h"
#include "common/random.h"
#include "common/verify_case.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/cpu/ops.h"

namespace sparkdraft {
namespace {

// Runs fn with the baseline form forced, then with the FMA form.
template <class Fn>
auto both_forms(Fn fn) {
  detail::baseline_only() = true;
  auto base = fn();
  detail::baseline_only() = false;
  auto fma = fn();
  return std::make_pair(base, fma);
}

TEST(FmaDispatch, SampleRowGivesTheSameBitsInBothForms) {
  if (!detail::cpu_has_fma()) GTEST_SKIP() << "this CPU has no FMA: only the baseline form runs";
  test::Gen g(20261204);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  for (int n : {1, 2, 17, 4099}) {
    std::vector<bf16> l = g.bf16s(n, -30.0f, 30.0f);
    std::vector<int32_t> ids(n);
    for (int i = 0; i < n; ++i) ids[i] = static_cast<int32_t>((i * 7919) % 151936);
    for (int special = 0; special < 4; ++special) {
      if (n > 3 && special == 1) l[n / 2] = to_bf16(nan), l[n / 3] = to_bf16(nan);
      if (n > 3 && special == 2) l[1] = to_bf16(inf), l[n - 1] = to_bf16(-inf);
      if (special == 3)  // a tied row
        for (auto& x : l) x = to_bf16(2.0f);
      for (float T : {0.0f, 0.05f, 0.7f, 1.0f, 2.0f})
        for (uint32_t seed : {0u, 12345u, 0xffffffffu}) {
          const std::string what = "n " + std::to_string(n) + " special " +
                                   std::to_string(special) + " T " + std::to_string(T) +
                                   " step seed " + std::to_string(seed);
          const auto [a, b] =
              both_forms([&] { return cpu::sample_row(l.data(), n, 100, T, seed); });
          ASSERT_EQ(f32_bits(a.value), f32_bits(b.value)) << what;
          ASSERT_EQ(a.id, b.id) << what;
          const auto [c, d] =
              both_forms([&] { return cpu::sample_row_ids(l.data(), n, ids.data(), T, seed); });
          ASSERT_EQ(f32_bits(c.value), f32_bits(d.value)) << what << " (ids)";
          ASSERT_EQ(c.id, d.id) << what << " (ids)";
        }
    }
  }
}

TEST(FmaDispatch, VerifyGivesTheSameBitsInBothForms) {
  if (!detail::cpu_has_fma()) GTEST_SKIP() << "this CPU has no FMA: only the baseline form runs";
  const int R = 20, N = 3, V = 1031;
  for (VerifyMethod method : {VerifyMethod::standard, VerifyMethod::block}) {
    test::Gen g(77 + static_cast<int>(method));
    test::VerifyCase vc(R, N, V);
    vc.dtype = LogitsDType::f32;
    vc.method = method;
    const float temps[] = {0.0f, 0.05f, 0.7f, 1.0f, 2.0f};
    std::vector<bf16> base(static_cast<size_t>(R) * N * V);
    for (int r = 0; r < R; ++r) {
      vc.temps[r] = temps[r % 5];
      vc.seeds[r] = 5000 + r;
      if (r % 4 == 1) vc.top_k[r] = static_cast<int32_t>(g.integer(1, V));
      if (r % 4 == 2) vc.top_p[r] = g.uniform(0.05f, 1.0f);
      vc.cache_slots[r] = r % 6 == 5 ? -1 : r;
      for (int j = 0; j <= N; ++j)
        for (int v = 0; v < V; ++v) vc.set_target(r, j, v, g.uniform(-6.0f, 6.0f));
      for (int j = 0; j < N; ++j)
        for (int v = 0; v < V; ++v)
          base[(static_cast<size_t>(r) * N + j) * V + v] =
              to_bf16(vc.target(r, j, v) + g.uniform(-1.0f, 1.0f));
    }
    vc.draft_with_markov(base);
    const auto [a, b] = both_forms([&] {
      vc.run();
      return std::make_pair(vc.num_accepted, vc.out);
    });
    const std::string what = std::string("method ") + to_string(method);
    ASSERT_EQ(a.first, b.first) << what;
    ASSERT_EQ(a.second, b.second) << what;
  }
}

}  // namespace
}  // namespace sparkdraft
