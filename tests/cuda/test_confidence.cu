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

#include "check/check_draft.h"
#include "common/bits.h"
#include "common/conf_checkpoint.h"
#include "common/files.h"
#include "common/random.h"
#include "cuda/common/graph.h"
#include "cuda/gpu_test_util.h"
#include "cuda/kernels.h"
#include "cuda/three_requests.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/cpu/confidence.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/draft.h"
#include "sparkdraft/error.h"
#include "sparkdraft/scenario.h"

namespace sparkdraft {
namespace {

struct Shape {
  int rows, steps, hidden, rank;
};

void check_kernel(uint64_t seed, const Shape& s, float scale, bool calibrated = false) {
  SCOPED_TRACE("rows " + std::to_string(s.rows) + " steps " + std::to_string(s.steps) + " hidden " +
               std::to_string(s.hidden) + " rank " + std::to_string(s.rank) + " scale " +
               std::to_string(scale) + " calibrated " + std::to_string(calibrated) + " seed " +
               std::to_string(seed));
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
    if (calibrated) {  // STS (contract.md 9.1): per-step temperatures, 1 among them
      p.calibrated = true;
      for (int j = 0; j < s.steps; ++j) p.temperatures[j] = j == 1 ? 1.0f : 0.3f + 0.45f * j;
    }
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
    for (float scale : {0.05f, 1.0f, 8.0f}) {
      check_kernel(seed++, s, scale);
      check_kernel(seed++, s, scale, true);
    }
}

TEST(CudaConfidence, CpuEqualsEagerEqualsFusedWithTheHead) {
  SD_REQUIRE_GPU();
  const std::vector<float> sts = {0.8f, 1.0f, 1.3f, 1.7f, 2.2f, 0.45f, 3.0f};  // 9.1, N 7
  for (const std::string style : {"qwen3", "muse"})
    for (int variant = 0; variant < 3; ++variant) {
      const bool with_markov = variant != 1, calibrated = variant == 2;
      SCOPED_TRACE(style + (with_markov ? " markov" : " plain") + (calibrated ? " sts" : ""));
      test::TempDir dir;
      auto ckpt =
          test::conf_checkpoint(dir, style, with_markov, calibrated ? sts : std::vector<float>{});
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

// The device API with the head: propose_device inside the caller's CUDA graph and
// propose_device_graphed (captured at the first call, replayed at the second) give
// the host API's confidences; a draft without the head refuses the output.
TEST(CudaConfidence, DeviceApiAndGraphsEqualTheHostApi) {
  SD_REQUIRE_GPU();
  test::TempDir dir;
  auto ckpt = test::conf_checkpoint(dir, "qwen3", true);
  const ModelConfig& c = ckpt->config();
  const DraftOptions o = test::ThreeRequests::options();
  cuda::CudaDraftOptions co;
  co.max_context_tokens = test::ThreeRequests::max_context_tokens();
  cuda::CudaDraft host(ckpt, o, co), dev(ckpt, o, co);
  test::Gen gen(2702);
  const int N = c.block_size;
  const test::ThreeRequests in(c, o, gen);  // row 1 is padding
  const size_t n_tokens = static_cast<size_t>(in.R) * N;
  const size_t n_cache = static_cast<size_t>(o.cache_slots) * N * c.vocab_size;

  host.store_context(in.context());
  std::vector<int64_t> want_tokens(n_tokens, -5);
  std::vector<bf16> want_cache(n_cache, bf16{0});
  std::vector<float> want_conf(n_tokens, -1.0f);
  host.propose(in.batch(), {want_tokens.data(), want_cache.data(), want_conf.data()});
  for (float v : want_conf) EXPECT_TRUE(v >= 0.0f && v <= 1.0f) << v;

  cuda::DeviceStream stream;
  const cudaStream_t s = stream.get();
  const test::ThreeRequests::OnDevice d = in.upload(s);
  cuda::DeviceBuffer<bf16> d_cache(std::vector<bf16>(n_cache, bf16{0}), s);
  cuda::DeviceBuffer<int64_t> d_tokens(std::vector<int64_t>(n_tokens, -5), s);
  cuda::DeviceBuffer<float> d_conf(std::vector<float>(n_tokens, -1.0f), s),
      d_conf2(std::vector<float>(n_tokens, -1.0f), s);
  const ProposeBatch db = d.batch();
  auto step = [&](cudaStream_t st) {
    dev.store_context_device(d.context(), st);
    dev.propose_device(db, {d_tokens.data(), d_cache.data(), d_conf.data()}, st);
  };
  step(s);  // warm-up before the capture
  SD_CUDA_CHECK(cudaMemsetAsync(d_conf.data(), 0xff, n_tokens * sizeof(float), s));
  const cuda::GraphExec graph(s, step);
  graph.launch(s);
  SD_CUDA_CHECK(cudaStreamSynchronize(s));
  EXPECT_TRUE(test::same_bits(d_tokens.download(s), want_tokens, {N})) << "tokens";
  EXPECT_TRUE(test::same_bits(d_conf.download(s), want_conf, {N})) << "in the caller's graph";
  for (int call = 0; call < 2; ++call) {  // capture, then replay
    SD_CUDA_CHECK(cudaMemsetAsync(d_conf2.data(), 0xff, n_tokens * sizeof(float), s));
    dev.propose_device_graphed(db, {d_tokens.data(), d_cache.data(), d_conf2.data()}, s);
    SD_CUDA_CHECK(cudaStreamSynchronize(s));
    EXPECT_TRUE(test::same_bits(d_conf2.download(s), want_conf, {N}))
        << "propose_device_graphed call " << call;
  }

  test::TempDir plain_dir;
  write_synthetic_checkpoint(preset_config("tiny"), plain_dir.path(), SyntheticOptions{});
  cuda::CudaDraft plain(std::make_shared<const Checkpoint>(Checkpoint::load(plain_dir.path())), o,
                        co);
  EXPECT_THROW(plain.propose_device(db, {d_tokens.data(), d_cache.data(), d_conf.data()}, s),
               InvalidArgument);
}

}  // namespace
}  // namespace sparkdraft
