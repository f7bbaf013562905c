// The tensor-core instruction on this device against its twin (core/mma.h):
// millions of outputs over every probe family, and the start-up self-test.
// With SPARKDRAFT_MMA_FIXTURE_OUT=<file> the sweep also records the first
// cases of every family as the fixture CI checks the twin with
// (tests/core/mma_fixture.h; commit it under tests/fixtures/).
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "core/mma_fixture.h"
#include "cuda/common/mma_probe.h"
#include "cuda/gpu_test_util.h"
#include "sparkdraft/core/mma_probe.h"

namespace sparkdraft {
namespace {

constexpr int64_t kSweepCases = 8192;    // per family: 1M outputs each
constexpr uint32_t kFixtureCases = 256;  // per family: 32768 outputs each

TEST(MmaDevice, TwinMatchesTheInstructionOnEveryFamily) {
  SD_REQUIRE_GPU();
  const uint64_t seed = test::kMmaFixtureSeed;
  std::printf("seed %llu, %lld cases per family\n", static_cast<unsigned long long>(seed),
              static_cast<long long>(kSweepCases));
  test::MmaFixture fixture{seed, static_cast<uint32_t>(kMmaDistCount), kFixtureCases, {}};
  int64_t total = 0;
  for (int d = 0; d < kMmaDistCount; ++d) {
    const MmaDist dist = static_cast<MmaDist>(d);
    std::vector<uint32_t> bits;
    const cuda::MmaProbeResult r = cuda::mma_probe(dist, seed, 0, kSweepCases, &bits);
    total += r.outputs;
    std::printf("  %-12s %9lld outputs, %lld differ%s%s\n", mma_dist_name(dist),
                static_cast<long long>(r.outputs), static_cast<long long>(r.mismatches),
                r.mismatches ? "; first: " : "", r.first.c_str());
    EXPECT_EQ(r.mismatches, 0) << mma_dist_name(dist) << ": first " << r.first;
    fixture.bits.insert(fixture.bits.end(), bits.begin(), bits.begin() + kFixtureCases * 128);
  }
  std::printf("%lld outputs in all\n", static_cast<long long>(total));
  if (const char* out = std::getenv("SPARKDRAFT_MMA_FIXTURE_OUT")) {
    test::write_mma_fixture(out, fixture);
    std::printf("fixture written to %s\n", out);
  }
}

TEST(MmaDevice, SelfTestPassesAndIsFast) {
  SD_REQUIRE_GPU();
  cuda::mma_self_test();  // warm: context, module load
  // A fresh process runs it once per device; time a probe of the same size.
  const auto t0 = std::chrono::steady_clock::now();
  for (int d = 0; d < kMmaDistCount; ++d) cuda::mma_probe(static_cast<MmaDist>(d), 0x5eed, 0, 16);
  const double ms =
      std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  std::printf("self-test sample: %.2f ms\n", ms);
  EXPECT_LT(ms, 100.0);
}

}  // namespace
}  // namespace sparkdraft
