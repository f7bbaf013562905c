// The CPU Markov loop's TP sweep against a test's naive loop: markov_loop_from_base at TP 1, 2,
// 4 and 8 (those dividing the vocabulary) gives the naive tokens (padding rows aside: their
// tokens are don't-care) and the naive cache, bit for bit. Shared by the loop's own tests
// (runtime/test_markov_loop.cpp) and the gated / rnn heads' (runtime/test_markov_head.cpp).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "common/bits.h"
#include "runtime/markov_loop.h"

namespace sparkdraft::test {

inline void expect_loop_equals_naive_at_every_tp(const MarkovInputs& in, const bf16* base, int V,
                                                 const std::vector<int64_t>& naive_tokens,
                                                 const std::vector<bf16>& naive_cache) {
  const int R = in.rows->num_rows, N = in.config->block_size;
  for (int tp : {1, 2, 4, 8}) {
    if (V % tp) continue;
    std::vector<int64_t> tokens(naive_tokens.size(), -1);
    std::vector<bf16> cache(naive_cache.size(), to_bf16(-7.0f));
    markov_loop_from_base(in, tp, base, ProposeOutputs{tokens.data(), cache.data()});
    for (int r = 0; r < R; ++r) {
      if (in.rows->cache_slots[r] < 0) continue;
      for (int j = 0; j < N; ++j)
        EXPECT_EQ(tokens[r * N + j], naive_tokens[r * N + j])
            << "tp " << tp << " row " << r << " step " << j;
    }
    EXPECT_TRUE(same_bits(cache, naive_cache)) << "cache at tp " << tp;
  }
}

}  // namespace sparkdraft::test
