// `sparkdraft bench step`'s harness (bench/step/bench_step.h) on the tiny presets
// of both styles at a small context: the eager and fused backends agree bit for
// bit (the check passed), the fused one runs the fused Markov loop, every timing,
// the bandwidth and the floor are positive, the floor's bytes equal the form of
// tests/common/floor.h, and the JSON record carries the fields the docs read; the step's
// products and the tensor-core peak behind the roofline floor.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/floor.h"
#include "common/harness.h"
#include "cuda/common/mma_probe.h"
#include "cuda/gpu_test_util.h"
#include "sparkdraft/checkpoint.h"
#include "step/bench_step.h"

namespace sparkdraft {
namespace {

TEST(BenchStep, TinyPresetsCheckEqualAndTimeAgainstTheFloor) {
  SD_REQUIRE_GPU();
  test::TempDir dir;
  for (const std::string style : {"qwen3", "muse"}) {
    write_synthetic_checkpoint(preset_config("tiny", style), dir / style, SyntheticOptions{});
    auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(dir / style));
    for (int rows : {1, 3}) {
      cuda::StepBenchOptions o;
      o.preset = "tiny";
      o.checkpoint = dir / style;
      o.ctx = 40;
      o.rows = rows;
      o.repeats = 3;
      o.warmup = 1;
      o.max_context_tokens = 32;  // the context of 3 rows takes several chunks
      SCOPED_TRACE(style + " rows " + std::to_string(rows) + " ctx 40 seed " +
                   std::to_string(o.seed));
      std::ostringstream out;
      const cuda::StepBenchResult r = cuda::bench_step(ckpt, o, out);
      ASSERT_TRUE(r.ok()) << r.difference;
      EXPECT_TRUE(r.markov_fused) << "the fused backend should run the fused Markov loop";
      EXPECT_GT(r.timing.eager_us, 0);
      EXPECT_GT(r.timing.fused_us, 0);
      EXPECT_GT(r.timing.copy_bandwidth_gbs, 0);
      EXPECT_GT(r.timing.floor_us, 0);
      EXPECT_GT(r.gpu.sm_clock_seen_mhz, 0);
      const test::FloorParts want = test::floor_of(ckpt->config(), rows, 40);
      EXPECT_EQ(r.timing.bytes, test::total(want));
      EXPECT_EQ(r.floor.at("kv_cache"), want.at("kv_cache"));
      EXPECT_EQ(r.floor.at("layer_weights"), want.at("layer_weights"));
      EXPECT_DOUBLE_EQ(r.timing.fused_ratio, r.timing.fused_us / r.timing.floor_us);
      EXPECT_NE(out.str().find("fused == eager bit for bit"), std::string::npos) << out.str();

      const nlohmann::json j = cuda::step_bench_json(r);
      EXPECT_EQ(j["bench"], "draft_step");
      EXPECT_EQ(j["preset"], "tiny");
      EXPECT_EQ(j["ctx"], 40);
      EXPECT_EQ(j["rows"], rows);
      EXPECT_EQ(j["tp"], 1);
      EXPECT_EQ(j["bytes"].get<double>(), test::total(want));
      for (const char* key :
           {"eager_us", "fused_us", "floor_us", "fused_ratio", "eager_ratio", "copy_bandwidth_gbs",
            "gpu", "sm_clock_seen_mhz", "sm_clock_peak_mhz", "mem_clock_peak_mhz"})
        EXPECT_TRUE(j.contains(key)) << key;
      // The products and, where the GEMMs use wgmma here, the peak and the roofline floor.
      const test::FloorParts flops = test::flops_of(ckpt->config(), rows, 40);
      EXPECT_EQ(r.flops.total(), test::total(flops));
      EXPECT_EQ(j["flops"].get<double>(), test::total(flops));
      if (cuda::wgmma_self_test().usable) {
        EXPECT_GT(r.tensor_peak_tflops, 0);
        EXPECT_GE(r.roofline.floor_us, r.timing.floor_us * (1 - 1e-12));
        EXPECT_DOUBLE_EQ(j["roofline_ratio"].get<double>(),
                         r.timing.fused_us / r.roofline.floor_us);
        EXPECT_NE(out.str().find("roofline floor"), std::string::npos) << out.str();
      } else {
        EXPECT_EQ(r.tensor_peak_tflops, 0);
        EXPECT_TRUE(j.contains("tensor_peak_note"));
      }
    }
  }
}

// The tensor-core peak: between a quarter of and the nominal dense bf16 rate of a Hopper SM
// (4096 FLOPs a clock, 1024 multiply-adds x 2 x 2: 989 TFLOP/s on an H100 SXM at 1830 MHz)
// at the peak SM clock over every SM, plus 2% for the clock's rounding. A kernel that
// issued less work than it counts, or waited on every wgmma, falls out of that range.
TEST(BenchStep, TensorPeakIsWithinTheHopperRate) {
  SD_REQUIRE_GPU();
  if (!cuda::wgmma_self_test().usable) GTEST_SKIP() << cuda::wgmma_self_test().why;
  const cuda::GpuInfo gpu = cuda::query_gpu();
  cuda::DeviceStream stream;
  const double peak = cuda::tensor_peak_tflops(gpu, stream.get());
  const double nominal = 4096.0 * gpu.sm_count * gpu.sm_clock_peak_mhz * 1e6 / 1e12;
  std::printf("tensor-core peak %.1f TFLOP/s, nominal %.1f at %d MHz over %d SMs\n", peak, nominal,
              gpu.sm_clock_peak_mhz, gpu.sm_count);
  EXPECT_GT(peak, 0.25 * nominal);
  EXPECT_LT(peak, 1.02 * nominal);
}

}  // namespace
}  // namespace sparkdraft
