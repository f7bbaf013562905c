// Shared helpers of the I/O tests (the temporary directory is tests/test_util.h's):
// raw file writing, and the check that an error was thrown
// with a message naming what is at fault.
#pragma once

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include "test_util.h"

namespace sparkdraft::test {

using testing::TempDir;  // tests/test_util.h

inline void write_file(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs f, expects it to throw E, and returns the message ("" after a failure).
template <class E, class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const E& e) {
    return e.what();
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong exception type: " << e.what();
    return "";
  }
  ADD_FAILURE() << "did not throw";
  return "";
}

// Every needle must appear in the message.
inline void expect_mentions(const std::string& message, const std::vector<std::string>& needles) {
  for (const std::string& n : needles)
    EXPECT_NE(message.find(n), std::string::npos) << "message lacks \"" << n << "\": " << message;
}

}  // namespace sparkdraft::test
