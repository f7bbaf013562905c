// The contract of attention over the paged cache (SPEC section 3).
//
// Query token t of a request attends to the request's cached positions [lo, kv_len)
// with kv_len = a + N (the context and the whole query block: non-causal inside the
// block) and lo = window ? max(0, pos_t - window + 1) : 0:
//   s_j = (q . k_j) * scale      (fp32, scale = 1 / sqrt(head_dim)), m = max_j s_j,
//   p_j = exp(s_j - m),  o = bf16( sum_j p_j v_j / sum_j p_j ).
// GQA: query head h reads KV head h / (heads / kv_heads). Padding tokens
// (token_request -1) write zeros. The CPU and the GPU sum in different orders today
// and are held to each other within a bf16-ulp budget; each is deterministic (the GPU
// splits the context at fixed absolute positions, cuda/kernels.h).
#pragma once

#include <cstdint>

#include "sparkdraft/ops/require.h"

namespace sparkdraft::ops {

struct AttentionParams {
  int tokens = 0;  // query tokens (rows * N)
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int page_size = 0;
  int max_pages = 0;                       // block table row width
  int window = 0;                          // 0 = full
  int64_t q_stride = 0;                    // elements between query tokens
  const int32_t* block_tables = nullptr;   // [requests, max_pages]
  const int32_t* token_request = nullptr;  // [tokens] request row of each token, -1 = padding
  const int64_t* positions = nullptr;      // [tokens] absolute position of each query
  const int64_t* kv_lens = nullptr;        // [requests] a + N
  // Bound on every kv_lens[r] known on the host (<= max_pages * page_size): sizes the
  // GPU's split grid and workspace. Any bound gives the same bits.
  int64_t max_kv_len = 0;

  // The only validation of the fields (InvalidArgument naming the first bad one).
  // Values behind the pointers are checked where they are read on the host (the CPU
  // op) or at the API boundary (the GPU).
  void check() const {
    const char* op = "attention";
    require(tokens >= 0, op, "tokens must be >= 0, got " + std::to_string(tokens));
    require(heads >= 1 && kv_heads >= 1 && heads % kv_heads == 0, op,
            "heads (" + std::to_string(heads) + ") must be a positive multiple of kv_heads (" +
                std::to_string(kv_heads) + ")");
    require(head_dim >= 1, op, "head_dim must be >= 1, got " + std::to_string(head_dim));
    require(page_size >= 1, op, "page_size must be >= 1, got " + std::to_string(page_size));
    require(max_pages >= 1, op, "max_pages must be >= 1, got " + std::to_string(max_pages));
    require(window >= 0, op, "window must be >= 0, got " + std::to_string(window));
    require(q_stride >= static_cast<int64_t>(heads) * head_dim, op,
            "q_stride " + std::to_string(q_stride) + " < heads * head_dim " +
                std::to_string(static_cast<int64_t>(heads) * head_dim));
    const int64_t addressable = static_cast<int64_t>(max_pages) * page_size;
    require(max_kv_len >= 1 && max_kv_len <= addressable, op,
            "max_kv_len must be in [1, max_pages * page_size = " + std::to_string(addressable) +
                "], got " + std::to_string(max_kv_len));
    if (tokens > 0)
      require(block_tables != nullptr && token_request != nullptr && positions != nullptr &&
                  kv_lens != nullptr,
              op, "block_tables, token_request, positions and kv_lens must not be null");
  }
};

}  // namespace sparkdraft::ops
