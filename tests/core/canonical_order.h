// core/reduce.h's canonical order written out element by element, with no
// library helper: the reference that tests/core/test_reduce.cpp holds
// canonical_sum / canonical_dot to, and that the naive CPU ops of
// tests/cpu/test_ops.cpp reduce with.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <vector>

#include "sparkdraft/core/bf16.h"

namespace sparkdraft::test {

// Element i goes to chunk i / 8 and lane (i / 8) % 32; each lane fmas its
// elements in increasing i from +0; the 32 lane sums meet in an xor butterfly,
// simulated as the warp's shuffles (every lane ends with the same sum).
inline float canonical_order_dot(const std::vector<float>& x, const std::vector<float>& y) {
  float lane[32];
  for (float& l : lane) l = 0.0f;
  for (size_t i = 0; i < x.size(); ++i) {
    const size_t l = (i / 8) % 32;
    lane[l] = std::fmaf(x[i], y[i], lane[l]);
  }
  for (int off = 16; off >= 1; off /= 2) {
    float next[32];
    for (int l = 0; l < 32; ++l) next[l] = lane[l] + lane[l ^ off];  // every lane, as shuffles do
    for (int l = 0; l < 32; ++l) lane[l] = next[l];
  }
  for (int l = 1; l < 32; ++l) EXPECT_EQ(f32_bits(lane[l]), f32_bits(lane[0])) << "lane " << l;
  return lane[0];
}

}  // namespace sparkdraft::test
