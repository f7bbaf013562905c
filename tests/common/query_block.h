// Seeded inputs of the query-block op (ops/query_block.h), shared by the CPU test
// (against the formula) and the GPU test (against the CPU op): padding rows (cache
// slot -1, every fourth row from the third), odd page sizes, shuffled block tables.
#pragma once

#include <algorithm>
#include <cstdint>
#include <numeric>
#include <vector>

#include "common/random.h"
#include "sparkdraft/ops/query_block.h"

namespace sparkdraft::test {

struct QueryBlockData {
  int rows = 0, steps = 0, page_size = 0, max_pages = 0;
  int64_t mask_token = 151669;
  std::vector<int64_t> anchor_tokens, anchor_positions, cache_slots;
  std::vector<int32_t> block_tables;
  // Outputs (filled with a junk value so that an unwritten entry shows).
  std::vector<int64_t> ids, positions, slots, kv_lens, safe_anchor, safe_position;
  std::vector<int32_t> token_request;

  QueryBlockData(Gen& gen, int rows_, int steps_, int page_size_)
      : rows(rows_), steps(steps_), page_size(page_size_) {
    max_pages = (200 + steps + page_size - 1) / page_size + 1;
    std::vector<int32_t> pages(static_cast<size_t>(rows) * max_pages);
    std::iota(pages.begin(), pages.end(), 0);
    std::shuffle(pages.begin(), pages.end(), gen.engine());
    block_tables = pages;
    for (int r = 0; r < rows; ++r) {
      anchor_tokens.push_back(gen.integer(0, 151935));
      anchor_positions.push_back(gen.integer(0, 200));
      cache_slots.push_back(r % 4 == 2 ? -1 : r);
    }
    const size_t T = static_cast<size_t>(rows) * steps, R = static_cast<size_t>(rows);
    ids.assign(T, -7);
    positions.assign(T, -7);
    slots.assign(T, -7);
    token_request.assign(T, -7);
    kv_lens.assign(R, -7);
    safe_anchor.assign(R, -7);
    safe_position.assign(R, -7);
  }

  // Params over the host vectors (a GPU test swaps in device pointers).
  ops::QueryBlockParams params() {
    ops::QueryBlockParams p;
    p.rows = rows;
    p.steps = steps;
    p.page_size = page_size;
    p.max_pages = max_pages;
    p.mask_token = mask_token;
    p.anchor_tokens = anchor_tokens.data();
    p.anchor_positions = anchor_positions.data();
    p.cache_slots = cache_slots.data();
    p.block_tables = block_tables.data();
    p.ids = ids.data();
    p.positions = positions.data();
    p.slots = slots.data();
    p.token_request = token_request.data();
    p.kv_lens = kv_lens.data();
    p.safe_anchor = safe_anchor.data();
    p.safe_position = safe_position.data();
    return p;
  }
};

// Every (rows, steps, page_size) the tests sweep: 1 row, odd sizes, page 1.
inline const int kQueryBlockRows[] = {1, 3, 8, 33};
inline const int kQueryBlockSteps[] = {1, 4, 7};
inline const int kQueryBlockPages[] = {1, 5, 16};

}  // namespace sparkdraft::test
