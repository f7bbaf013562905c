// The contract of the paged KV cache (contract.md section 1).
//
// The cache of one layer: [pages * page_size, kv_heads, 2 * head_dim] bf16; head h of
// slot s holds K at [s][h][0, hd) and V at [s][h][hd, 2hd). kv_insert writes exact
// copies; a slot of -1 (padding) writes nothing. The slot of absolute position pos
// of a request is block_table[pos / page_size] * page_size + pos % page_size.
#pragma once

#include <cstdint>

#include <string>

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/hd.h"
#include "sparkdraft/ops/require.h"

namespace sparkdraft::ops {

// kv_insert: K and V of `tokens` tokens (rows of k_stride / v_stride, kv_heads heads
// of head_dim values each) copied into the cache at slots[t].
struct KvInsertParams {
  const bf16* k = nullptr;
  int64_t k_stride = 0;
  const bf16* v = nullptr;
  int64_t v_stride = 0;
  int tokens = 0;
  int kv_heads = 0;
  int head_dim = 0;
  const int64_t* slots = nullptr;  // [tokens], each -1 or a slot of the cache
  bf16* cache = nullptr;

  void check() const {
    const char* op = "kv_insert";
    require(tokens >= 0, op, "tokens must be >= 0, got " + std::to_string(tokens));
    require(kv_heads >= 1, op, "kv_heads must be >= 1, got " + std::to_string(kv_heads));
    require(head_dim >= 1, op, "head_dim must be >= 1, got " + std::to_string(head_dim));
    const int64_t width = static_cast<int64_t>(kv_heads) * head_dim;
    require(width <= 0x3fffffff, op, "kv_heads * head_dim too large");
    require(
        k_stride >= width, op,
        "k_stride " + std::to_string(k_stride) + " < kv_heads * head_dim " + std::to_string(width));
    require(
        v_stride >= width, op,
        "v_stride " + std::to_string(v_stride) + " < kv_heads * head_dim " + std::to_string(width));
    require(tokens == 0 || (k != nullptr && v != nullptr && slots != nullptr && cache != nullptr),
            op, "k, v, slots and cache must not be null");
  }
};

inline KvInsertParams kv_insert_of(const bf16* k, int64_t k_stride, const bf16* v, int64_t v_stride,
                                   int tokens, int kv_heads, int head_dim, const int64_t* slots,
                                   bf16* cache) {
  KvInsertParams p;
  p.k = k;
  p.k_stride = k_stride;
  p.v = v;
  p.v_stride = v_stride;
  p.tokens = tokens;
  p.kv_heads = kv_heads;
  p.head_dim = head_dim;
  p.slots = slots;
  p.cache = cache;
  return p;
}

SD_HD int64_t kv_slot(const int32_t* block_table, int page_size, int64_t pos) {
  return static_cast<int64_t>(block_table[pos / page_size]) * page_size + pos % page_size;
}

}  // namespace sparkdraft::ops
