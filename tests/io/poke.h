// Editing a safetensors file in place for the tests: overwrite the bytes of one
// element of one tensor (the header is parsed here, independently of the
// reader under test).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>

#include <nlohmann/json.hpp>

#include "common/files.h"

namespace sparkdraft::test {

inline void poke_tensor(const std::string& path, const std::string& name, int64_t index,
                        const void* bytes, size_t size) {
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
