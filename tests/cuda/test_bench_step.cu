// `sparkdraft bench step`'s harness (bench/step/bench_step.h) on the tiny presets
// of both styles at a small context: the eager and fused backends agree bit for
// bit (the check passed), the fused one runs the fused Markov loop, every timing,
// the bandwidth and the floor are positive, the floor's bytes equal the form of
// tests/common/floor.h, and the JSON record carries the fields the docs read.
#include <gtest/gtest.h>

#include <memory>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "common/files.h"
#include "common/floor.h"
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
    }
  }
}

}  // namespace
}  // namespace sparkdraft
