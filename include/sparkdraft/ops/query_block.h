// The contract of the query block (contract.md section 1): the bookkeeping that turns a
// propose batch into the backbone's tokens. Per row r and step j (t = r*N + j):
//   ids[t]           = j == 0 ? anchor : mask_token
//   positions[t]     = a + j
//   slots[t]         = padding ? -1 : block_table[(a+j) / page] * page + (a+j) % page
//   token_request[t] = padding ? -1 : r
//   kv_lens[r]       = a + N
//   safe_anchor[r], safe_position[r] = the anchor and a, what the Markov loop reads
// `steps` is the query slots per request: N in the anchor layout, 1 + N in the fill-in
// layout (contract.md section 14), whose slots 1 .. N are the drafted rows.
// A padding row (cache slot -1) runs as anchor 0 at position 0 (a = 0): it inserts no
// K/V and attends to nothing; its tokens are don't-care. Exact integer bookkeeping:
// cpu::prepare_query_block and cuda::prepare_query_block write the same values.
//
// The drafted rows (DraftedRowsParams, contract.md section 14): a copy, no arithmetic,
//   out[(r*drafted + j)*hidden + i] = in[(r*slots + first + j)*hidden + i]
// for r < rows, j < drafted, i < hidden: the rows of the backbone's output that reach
// lm_head, the Markov loop and the confidence head. cpu::select_drafted_rows and
// cuda::select_drafted_rows copy the same bits (padding rows included).
#pragma once

#include <cstdint>

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/ops/require.h"

namespace sparkdraft::ops {

struct QueryBlockParams {
  int rows = 0, steps = 0, page_size = 0, max_pages = 0;
  int64_t mask_token = 0;
  // Inputs [rows] (block_tables [rows, max_pages]).
  const int64_t* anchor_tokens = nullptr;
  const int64_t* anchor_positions = nullptr;
  const int64_t* cache_slots = nullptr;
  const int32_t* block_tables = nullptr;
  // Outputs: [rows * steps] and [rows].
  int64_t* ids = nullptr;
  int64_t* positions = nullptr;
  int64_t* slots = nullptr;
  int32_t* token_request = nullptr;
  int64_t* kv_lens = nullptr;
  int64_t* safe_anchor = nullptr;
  int64_t* safe_position = nullptr;

  // The only validation of the fields (InvalidArgument naming the first bad one).
  void check() const {
    const char* op = "prepare_query_block";
    require(rows >= 1 && steps >= 1 && page_size >= 1 && max_pages >= 1, op,
            "rows, steps, page_size and max_pages must be >= 1");
    require(anchor_tokens && anchor_positions && cache_slots && block_tables, op,
            "the inputs must not be null");
    require(ids && positions && slots && token_request && kv_lens && safe_anchor && safe_position,
            op, "the outputs must not be null");
  }
};

struct DraftedRowsParams {
  int rows = 0, slots = 0, drafted = 0, first = 0, hidden = 0;
  const bf16* in = nullptr;  // [rows * slots, hidden]
  bf16* out = nullptr;       // [rows * drafted, hidden]

  // The only validation of the fields (InvalidArgument naming the first bad one).
  void check() const {
    const char* op = "select_drafted_rows";
    require(rows >= 1 && hidden >= 1, op, "rows and hidden must be >= 1");
    require(drafted >= 1 && first >= 0 && first + drafted <= slots, op,
            "needs drafted >= 1, first >= 0 and first + drafted <= slots");
    require(in && out, op, "in and out must not be null");
    require(in != out, op, "in and out must not alias");
  }
};

}  // namespace sparkdraft::ops
