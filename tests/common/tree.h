// The all-reduce tree of contract.md section 6, written out by hand for every count it
// names and the odd counts core/reduce.h's canonical_tree_sum also takes (an odd
// last term rises unchanged), and the seeded fp32 partials the communicator tests
// reduce: mixed magnitudes, so that rank order or reversed order would be caught.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <vector>

#include "common/random.h"

namespace sparkdraft::test {

inline float documented_tree(const std::vector<float>& p) {
  switch (p.size()) {
    case 1: return p[0];
    case 2: return p[0] + p[1];
    case 3: return (p[0] + p[1]) + p[2];
    case 4: return (p[0] + p[1]) + (p[2] + p[3]);
    case 5: return ((p[0] + p[1]) + (p[2] + p[3])) + p[4];
    case 6: return ((p[0] + p[1]) + (p[2] + p[3])) + (p[4] + p[5]);
    case 7: return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + p[6]);
    case 8: return ((p[0] + p[1]) + (p[2] + p[3])) + ((p[4] + p[5]) + (p[6] + p[7]));
  }
  ADD_FAILURE() << "no documented tree for n " << p.size();
  return 0.0f;
}

// n ranks x count partials, each x * 2^e with x in [-1, 1), e in [-14, 14].
inline std::vector<std::vector<float>> tree_partials(Gen& gen, int n, size_t count) {
  std::vector<std::vector<float>> partials(static_cast<size_t>(n), std::vector<float>(count));
  for (auto& p : partials)
    for (float& x : p)
      x = std::ldexp(gen.uniform(-1.0f, 1.0f), static_cast<int>(gen.integer(-14, 14)));
  return partials;
}

}  // namespace sparkdraft::test
