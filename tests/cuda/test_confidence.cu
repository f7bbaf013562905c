// The confidence head on the GPU (contract.md section 9): the eager kernel equals
// cpu::confidence bit for bit (seeded, odd widths, NaN / inf / saturating rows,
// padding rows whose ids would read outside w1), and the whole step with the head
// (tiny-conf, both layer styles, with and without the Markov part): CPU == GPU
// eager == GPU fused in its CUDA graph, confidences included. Skips without a GPU.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>
#include <string>

#include "common/bits.h"
#include "common/files.h"
#include "common/random.h"
#include "cuda/gpu_test_util.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/cpu/confidence.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check_draft.h"
#include "sparkdraft/cuda/confidence.h"
#include "sparkdraft/scenario.h"

namespace sparkdraft {
namespace {

struct Shape {
  int rows, steps, hidden, rank;
};

void check_kernel(uint64_t seed, const Shape& s, float scale) {
  SCOPED_TRACE("rows " + std::to_string(s.rows) + " steps " + std::to_string(s.steps) + " hidden " +
               std::to_string(s.hidden) + " rank " + std::to_string(s.rank) + " scale " +
               std::to_string(scale));
  test::Gen rng(seed);
  const int vocab = 40, T = s.rows * s.steps;
  std::vector<bf16> h = rng.bf16s(static_cast<size_t>(T) * s.hidden, -scale, scale);
  const std::vector<bf16> w1 =
      rng.bf16s(static_cast<size_t>(vocab) * std::max(s.rank, 1), -scale, scale);
  const std::vector<bf16> w = rng.bf16s(static_cast<size_t>(s.hidden + s.rank), -scale, scale);
  const std::vector<bf16> b = {to_bf16(rng.uniform(-1.0f, 1.0f))};
  std::vector<int64_t> anchors, tokens, slots;
  for (int r = 0; r < s.rows; ++r) {
    anchors.push_back(rng.integer(0, vocab - 1));
    slots.push_back(r % 3 == 2 ? -1 : r);  // every third row is padding
    for (int j = 0; j < s.steps; ++j) tokens.push_back(rng.integer(0, vocab - 1));
    if (slots.back() < 0) anchors.back() = -1000, tokens.back() = 1 << 30;  // never read
  }
  if (T > 1) h[static_cast<size_t>(s.hidden)] = to_bf16(std::numeric_limits<float>::quiet_NaN());
  h[0] = to_bf16(std::numeric_limits<float>::infinity());
  auto params = [&](const bf16* dh, const int64_t* da, const int64_t* dt, const int64_t* ds,
                    const bf16* dw1, const bf16* dw, const bf16* db, float* out) {
    ops::ConfidenceParams p;
    p.rows = s.rows;
    p.steps = s.steps;
    p.hidden = s.hidden;
    p.rank = s.rank;
    p.hidden_states = dh;
    p.anchor_tokens = da;
    p.draft_tokens = dt;
    p.cache_slots = ds;
    p.w1 = s.rank > 0 ? dw1 : nullptr;
    p.weight = dw;
    p.bias = db;
    p.out = out;
    return p;
  };
  std::vector<float> want(static_cast<size_t>(T), -3.0f);
  cpu::confidence(params(h.data(), anchors.data(), tokens.data(), slots.data(), w1.data(), w.data(),
                         b.data(), want.data()),
                  2);
  cudaStream_t stream = nullptr;
  cuda::DeviceBuffer<bf16> dh(h, stream), dw1(w1, stream), dw(w, stream), db(b, stream);
  cuda::DeviceBuffer<int64_t> da(anchors, stream), dt(tokens, stream), ds(slots, stream);
  cuda::DeviceBuffer<float> dout(std::vector<float>(static_cast<size_t>(T), -5.0f), stream);
  cuda::confidence(params(dh.data(), da.data(), dt.data(), ds.data(), dw1.data(), dw.data(),
                          db.data(), dout.data()),
                   stream);
  const std::vector<float> got = dout.download(stream);
  EXPECT_TRUE(test::same_bits(got, want, {s.steps, true}));
}

TEST(CudaConfidence, KernelEqualsCpuBitForBit) {
  SD_REQUIRE_GPU();
  uint64_t seed = 2701;
  for (const Shape s : {Shape{1, 1, 1, 0}, Shape{3, 7, 37, 5}, Shape{4, 5, 64, 64},
                        Shape{5, 3, 300, 0}, Shape{7, 9, 513, 31}, Shape{9, 7, 4096, 256}})
    for (float scale : {0.05f, 1.0f, 8.0f}) check_kernel(seed++, s, scale);
}

std::shared_ptr<const Checkpoint> conf_checkpoint(const test::TempDir& dir,
                                                  const std::string& style, bool with_markov) {
  ModelConfig c = preset_config("tiny-conf", style);
  c.confidence_head_with_markov = with_markov;
  SyntheticOptions so;
  so.seed = 5;
  write_synthetic_checkpoint(c, dir.path(), so);
  return std::make_shared<const Checkpoint>(Checkpoint::load(dir.path()));
}

TEST(CudaConfidence, CpuEqualsEagerEqualsFusedWithTheHead) {
  SD_REQUIRE_GPU();
  for (const std::string style : {"qwen3", "muse"})
    for (bool with_markov : {true, false}) {
      SCOPED_TRACE(style + (with_markov ? " markov" : " plain"));
      test::TempDir dir;
      auto ckpt = conf_checkpoint(dir, style, with_markov);
      ScenarioOptions s;
      s.request_ids = {0, 1, 2, 3};
      s.padding_before = {2};
      const CheckReport report = cuda::check_draft(ckpt, s);
      std::printf("tiny-conf/%s/%s:\n%s", style.c_str(), with_markov ? "markov" : "plain",
                  report.text().c_str());
      EXPECT_TRUE(report.ok()) << report.text();
      EXPECT_NE(report.text().find("confidences"), std::string::npos)
          << "the check compared no confidences";
    }
}

}  // namespace
}  // namespace sparkdraft
