// The one seeded generator of the tests. A Gen names its seed in every failure
// that happens while it lives (a gtest scoped trace), so a failing sweep can be
// replayed. Gen draws from std::mt19937_64; Gen32 from std::mt19937, for the tests
// whose inputs were drawn from that engine. Uniform draws use the standard
// distributions, so a test moved onto Gen keeps its inputs.
//
// A Gen is neither copied nor moved (the trace must be popped where it was
// pushed): make one on the stack of the test, pass it by reference.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "sparkdraft/core/bf16.h"

namespace sparkdraft::test {

inline std::string seed_note(uint64_t seed) { return "seed " + std::to_string(seed); }

template <class Engine>
class BasicGen {
 public:
  explicit BasicGen(uint64_t seed, const char* file = __builtin_FILE(), int line = __builtin_LINE())
      : seed_(seed), trace_(file, line, seed_note(seed)), engine_(seed) {}
  BasicGen(const BasicGen&) = delete;
  BasicGen& operator=(const BasicGen&) = delete;

  uint64_t seed() const { return seed_; }
  Engine& engine() { return engine_; }
  typename Engine::result_type bits() { return engine_(); }

  float uniform(float lo, float hi) {
    return std::uniform_real_distribution<float>(lo, hi)(engine_);
  }
  int64_t integer(int64_t lo, int64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<int64_t>(lo, hi)(engine_);
  }
  std::vector<float> floats(size_t n, float lo, float hi) {
    std::vector<float> v(n);
    for (auto& x : v) x = uniform(lo, hi);
    return v;
  }
  std::vector<bf16> bf16s(size_t n, float lo, float hi) {  // uniform in [lo, hi), rounded
    std::vector<bf16> v(n);
    for (auto& x : v) x = to_bf16(uniform(lo, hi));
    return v;
  }
  std::vector<bf16> normal_bf16s(size_t n, float scale) {  // N(0, scale), rounded
    std::normal_distribution<float> dist(0.0f, scale);
    std::vector<bf16> v(n);
    for (auto& x : v) x = to_bf16(dist(engine_));
    return v;
  }

 private:
  uint64_t seed_;
  ::testing::ScopedTrace trace_;
  Engine engine_;
};

using Gen = BasicGen<std::mt19937_64>;
using Gen32 = BasicGen<std::mt19937>;

}  // namespace sparkdraft::test
