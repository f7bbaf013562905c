// The one bitwise comparator of the tests: found against expected, element by
// element, on the bit pattern. A failure says how many differ and lists the first
// ones: index (row and column when a row width is given, plus any note the caller
// adds), found and expected bits and values.
//
//   EXPECT_TRUE(test::same_bits(found, expected));
//   EXPECT_TRUE(test::same_bits(found, expected, {n, true}));  // rows of n, any NaN == any NaN
//
// nan_equal: a NaN matches any NaN whatever its sign and payload (for results of
// fp32 arithmetic, whose NaN bits differ between x86 and the GPU); otherwise NaNs
// compare by bits like everything else.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <sstream>
#include <string>
#include <type_traits>
#include <vector>

#include "sparkdraft/core/bf16.h"

namespace sparkdraft::test {

struct BitsOptions {
  BitsOptions(int64_t width_ = 0, bool nan_equal_ = false) : width(width_), nan_equal(nan_equal_) {}
  int64_t width;                            // row length: a mismatch also names its row and column
  bool nan_equal;                           // any NaN matches any NaN
  int report = 8;                           // how many mismatches the message lists
  std::function<std::string(size_t)> note;  // extra words about an index (its input, ...)
};

// "0x" and the bits in hex, zero-padded to the width of the type.
inline std::string hex_bits(uint64_t bits, int bytes) {
  char buf[24];
  std::snprintf(buf, sizeof buf, "0x%0*llx", 2 * bytes, static_cast<unsigned long long>(bits));
  return buf;
}

namespace bits_detail {

inline uint64_t bits_of(bf16 v) { return v.bits; }
inline uint64_t bits_of(float v) { return f32_bits(v); }
template <class T>
uint64_t bits_of(T v) {
  static_assert(std::is_integral_v<T>);
  return static_cast<uint64_t>(static_cast<std::make_unsigned_t<T>>(v));
}

inline bool is_nan(bf16 v) { return bf16_is_nan(v); }
inline bool is_nan(float v) { return std::isnan(v); }
template <class T>
bool is_nan(T) {
  return false;
}

inline void print_value(std::ostream& os, bf16 v) { os << " (" << to_f32(v) << ")"; }
inline void print_value(std::ostream& os, float v) { os << " (" << v << ")"; }
template <class T>
void print_value(std::ostream&, T) {}

}  // namespace bits_detail

template <class T>
::testing::AssertionResult same_bits(const T* found, const T* expected, size_t n,
                                     const BitsOptions& o = {}) {
  using namespace bits_detail;
  std::ostringstream os;
  size_t bad = 0;
  for (size_t i = 0; i < n; ++i) {
    if (bits_of(found[i]) == bits_of(expected[i])) continue;
    if (o.nan_equal && is_nan(found[i]) && is_nan(expected[i])) continue;
    if (++bad > static_cast<size_t>(o.report)) continue;
    os << "\n  index " << i;
    if (o.width > 0)
      os << " (row " << static_cast<int64_t>(i) / o.width << ", col "
         << static_cast<int64_t>(i) % o.width << ")";
    if (o.note) os << " " << o.note(i);
    os << ": found " << hex_bits(bits_of(found[i]), sizeof(T));
    print_value(os, found[i]);
    os << ", expected " << hex_bits(bits_of(expected[i]), sizeof(T));
    print_value(os, expected[i]);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << n << " values differ:" << os.str();
}

template <class T>
::testing::AssertionResult same_bits(const std::vector<T>& found, const std::vector<T>& expected,
                                     const BitsOptions& o = {}) {
  if (found.size() != expected.size())
    return ::testing::AssertionFailure()
           << "size " << found.size() << " != expected size " << expected.size();
  return same_bits(found.data(), expected.data(), found.size(), o);
}

}  // namespace sparkdraft::test
