// cpu::attention against the scalar reference of the definition (common/
// attention_case.h: mma_chain per element, the literal chunk max / sum order and
// the fold), bit for bit, over odd head dims, kv_len off the chunk grid, windows,
// causal and not, GQA groups 1/4/8, padding tokens, NaN in the slots past kv_len,
// unmapped pages below the window, and NaN/inf queries; with 1, 2 and 3 threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "common/attention_case.h"
#include "common/bits.h"
#include "common/random.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cpu {
namespace {

using test::AttentionCase;
using test::same_bits;

std::vector<AttentionCase> cases() { return test::attention_cases(); }

TEST(CpuAttention, MatchesTheScalarDefinitionBitForBit) {
  uint64_t seed = 0xA77E;
  for (const AttentionCase& c : cases()) {
    ++seed;
    SCOPED_TRACE(test::describe(c));
    test::Gen gen(seed);
    const test::AttentionData d = test::make_attention_data(gen, c);
    const std::vector<bf16> want = test::reference_attention(d);
    const int width = c.heads * c.head_dim;
    // The traps stay out: every row without a special query is finite.
    for (int t = 0; t < d.tokens; ++t)
      for (int i = 0; i < width; ++i)
        if (!c.special_q || t >= 2) {
          ASSERT_FALSE(bf16_is_nan(want[static_cast<size_t>(t) * width + i]))
              << "reference leaked NaN at token " << t << " index " << i;
        }
    for (int threads : {1, 2, 3}) {
      std::vector<bf16> out(d.out_size(), bf16{0x7e7e});
      attention(d.params(), d.q.data(), d.cache.data(), out.data(), threads);
      EXPECT_TRUE(same_bits(out, want, {width})) << "threads " << threads;
    }
  }
}

TEST(CpuAttention, SpecialQueriesGiveNaNOnlyInTheirHeads) {
  test::Gen gen(0xA77F);
  AttentionCase c{4, 2, 64, 0, false, {90, 33}, 3, 16, 1, true};
  const test::AttentionData d = test::make_attention_data(gen, c);
  std::vector<bf16> out(d.out_size());
  attention(d.params(), d.q.data(), d.cache.data(), out.data(), 2);
  const int hd = c.head_dim, width = c.heads * hd;
  // Token 0 head 1 has a NaN in q: its scores are NaN, the max ignores them (-inf),
  // p = exp(NaN) = NaN: the whole head is NaN. Token 1 head 0 has +inf.
  for (int i = 0; i < hd; ++i) EXPECT_TRUE(bf16_is_nan(out[static_cast<size_t>(hd + i)])) << i;
  for (int t = 2; t < d.tokens; ++t)
    for (int i = 0; i < width; ++i)
      EXPECT_FALSE(bf16_is_nan(out[static_cast<size_t>(t) * width + i])) << t << " " << i;
  EXPECT_TRUE(same_bits(out, test::reference_attention(d), {width}));
}

TEST(CpuAttention, WindowOfOneIsTheQueryPositionsValue) {
  // window 1, causal: each query reads only its own position, p = exp(0) = 1, l = 1,
  // o = chain(1, v) = v exactly.
  test::Gen gen(0xA780);
  AttentionCase c{4, 2, 40, 1, true, {5, 130, 1}, 1, 16, 1, false};
  const test::AttentionData d = test::make_attention_data(gen, c);
  std::vector<bf16> out(d.out_size());
  attention(d.params(), d.q.data(), d.cache.data(), out.data(), 2);
  const int hd = c.head_dim, width = c.heads * hd;
  for (int t = 0; t < d.tokens; ++t) {
    const int r = d.token_request[static_cast<size_t>(t)];
    for (int h = 0; h < c.heads; ++h)
      for (int i = 0; i < hd; ++i) {
        const bf16 o = out[static_cast<size_t>(t) * width + h * hd + i];
        if (r < 0) {
          ASSERT_EQ(o.bits, 0u) << "padding token " << t;
          continue;
        }
        const int64_t pos = d.positions[static_cast<size_t>(t)];
        const int64_t page =
            d.block_tables[static_cast<size_t>(r) * d.max_pages + pos / c.page_size];
        const int64_t slot = page * c.page_size + pos % c.page_size;
        const bf16 v = d.cache[static_cast<size_t>((slot * c.kv_heads + h / 2) * 2 * hd + hd + i)];
        ASSERT_EQ(o.bits, v.bits) << "token " << t << " head " << h << " dim " << i;
      }
  }
}

TEST(CpuAttention, RefusesBadValues) {
  test::Gen gen(0xA781);
  AttentionCase c{4, 2, 16, 0, false, {40, 20}, 2, 16, 0, false};
  test::AttentionData d = test::make_attention_data(gen, c);
  std::vector<bf16> out(d.out_size());
  auto run = [&] { attention(d.params(), d.q.data(), d.cache.data(), out.data()); };
  EXPECT_NO_THROW(run());
  auto expect_refused = [&](auto mutate) {
    test::AttentionData bad = d;
    mutate(bad);
    EXPECT_THROW(attention(bad.params(), bad.q.data(), bad.cache.data(), out.data()),
                 InvalidArgument);
  };
  expect_refused([](test::AttentionData& b) { b.token_request[0] = 2; });  // >= requests
  expect_refused([](test::AttentionData& b) { b.token_request[0] = -2; });
  expect_refused([](test::AttentionData& b) { b.kv_lens[0] = 0; });
  expect_refused([](test::AttentionData& b) { b.positions[0] = -1; });
  expect_refused([](test::AttentionData& b) { b.block_tables[1] = -1; });  // inside [lo, hi)
  expect_refused([](test::AttentionData& b) {  // window start past kv_len
    b.c.window = 2;
    b.positions[0] = 45;
  });
  expect_refused([](test::AttentionData& b) { b.c.kv_heads = 3; });
  expect_refused([](test::AttentionData& b) { b.c.window = -1; });
}

}  // namespace
}  // namespace sparkdraft::cpu
