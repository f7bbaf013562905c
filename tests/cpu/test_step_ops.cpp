// Direct tests of the CPU ops the draft step adds around the model's ops: the
// query block (ops/query_block.h) against its formula, written out here entry by
// entry, and the residual's widening (ops/embed.h).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/bits.h"
#include "common/query_block.h"
#include "common/random.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cpu {
namespace {

using test::Gen;
using test::QueryBlockData;
using test::same_bits;

TEST(CpuOpsQueryBlock, MatchesTheFormula) {
  uint64_t seed = 0x5D1100;
  for (int rows : test::kQueryBlockRows)
    for (int steps : test::kQueryBlockSteps)
      for (int page : test::kQueryBlockPages) {
        ++seed;
        SCOPED_TRACE("rows " + std::to_string(rows) + " steps " + std::to_string(steps) +
                     " page_size " + std::to_string(page));
        Gen gen(seed);
        QueryBlockData d(gen, rows, steps, page);
        prepare_query_block(d.params());
        for (int r = 0; r < rows; ++r) {
          const bool pad = d.cache_slots[r] < 0;
          const int64_t a = pad ? 0 : d.anchor_positions[r];
          const int64_t anchor = pad ? 0 : d.anchor_tokens[r];
          for (int j = 0; j < steps; ++j) {
            const size_t t = static_cast<size_t>(r) * steps + j;
            const int64_t pos = a + j;
            const int64_t page_id =
                d.block_tables[static_cast<size_t>(r) * d.max_pages + pos / page];
            const std::string where = "row " + std::to_string(r) + " step " + std::to_string(j);
            EXPECT_EQ(d.ids[t], j == 0 ? anchor : d.mask_token) << where;
            EXPECT_EQ(d.positions[t], pos) << where;
            EXPECT_EQ(d.slots[t], pad ? -1 : page_id * page + pos % page) << where;
            EXPECT_EQ(d.token_request[t], pad ? -1 : r) << where;
          }
          EXPECT_EQ(d.kv_lens[r], a + steps) << "row " << r;
          EXPECT_EQ(d.safe_anchor[r], anchor) << "row " << r;
          EXPECT_EQ(d.safe_position[r], a) << "row " << r;
        }
      }
}

TEST(CpuOpsQueryBlock, BadParamsAreRefused) {
  Gen gen(0x5D1101);
  QueryBlockData d(gen, 2, 3, 4);
  ops::QueryBlockParams p = d.params();
  p.rows = 0;
  EXPECT_THROW(prepare_query_block(p), InvalidArgument);
  p = d.params();
  p.page_size = 0;
  EXPECT_THROW(prepare_query_block(p), InvalidArgument);
  p = d.params();
  p.slots = nullptr;
  EXPECT_THROW(prepare_query_block(p), InvalidArgument);
  p = d.params();
  p.block_tables = nullptr;
  EXPECT_THROW(prepare_query_block(p), InvalidArgument);
}

// The fill-in layout's drafted rows (ops/query_block.h, contract.md section 14): every
// element of out is the element of in the formula names, written out here entry by entry.
TEST(CpuOpsDraftedRows, MatchesTheFormula) {
  uint64_t seed = 0x5D1200;
  for (int rows : {1, 2, 5})
    for (int slots : {2, 8, 9})
      for (int hidden : {1, 3, 64}) {
        ++seed;
        const int drafted = slots - 1, first = 1;
        SCOPED_TRACE("rows " + std::to_string(rows) + " slots " + std::to_string(slots) +
                     " hidden " + std::to_string(hidden));
        Gen gen(seed);
        std::vector<bf16> in(static_cast<size_t>(rows) * slots * hidden);
        for (auto& v : in) v = bf16{static_cast<uint16_t>(gen.integer(0, 0xffff))};
        std::vector<bf16> out(static_cast<size_t>(rows) * drafted * hidden, bf16{0x1234});
        select_drafted_rows(
            ops::DraftedRowsParams{rows, slots, drafted, first, hidden, in.data(), out.data()});
        for (int r = 0; r < rows; ++r)
          for (int j = 0; j < drafted; ++j)
            for (int i = 0; i < hidden; ++i)
              ASSERT_EQ(out[(static_cast<size_t>(r) * drafted + j) * hidden + i].bits,
                        in[(static_cast<size_t>(r) * slots + first + j) * hidden + i].bits)
                  << "row " << r << " slot " << first + j << " element " << i;
      }
}

TEST(CpuOpsDraftedRows, BadParamsAreRefused) {
  std::vector<bf16> in(64), out(64);
  const ops::DraftedRowsParams good{2, 4, 3, 1, 8, in.data(), out.data()};
  EXPECT_NO_THROW(select_drafted_rows(good));
  ops::DraftedRowsParams p = good;
  p.first = 2;  // first + drafted > slots
  EXPECT_THROW(select_drafted_rows(p), InvalidArgument);
  p = good;
  p.drafted = 0;
  EXPECT_THROW(select_drafted_rows(p), InvalidArgument);
  p = good;
  p.rows = 0;
  EXPECT_THROW(select_drafted_rows(p), InvalidArgument);
  p = good;
  p.out = nullptr;
  EXPECT_THROW(select_drafted_rows(p), InvalidArgument);
  p = good;
  p.out = in.data();
  EXPECT_THROW(select_drafted_rows(p), InvalidArgument);
}

// out[i] = f32(x[i]): the bf16 bits in the upper half, for every bf16 pattern
// (NaN payloads, signed zeros, infinities, subnormals).
TEST(CpuOpsWiden, EveryBf16PatternWidensExactly) {
  std::vector<bf16> x(65536);
  for (uint32_t b = 0; b < 65536; ++b) x[b].bits = static_cast<uint16_t>(b);
  std::vector<float> out(x.size(), 1234.5f), want(x.size());
  for (uint32_t b = 0; b < 65536; ++b) {
    const uint32_t wide = b << 16;
    std::memcpy(&want[b], &wide, sizeof(float));
  }
  widen(ops::widen_of(x.data(), static_cast<int64_t>(x.size()), out.data()));
  EXPECT_TRUE(same_bits(out, want));
  EXPECT_THROW(widen(ops::widen_of(x.data(), -1, out.data())), InvalidArgument);
}

}  // namespace
}  // namespace sparkdraft::cpu
