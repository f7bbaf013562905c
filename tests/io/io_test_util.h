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

#include <nlohmann/json.hpp>

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

// Overwrites `bytes` at element `index` of tensor `name` in a safetensors file
// (the header is parsed here, independently of the reader under test).
inline void poke_tensor(const std::string& path, const std::string& name, int64_t index, const void* bytes,
                        size_t size) {
  std::string file = read_file(path);
  if (file.size() < 8) throw std::runtime_error(path + " is too short");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>(file[static_cast<size_t>(i)]);
  const auto header = nlohmann::json::parse(file.substr(8, n));
  if (!header.contains(name)) throw std::runtime_error(path + " has no tensor " + name);
  const uint64_t begin = header[name]["data_offsets"][0].get<uint64_t>();
  const uint64_t end = header[name]["data_offsets"][1].get<uint64_t>();
  if (index < 0 || begin + (static_cast<uint64_t>(index) + 1) * size > end)
    throw std::runtime_error("poke_tensor: index " + std::to_string(index) + " is outside " + name);
  const uint64_t at = 8 + n + begin + static_cast<uint64_t>(index) * size;
  file.replace(at, size, static_cast<const char*>(bytes), size);
  write_file(path, file);
}

}  // namespace sparkdraft::test
