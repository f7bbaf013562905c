// core/philox.h against the contract.md section 4 test vectors (computed on the target
// GPU by the engine we replace): randint words and the u bits of vocab ids 0..2.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <string>

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/philox.h"
#include "sparkdraft/core/sampling.h"

namespace sparkdraft {
namespace {

struct vector_case {
  int64_t seed, off;
  uint32_t randint;
  uint32_t u_bits[3];  // philox_uniform(randint, v) for v = 0, 1, 2
};

std::string hex32(uint32_t u) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", u);
  return buf;
}

TEST(Philox, SpecVectorsWithUniforms) {
  const vector_case cases[] = {
      {0, 0, 1713891541u, {0x3c05e912u, 0x3f17ef63u, 0x3f013f27u}},
      {12345, 77, 668326920u, {0x3f676738u, 0x3f3b829fu, 0x3f19f4ccu}},
      {-5, 9, 2883358565u, {0x3d584bd9u, 0x3f5342ddu, 0x3f359342u}},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE("randint(" + std::to_string(c.seed) + ", " + std::to_string(c.off) + ")");
    const uint32_t r = philox_randint(c.seed, c.off);
    EXPECT_EQ(r, c.randint);
    for (int v = 0; v < 3; ++v) {
      const uint32_t u = f32_bits(philox_uniform(r, v));
      EXPECT_EQ(u, c.u_bits[v]) << "v = " << v << ": got " << hex32(u) << ", expected "
                                << hex32(c.u_bits[v]);
    }
  }
}

TEST(Philox, SpecVectorsWithWideSeedAndOffset) {
  EXPECT_EQ(philox_randint((int64_t{1} << 40) + 987654321, (int64_t{1} << 30) + 4096), 1595797246u);
  EXPECT_EQ(philox_randint(12345, 77 + (int64_t{1} << 30)), 2211821518u);
  // The draft step seed is randint(seed, a + j + 2^30): anchor 70, step 7 is position 77 + 2^30.
  EXPECT_EQ(draft_step_seed(12345, 70, 7), 2211821518u);
}

TEST(Philox, UniformStaysInItsRange) {
  // u in [0x1.fffffep-32, 0x1.fffffep-1] for every word: check many step seeds and ids.
  for (uint32_t gs = 1; gs < 64; ++gs) {
    for (int64_t v = 0; v < 4096; ++v) {
      const float u = philox_uniform(gs * 2654435761u, v);
      ASSERT_GE(u, kUniformScale) << "gs " << gs << " v " << v;
      ASSERT_LE(u, 0x1.fffffep-1f) << "gs " << gs << " v " << v;
    }
  }
}

// g = -log(-log1p(-u)), each log rounded once to fp32 (long double reference).
TEST(Philox, DraftNoiseIsTheGumbelOfTheUniform) {
  const uint32_t gs = draft_step_seed(-5, 1000, 3);
  for (int64_t v = 0; v < 4096; ++v) {
    const float u = philox_uniform(gs, v);
    const float l1 = static_cast<float>(std::log1p(-static_cast<long double>(u)));
    const float expected = -static_cast<float>(std::log(-static_cast<long double>(l1)));
    ASSERT_EQ(f32_bits(draft_noise(gs, v)), f32_bits(expected)) << "v " << v;
  }
}

// The fused kernel's form with the zero words written out gives the same bits.
TEST(Philox, UniformOfA32BitIdEqualsTheGeneralForm) {
  const uint32_t seeds[] = {0u, 1u, 0x9E3779B9u, 0xffffffffu, 2211821518u};
  const uint32_t ids[] = {0u, 1u, 2u, 151935u, 202047u, 0x7fffffffu, 0x80000000u, 0xffffffffu};
  for (uint32_t gs : seeds) {
    for (uint32_t v : ids)
      ASSERT_EQ(f32_bits(philox_uniform_u32(gs, v)), f32_bits(philox_uniform(gs, v)))
          << "gs " << gs << " v " << v;
    for (uint32_t v = 0; v < 100000; v += 7)
      ASSERT_EQ(f32_bits(philox_uniform_u32(gs, v)), f32_bits(philox_uniform(gs, v)))
          << "gs " << gs << " v " << v;
  }
}

}  // namespace
}  // namespace sparkdraft
