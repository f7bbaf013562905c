// The contract of the paged KV cache (contract.md section 1).
//
// The cache of one layer: [pages * page_size, kv_heads, 2 * head_dim] bf16; head h of
// slot s holds K at [s][h][0, hd) and V at [s][h][hd, 2hd). kv_insert writes exact
// copies; a slot of -1 (padding) writes nothing. The slot of absolute position pos
// of a request is block_table[pos / page_size] * page_size + pos % page_size.
#pragma once

#include <cstdint>

#include "sparkdraft/core/hd.h"

namespace sparkdraft::ops {

SD_HD int64_t kv_slot(const int32_t* block_table, int page_size, int64_t pos) {
  return static_cast<int64_t>(block_table[pos / page_size]) * page_size + pos % page_size;
}

}  // namespace sparkdraft::ops
