// Small shared helpers of the CPU tests: a temporary directory, seeded random
// bf16 fills, and a bit-for-bit comparison that names the first mismatch.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "sparkdraft/core/bf16.h"

namespace sparkdraft::testing {

class TempDir {
 public:
  TempDir() {
    std::string tmpl = (std::filesystem::temp_directory_path() / "sparkdraft-test-XXXXXX").string();
    if (!mkdtemp(tmpl.data())) throw std::runtime_error("mkdtemp failed");
    path_ = tmpl;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  std::string operator/(const std::string& name) const { return path_ + "/" + name; }

 private:
  std::string path_;
};

inline std::vector<bf16> random_bf16(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<bf16> out(n);
  for (auto& x : out) x = to_bf16(dist(rng));
  return out;
}

// First index where two bf16 arrays differ in bits, or -1.
inline int64_t first_bf16_mismatch(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  if (a.size() != b.size()) return 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].bits != b[i].bits) return static_cast<int64_t>(i);
  return -1;
}

#define SD_EXPECT_BF16_EQ(found, expected, what)                                         \
  do {                                                                                   \
    const int64_t sd_i_ = ::sparkdraft::testing::first_bf16_mismatch(found, expected);   \
    EXPECT_EQ(sd_i_, -1) << (what) << ": first mismatch at index " << sd_i_ << " of "    \
                         << (expected).size() << ": found 0x" << std::hex                \
                         << (sd_i_ >= 0 && static_cast<size_t>(sd_i_) < (found).size()   \
                                 ? (found)[sd_i_].bits : 0)                              \
                         << " expected 0x"                                               \
                         << (sd_i_ >= 0 && static_cast<size_t>(sd_i_) < (expected).size() \
                                 ? (expected)[sd_i_].bits : 0)                           \
                         << std::dec;                                                    \
  } while (0)

}  // namespace sparkdraft::testing
