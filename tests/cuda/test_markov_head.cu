// The gated and rnn Markov heads on the GPU (contract.md section 13), bit for bit against the
// CPU: cuda::markov_head (the gather kernel, cuda::gemm with fp32 output, the units kernel)
// against cpu::markov_head op by op; the eager loop (cuda::MarkovLoop, which refuses the fused
// loop for these heads) against runtime/markov_loop.cpp's loop; CudaDraft's CPU == GPU eager ==
// GPU fused backbone on the presets tiny-gated and tiny-rnn (cuda::check_draft); TP 2 refused.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <vector>

#include "check/check_draft.h"
#include "common/bits.h"
#include "common/errors.h"
#include "common/files.h"
#include "common/random.h"
#include "cuda/device_markov_rows.h"
#include "cuda/gpu_test_util.h"
#include "cuda/markov/markov.h"
#include "runtime/markov_loop.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/config.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/draft.h"
#include "sparkdraft/error.h"
#include "sparkdraft/scenario.h"

namespace sparkdraft {
namespace {

using cuda::DeviceBuffer;
using cuda::DeviceStream;

constexpr uint16_t kUntouched = 0xABAB;  // cache prefill: slots nobody writes keep it

const char* name(MarkovHeadType t) { return t == MarkovHeadType::gated ? "gated" : "rnn"; }

// Projection weights [P, K] and bias [P] of a head, with a few saturating and NaN entries.
struct HeadWeights {
  std::vector<bf16> w, b;
};
HeadWeights head_weights(uint64_t seed, MarkovHeadType type, int H, int K) {
  ModelConfig c;
  c.hidden_size = H;
  c.markov_rank = K;
  c.markov_head_type = type;
  const int P = c.markov_proj_rows(), KK = c.markov_proj_inputs();
  HeadWeights hw;
  hw.w = test::Gen(seed).normal_bf16s(static_cast<size_t>(P) * KK, 1.5f / std::sqrt(KK));
  hw.b = test::Gen(seed + 1).normal_bf16s(static_cast<size_t>(P), 0.5f);
  hw.b[0] = to_bf16(200.0f);  // a saturated gate (sigmoid 1)
  if (P > 2) hw.b[P - 1] = to_bf16(-200.0f);
  return hw;
}

// cuda::markov_head op by op against cpu::markov_head: u (written over e) and the rnn state,
// zero_state (step 0) against a zero state on the CPU; odd H and ranks, one row to many (the
// GEMM's tiles), NaN and huge inputs.
TEST(MarkovEager, HeadStepMatchesCpu) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  const cudaStream_t s = stream.get();
  struct Shape {
    int rows, H, K;
  };
  const Shape shapes[] = {{1, 64, 64}, {5, 37, 24}, {17, 128, 16}, {70, 200, 40}, {3, 4096, 256}};
  int n_case = 0;
  for (MarkovHeadType type : {MarkovHeadType::gated, MarkovHeadType::rnn}) {
    for (const Shape& sh : shapes) {
      for (const bool zero_state : {false, true}) {
        const uint64_t seed = 9100 + n_case++;
        const int R = sh.rows, H = sh.H, K = sh.K;
        SCOPED_TRACE(std::string(name(type)) + " rows " + std::to_string(R) + " H " +
                     std::to_string(H) + " rank " + std::to_string(K) + " zero_state " +
                     std::to_string(zero_state) + " seed " + std::to_string(seed));
        std::printf("[markov head] %s rows %d H %d rank %d seed %llu\n", name(type), R, H, K,
                    static_cast<unsigned long long>(seed));
        const HeadWeights hw = head_weights(seed, type, H, K);
        const int h_stride = H + 3;  // rows of h not packed
        std::vector<bf16> h =
            test::Gen(seed + 2).normal_bf16s(static_cast<size_t>(R) * h_stride, 1.0f);
        std::vector<bf16> e = test::Gen(seed + 3).normal_bf16s(static_cast<size_t>(R) * K, 1.0f);
        std::vector<bf16> state =
            test::Gen(seed + 4).normal_bf16s(static_cast<size_t>(R) * K, 0.7f);
        const float nan = std::numeric_limits<float>::quiet_NaN();
        if (R > 1) h[static_cast<size_t>(1) * h_stride + H / 2] = to_bf16(nan);
        if (R > 2) {
          e[static_cast<size_t>(2) * K] = to_bf16(3.0e38f);
          e[static_cast<size_t>(2) * K + 1] = to_bf16(-INFINITY);
        }
        if (R > 3) state[static_cast<size_t>(3) * K + K - 1] = to_bf16(nan);

        ops::MarkovHeadParams p{type, R, H, K};
        p.h_stride = h_stride;
        p.w = hw.w.data();
        p.b = hw.b.data();
        std::vector<bf16> want_u = e, want_state = state;
        if (zero_state) std::fill(want_state.begin(), want_state.end(), bf16{0});
        p.h = h.data();
        p.e = want_u.data();
        p.u = want_u.data();
        p.state = want_state.data();
        cpu::markov_head(p, 2);

        DeviceBuffer<bf16> d_h(h, s), d_e(e, s), d_state(state, s), d_w(hw.w, s), d_b(hw.b, s);
        DeviceBuffer<bf16> d_x(static_cast<size_t>(R) * p.proj_inputs());
        DeviceBuffer<float> d_acc(static_cast<size_t>(R) * p.proj_rows());
        ops::MarkovHeadParams dp = p;
        dp.h = d_h.data();
        dp.e = d_e.data();
        dp.u = d_e.data();
        dp.state = d_state.data();
        dp.w = d_w.data();
        dp.b = d_b.data();
        cuda::markov_head(dp, d_x.data(), d_acc.data(), s, zero_state);
        SD_CUDA_CHECK(cudaStreamSynchronize(s));
        EXPECT_TRUE(test::same_bits(d_e.download(s), want_u, {K, false}))
            << "u (row = request row)";
        if (type == MarkovHeadType::rnn) {
          EXPECT_TRUE(test::same_bits(d_state.download(s), want_state, {K, false}))
              << "the next state";
        }
      }
    }
  }
}

// The eager loop with the head (cuda::MarkovLoop: the fused loop refuses it) against the CPU
// loop from the same base logits and hidden states: tokens and every cache row, bit for bit.
// Odd V, the transforms, a NaN in h, huge h, a padding row, shuffled slots.
TEST(MarkovEager, HeadLoopMatchesCpuLoop) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  const cudaStream_t s = stream.get();
  struct Shape {
    int vocab, H, K, rows, steps;
    bool cap;
  };
  const Shape shapes[] = {{1000, 64, 64, 5, 7, false},
                          {4099, 37, 32, 4, 3, true},
                          {517, 128, 16, 6, 5, false},
                          {151936, 512, 256, 2, 3, true}};
  int n_case = 0;
  for (MarkovHeadType type : {MarkovHeadType::gated, MarkovHeadType::rnn}) {
    for (const Shape& sh : shapes) {
      const uint64_t seed = 9300 + n_case++;
      const int V = sh.vocab, H = sh.H, K = sh.K, R = sh.rows, N = sh.steps, slots = R + 2;
      SCOPED_TRACE(std::string(name(type)) + " V " + std::to_string(V) + " H " + std::to_string(H) +
                   " rank " + std::to_string(K) + " rows " + std::to_string(R) + " N " +
                   std::to_string(N) + " seed " + std::to_string(seed));
      std::printf("[markov head] loop %s V %d H %d rank %d rows %d N %d seed %llu\n", name(type), V,
                  H, K, R, N, static_cast<unsigned long long>(seed));
      test::Gen gen(seed);
      std::vector<bf16> w1 = gen.normal_bf16s(static_cast<size_t>(V) * K, 1.0f);
      std::vector<bf16> w2 = gen.normal_bf16s(static_cast<size_t>(V) * K, 0.3f);
      std::vector<bf16> base = gen.normal_bf16s(static_cast<size_t>(R) * N * V, 2.0f);
      std::vector<bf16> hidden = gen.normal_bf16s(static_cast<size_t>(R) * N * H, 1.0f);
      const HeadWeights hw = head_weights(seed + 7, type, H, K);
      if (R > 1 && N > 1)
        hidden[(static_cast<size_t>(1) * N + 1) * H + 3] =
            to_bf16(std::numeric_limits<float>::quiet_NaN());
      if (R > 2)
        for (int j = 0; j < N; ++j)
          for (int i = 0; i < H; i += 2)
            hidden[(static_cast<size_t>(2) * N + j) * H + i] = to_bf16(j % 2 ? 1.0e4f : -1.0e4f);
      ModelConfig c;
      c.vocab_size = V;
      c.hidden_size = H;
      c.block_size = N;
      c.markov_rank = K;
      c.markov_head_type = type;
      if (sh.cap) {
        c.logit_multiplier = 0.75f;
        c.logit_soft_cap = 20.0f;
      }
      const ops::LogitTransform transform = ops::LogitTransform::from_config(c);
      std::vector<int64_t> anchors(R), positions(R), seeds(R), slots_of(R);
      std::vector<float> temps(R);
      const float tcycle[] = {0.0f, 0.7f, 1.0f, 1e-3f};
      for (int r = 0; r < R; ++r) {
        anchors[r] = gen.integer(0, V - 1);
        positions[r] = gen.integer(0, int64_t{1} << 30);
        seeds[r] = gen.integer(INT64_MIN / 2, INT64_MAX / 2);
        temps[r] = tcycle[r % 4];
        // Distinct slots (5 is prime to every `slots` here), the last row padding.
        slots_of[r] = r == R - 1 && R > 2 ? -1 : (r * 5 + 1) % slots;
      }
      // CPU.
      DraftWeights w;
      w.markov_w1 = w1.data();
      w.markov_w2 = w2.data();
      w.markov_proj_w = hw.w.data();
      w.markov_proj_b = hw.b.data();
      const ops::MarkovRows host_rows{
          R, anchors.data(), positions.data(), seeds.data(), temps.data(), slots_of.data()};
      std::vector<int64_t> want_tokens(static_cast<size_t>(R) * N, -7);
      std::vector<bf16> want_cache(static_cast<size_t>(slots) * N * V, bf16{kUntouched});
      const MarkovInputs in{&c, &w, &transform, &host_rows, slots, 2, hidden.data()};
      markov_loop_from_base(in, 1, base.data(),
                            ProposeOutputs{want_tokens.data(), want_cache.data()});
      // GPU.
      DeviceBuffer<bf16> d_w1(w1, s), d_w2(w2, s), d_base(base, s), d_hidden(hidden, s),
          d_pw(hw.w, s), d_pb(hw.b, s);
      const test::DeviceMarkovRows d_rows(host_rows, s);
      cuda::MarkovHead head;
      head.w1 = d_w1.data();
      head.w2 = d_w2.data();
      head.vocab = V;
      head.markov_rank = K;
      head.transform = transform;
      head.head_type = type;
      head.hidden = H;
      head.proj_w = d_pw.data();
      head.proj_b = d_pb.data();
      cuda::MarkovLoop loop(head, R, N);
      EXPECT_FALSE(loop.fused());
      EXPECT_NE(loop.refusal().find(std::string(name(type)) + " Markov head"), std::string::npos)
          << loop.refusal();
      DeviceBuffer<int64_t> d_tokens(static_cast<size_t>(R) * N);
      DeviceBuffer<bf16> d_cache(std::vector<bf16>(want_cache.size(), bf16{kUntouched}), s);
      d_tokens.zero(s);
      cuda::MarkovBatch b;
      b.rows = d_rows.view();
      b.steps = N;
      b.base_logits = d_base.data();
      b.draft_tokens = d_tokens.data();
      b.cache = d_cache.data();
      b.hidden = d_hidden.data();
      // Twice: the rnn state starts at +0 on every call.
      for (int call = 0; call < 2; ++call) {
        loop.run(b, s);
        SD_CUDA_CHECK(cudaStreamSynchronize(s));
        std::vector<int64_t> tokens = d_tokens.download(s), want = want_tokens;
        for (int r = 0; r < R; ++r)  // a padding row's tokens are don't-care
          if (slots_of[r] < 0)
            for (int j = 0; j < N; ++j)
              tokens[static_cast<size_t>(r) * N + j] = want[static_cast<size_t>(r) * N + j] = 0;
        EXPECT_TRUE(test::same_bits(tokens, want, {N, false}))
            << "tokens (row = request row, col = step), call " << call;
        test::BitsOptions o{V, false};
        o.note = [&](size_t i) {
          return "= cache[slot " + std::to_string(i / V / N) + "][step " +
                 std::to_string(i / V % N) + "][id " + std::to_string(i % V) + "]";
        };
        EXPECT_TRUE(test::same_bits(d_cache.download(s), want_cache, o)) << "cache, call " << call;
      }
      if (R > 1 && N > 1 && slots_of[1] >= 0) {
        EXPECT_EQ(want_tokens[static_cast<size_t>(1) * N + 1], 0) << "a NaN h: the lowest id";
      }
      // Without the hidden states the loop refuses.
      b.hidden = nullptr;
      EXPECT_THROW(loop.run(b, s), InvalidArgument);
    }
  }
}

// The whole draft: CPU == GPU eager == GPU fused backbone (the Markov loop eager: the fused
// loop refuses these heads) over a multi-round scenario, both layer styles; the plan says so.
TEST(CudaDraft, MarkovHeadsCpuEqualsEagerEqualsFused) {
  SD_REQUIRE_GPU();
  for (const char* preset : {"tiny-gated", "tiny-rnn"}) {
    for (const char* style : {"qwen3", "muse"}) {
      SCOPED_TRACE(std::string(preset) + " " + style);
      test::TempDir dir;
      write_synthetic_checkpoint(preset_config(preset, style), dir.path(), SyntheticOptions{});
      auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(dir.path()));
      ScenarioOptions s;
      s.request_ids = {0, 1, 2, 3};
      s.padding_before = {1};
      s.rounds = 3;
      const CheckReport report = cuda::check_draft(ckpt, s);
      std::printf("%s %s:\n%s", preset, style, report.text().c_str());
      EXPECT_TRUE(report.ok()) << report.text();
      EXPECT_EQ(report.mode, "Markov loop eager, fused refused");
      cuda::CudaDraft draft(ckpt, DraftOptions{});
      const std::string plan = draft.plan().text();
      EXPECT_NE(plan.find(std::string(preset == std::string("tiny-gated") ? "gated" : "rnn") +
                          " Markov head (markov_head_type"),
                std::string::npos)
          << plan;
    }
  }
}

// The GPU vocab-parallel loop does not take these heads (contract.md 13.3): TP 2 is refused by
// name before any allocation.
TEST(CudaDraft, RefusesTheMarkovHeadsAboveTp1) {
  SD_REQUIRE_GPU();
  for (const char* type : {"gated", "rnn"}) {
    test::TempDir dir;
    write_synthetic_checkpoint(preset_config(std::string("tiny-") + type), dir.path(),
                               SyntheticOptions{});
    auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(dir.path()));
    DraftOptions o;
    o.max_reqs = 2;
    o.tp = 2;
    test::expect_mentions(
        test::error_of<ConfigError>([&] { cuda::CudaDraft d(ckpt, o, cuda::CudaDraftOptions{}); }),
        {std::string(type) + " Markov head", "markov_head_type", "TP 1 only", "tp 2"});
  }
}

}  // namespace
}  // namespace sparkdraft
