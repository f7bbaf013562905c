// The recorded device results of the tensor-core instruction (tests/fixtures/):
// written by the device sweep (tests/cuda/test_mma.cu, SPARKDRAFT_MMA_FIXTURE_OUT)
// on an H200, read by the CPU test (tests/core/test_mma.cpp) so that CI holds the
// twin to the hardware without a GPU.
//
// Format (little-endian): "SDMMA001", u64 seed, u32 families, u32 cases per
// family, then u32 d bits [family][case][m * 8 + n] for the cases
// make_mma_case(family, seed, 0 .. cases - 1).
#pragma once

#include <cstdint>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace sparkdraft::test {

struct MmaFixture {
  uint64_t seed = 0;
  uint32_t families = 0;
  uint32_t cases = 0;
  std::vector<uint32_t> bits;  // [families][cases][128]
};

inline constexpr char kMmaFixtureMagic[8] = {'S', 'D', 'M', 'M', 'A', '0', '0', '1'};
inline constexpr uint64_t kMmaFixtureSeed = 20261130;

inline void write_mma_fixture(const std::string& path, const MmaFixture& f) {
  std::ofstream out(path, std::ios::binary);
  out.write(kMmaFixtureMagic, 8);
  out.write(reinterpret_cast<const char*>(&f.seed), 8);
  out.write(reinterpret_cast<const char*>(&f.families), 4);
  out.write(reinterpret_cast<const char*>(&f.cases), 4);
  out.write(reinterpret_cast<const char*>(f.bits.data()),
            static_cast<std::streamsize>(f.bits.size() * 4));
  if (!out) throw std::runtime_error("cannot write " + path);
}

inline MmaFixture read_mma_fixture(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error("cannot open " + path);
  char magic[8];
  MmaFixture f;
  in.read(magic, 8);
  in.read(reinterpret_cast<char*>(&f.seed), 8);
  in.read(reinterpret_cast<char*>(&f.families), 4);
  in.read(reinterpret_cast<char*>(&f.cases), 4);
  if (!in || std::memcmp(magic, kMmaFixtureMagic, 8) != 0)
    throw std::runtime_error(path + " is not an mma fixture");
  f.bits.resize(static_cast<size_t>(f.families) * f.cases * 128);
  in.read(reinterpret_cast<char*>(f.bits.data()), static_cast<std::streamsize>(f.bits.size() * 4));
  if (!in) throw std::runtime_error(path + " is truncated");
  return f;
}

}  // namespace sparkdraft::test
