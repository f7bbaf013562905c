// A test's own storage of a Markov call's request rows, and the view the loops take
// (ops::MarkovRows) over it.
#pragma once

#include <cstdint>
#include <vector>

#include "sparkdraft/ops/markov.h"

namespace sparkdraft::test {

struct HostMarkovRows {
  int num_rows = 0;
  std::vector<int64_t> anchor_tokens, anchor_positions, seeds, cache_slots;
  std::vector<float> temperatures;
  ops::MarkovRows view() const {
    return ops::MarkovRows{num_rows,     anchor_tokens.data(), anchor_positions.data(),
                           seeds.data(), temperatures.data(),  cache_slots.data()};
  }
};

}  // namespace sparkdraft::test
