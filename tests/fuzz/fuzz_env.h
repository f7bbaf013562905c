// The fuzzers' settings from the environment (the same for every target):
//   SPARKDRAFT_FUZZ_SECONDS  time per target (default 2; CI runs 40 under ASan+UBSan)
//   SPARKDRAFT_FUZZ_SEED     base seed (default 1); iteration i uses (seed, i)
//   SPARKDRAFT_FUZZ_ITER     replay only iteration i (to reproduce a report)
#pragma once

#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>

namespace sparkdraft::test {

inline double env_double(const char* name, double fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtod(v, nullptr) : fallback;
}
inline int64_t env_int(const char* name, int64_t fallback) {
  const char* v = std::getenv(name);
  return v && *v ? std::strtoll(v, nullptr, 10) : fallback;
}

struct FuzzSettings {
  double seconds = env_double("SPARKDRAFT_FUZZ_SECONDS", 2.0);
  uint64_t seed = static_cast<uint64_t>(env_int("SPARKDRAFT_FUZZ_SEED", 1));
  int64_t only = env_int("SPARKDRAFT_FUZZ_ITER", -1);
};

// The generator of iteration i of target `name`: a function of (seed, i, name) only.
inline std::mt19937_64 fuzz_rng(const FuzzSettings& s, int64_t i, const std::string& name) {
  std::seed_seq ss{static_cast<uint32_t>(s.seed), static_cast<uint32_t>(s.seed >> 32),
                   static_cast<uint32_t>(i), static_cast<uint32_t>(std::hash<std::string>{}(name))};
  return std::mt19937_64(ss);
}

// Runs `one(i)` for i = 0, 1, ... until the time is up (or only iteration
// SPARKDRAFT_FUZZ_ITER); `one` returns false to stop. Returns the iterations run.
template <class F>
int64_t fuzz_loop(const FuzzSettings& s, F&& one) {
  const auto t0 = std::chrono::steady_clock::now();
  int64_t iters = 0;
  for (int64_t i = s.only >= 0 ? s.only : 0;; ++i) {
    if (s.only >= 0 ? i > s.only
                    : std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() >
                          s.seconds)
      break;
    ++iters;
    if (!one(i)) break;
  }
  return iters;
}

}  // namespace sparkdraft::test
