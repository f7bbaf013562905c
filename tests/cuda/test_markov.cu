// The GPU Markov loop (cuda/markov/markov.h) against its references:
//   * the eager kernels (bias GEMV, step logits + transform, sampler) against the
//     CPU ops of cpu/ops.h, bit for bit, over sweeps;
//   * the fused loop and the vocab-parallel loop (loopback, 2/4/8 shards) against
//     the eager loop, bit for bit in tokens and the whole cache, over rows 1..64
//     (every block-table bucket), N 1..16, V 1000 / 32000 / 151936 / 202048,
//     rank 16..1024, T 0 / 0.7 / 1, NaN rows, exact ties, padding rows, PDL and
//     the alternating walk on and off, and inside a CUDA graph;
//   * the fused loop against the CPU ops composed into the loop.
// Besides equality, rows with injected NaNs or ties must pick the contract's
// token (the lowest NaN id; the lowest id of the maximum), which catches a rule
// error that eager and fused would share.
//
// NaN: against the CPU a NaN logit matches a NaN logit whatever its payload (the
// GPU's fp32 arithmetic returns the canonical NaN, x86 keeps payloads); GPU
// against GPU compares raw bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "common/bits.h"
#include "cuda/comm/loopback.h"
#include "cuda/common/graph.h"
#include "cuda/device_markov_rows.h"
#include "cuda/gpu_test_util.h"
#include "cuda/markov/detail.h"
#include "cuda/markov/markov.h"
#include "markov/bench_markov.h"
#include "runtime/markov_loop.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/config.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/philox.h"
#include "sparkdraft/core/sampling.h"
#include "sparkdraft/core/topk.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#if defined(SPARKDRAFT_HAVE_NCCL)
#include "sparkdraft/cuda/nccl_comm.h"
#endif
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

using cuda::DeviceBuffer;
using cuda::DeviceStream;

constexpr uint16_t kUntouched = 0xABAB;  // cache prefill: slots nobody writes keep it

std::string hex32(uint32_t bits) { return test::hex_bits(bits, 4); }

// ---- the noise bound and the plan (no GPU needed) -------------------------------------

TEST(MarkovNoiseBound, BoundsEveryDrawnUniformFromAboveAndBelow) {
  using namespace cuda::markov_detail;
  const std::vector<float> table = noise_bound_table();
  ASSERT_EQ(table.size(), static_cast<size_t>(kNoiseBuckets));
  EXPECT_EQ(noise_bucket(kUniformScale), 31);
  // The largest bound is the largest noise the sampler draws (the slot cut's kGumbelMax).
  EXPECT_EQ(f32_bits(table[0]), f32_bits(kGumbelMax));
  EXPECT_EQ(f32_bits(table[31]), f32_bits(kGumbelMax));
  EXPECT_LE(kNoiseFloor, kGumbelMin);
  EXPECT_EQ(noise_bucket(bits_f32(0x3F7FFFFFu)), kNoiseBuckets - 1);  // 1 - 2^-24
  for (int b = 1; b < kNoiseBuckets; ++b) EXPECT_LE(table[b], table[b - 1]) << "bucket " << b;
  // Uniforms exactly as the sampler draws them (philox_uniform over random counters),
  // plus every bucket's lowest and highest value.
  std::mt19937_64 rng(12345);
  for (int i = 0; i < 200000; ++i) {
    const float u = philox_uniform(static_cast<uint32_t>(rng()), static_cast<int64_t>(rng() >> 1));
    const int b = noise_bucket(u);
    ASSERT_TRUE(b >= 0 && b < kNoiseBuckets) << "u " << hex32(f32_bits(u));
    ASSERT_LE(gumbel_noise(u), table[b]) << "u " << hex32(f32_bits(u)) << " bucket " << b;
    // The next bucket's bound is a lower bound of this bucket's noise (the fused
    // step's zlo), kNoiseFloor for the last bucket.
    ASSERT_GE(gumbel_noise(u), b + 1 < kNoiseBuckets ? table[b + 1] : kNoiseFloor)
        << "u " << hex32(f32_bits(u)) << " bucket " << b;
  }
  for (int b = 31; b < kNoiseBuckets; ++b) {
    const uint32_t lo = std::max(kNoiseBucketBase + (static_cast<uint32_t>(b) << kNoiseBucketShift),
                                 f32_bits(kUniformScale));
    const uint32_t hi = std::min(
        kNoiseBucketBase + (static_cast<uint32_t>(b + 1) << kNoiseBucketShift) - 1, 0x3F7FFFFFu);
    for (const uint32_t bits : {lo, hi}) {
      EXPECT_EQ(noise_bucket(bits_f32(bits)), b);
      EXPECT_LE(gumbel_noise(bits_f32(bits)), table[b]) << "u " << hex32(bits);
      EXPECT_GE(gumbel_noise(bits_f32(bits)), b + 1 < kNoiseBuckets ? table[b + 1] : kNoiseFloor)
          << "u " << hex32(bits);
    }
  }
}

TEST(MarkovPlan, RefusesWithTheReason) {
  cuda::MarkovPlanInput ok;
  ok.vocab = 151936;
  ok.markov_rank = 256;
  ok.max_rows = 32;
  EXPECT_EQ(cuda::fused_markov_refusal(ok), "");
  auto refusal = [&](auto edit) {
    cuda::MarkovPlanInput in = ok;
    edit(in);
    return cuda::fused_markov_refusal(in);
  };
  auto has = [](const std::string& s, const std::string& part) {
    return s.find(part) != std::string::npos;
  };
  EXPECT_TRUE(has(refusal([](auto& in) { in.markov_rank = 0; }), "no Markov head"));
  EXPECT_TRUE(has(refusal([](auto& in) { in.markov_rank = 48; }), "rank 48 is not a power of two"));
  EXPECT_TRUE(has(refusal([](auto& in) { in.markov_rank = 4; }), "rank 4"));
  EXPECT_TRUE(has(refusal([](auto& in) { in.markov_rank = 8; }),
                  "rank 8 is not a power of two in [16, 1024]"));
  EXPECT_TRUE(has(refusal([](auto& in) { in.markov_rank = 2048; }), "rank 2048"));
  EXPECT_TRUE(has(refusal([](auto& in) { in.draft_vocab = 32000; }), "reduced draft vocabulary"));
  EXPECT_TRUE(has(refusal([](auto& in) { in.head_type = MarkovHeadType::gated; }),
                  "the gated Markov head (markov_head_type, contract.md section 13)"));
  EXPECT_TRUE(
      has(refusal([](auto& in) { in.head_type = MarkovHeadType::rnn; }), "the rnn Markov head"));
  EXPECT_TRUE(has(refusal([](auto& in) { in.cache_bf16_contiguous = false; }), "contiguous bf16"));
  EXPECT_TRUE(
      has(refusal([](auto& in) { in.tp_size = 3; }), "shard count 3 is not a power of two"));
  EXPECT_TRUE(has(refusal([](auto& in) {
                    in.vocab = 1001;
                    in.tp_size = 2;
                  }),
                  "vocab 1001 is not divisible by the shard count 2"));
  alignas(16) static const char buffer[32] = {};
  EXPECT_TRUE(has(refusal([&](auto& in) { in.w1 = buffer + 2; }), "w1 is not 16-byte aligned"));
  EXPECT_TRUE(has(refusal([&](auto& in) { in.w2 = buffer + 8; }), "w2 is not 16-byte aligned"));
  EXPECT_EQ(refusal([&](auto& in) {
              in.w1 = buffer;
              in.w2 = buffer + 16;
            }),
            "");
  EXPECT_TRUE(has(refusal([](auto& in) {
                    in.markov_rank = 1024;
                    in.max_rows = 4096;
                  }),
                  "do not fit the fused step's shared memory"));
  EXPECT_EQ(refusal([](auto& in) {
              in.vocab = 202048;
              in.markov_rank = 512;
              in.tp_size = 8;
              in.max_rows = 64;
            }),
            "");
}

// The invariants the fused kernel relies on, for every row count and rank.
TEST(MarkovPlan, StepShapesFitAndKeepWarpsBusy) {
  using namespace cuda::markov_detail;
  const int max_smem = 227 * 1024, per_sm = 228 * 1024;
  for (int markov_rank = kMinRank; markov_rank <= kMaxRank; markov_rank *= 2) {
    int last_fitting = 0;
    for (int rows = 1; rows <= 512; ++rows) {
      SCOPED_TRACE("rank " + std::to_string(markov_rank) + " rows " + std::to_string(rows));
      const int tile_v = fused_tile_vocab(markov_rank);
      const int width = fused_epilogue_tiles(rows, markov_rank) * tile_v;
      const int epl = fused_entries_per_lane(rows);
      EXPECT_EQ(width / epl & (width / epl - 1), 0);  // a power of two of slots per row
      EXPECT_GE(rows * width, epl * kFusedThreads);   // a slot for every thread
      EXPECT_LE(fused_epilogue_tiles(rows, markov_rank), kMaxEpilogueTiles);
      EXPECT_EQ(tile_v % 16, 0);  // whole m16 tiles of the tensor-core chain
      cuda::FusedStepShape shape;
      if (!cuda::fused_step_shape(rows, markov_rank, max_smem, per_sm, &shape)) continue;
      last_fitting = rows;
      EXPECT_LE(shape.smem_bytes, max_smem);
      EXPECT_LE(shape.blocks_per_sm * (shape.smem_bytes + 1024), per_sm);
      EXPECT_GE(shape.stages, 2);
      EXPECT_LE(shape.stages, kMaxStages);
      EXPECT_EQ(shape.smem_bytes, fused_smem_layout(rows, markov_rank, shape.stages).total);
    }
    EXPECT_GE(last_fitting, 64) << "rank " << markov_rank << ": fewer than 64 rows fit";
  }
  cuda::FusedStepShape shape;
  EXPECT_FALSE(cuda::fused_step_shape(1, 48, max_smem, per_sm, &shape));
  EXPECT_FALSE(cuda::fused_step_shape(0, 64, max_smem, per_sm, &shape));
}

TEST(MarkovPlan, VocabParallelRefusalThrowsAtBuild) {
  cuda::MarkovHead head;
  head.vocab = 1000;
  head.markov_rank = 48;
  cuda::LoopbackComm comm(2);
  try {
    cuda::VocabParallelMarkov loop(head, comm, 4, 7);
    FAIL() << "a rank-48 vocab-parallel draft was accepted";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 48 is not a power of two"), std::string::npos)
        << e.what();
  }
  head.markov_rank = 64;
  cuda::LoopbackComm three(3);
  EXPECT_THROW(cuda::VocabParallelMarkov(head, three, 4, 7), ConfigError);
}

TEST(MarkovPlan, LogsEachReasonOnce) {
  const std::string message =
      "test_markov: a reason logged once " + std::to_string(std::random_device{}());
  EXPECT_TRUE(cuda::markov_log_once(message));
  EXPECT_FALSE(cuda::markov_log_once(message));
}

// ---- eager kernels against the CPU ------------------------------------------------------

class Gen {
 public:
  explicit Gen(uint64_t seed) : rng_(seed) {}
  float uniform(float lo, float hi) { return std::uniform_real_distribution<float>(lo, hi)(rng_); }
  int64_t integer(int64_t lo, int64_t hi) {  // [lo, hi]
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  std::vector<bf16> bf16s(size_t n, float lo, float hi) {
    std::vector<bf16> v(n);
    for (auto& x : v) x = to_bf16(uniform(lo, hi));
    return v;
  }

 private:
  std::mt19937_64 rng_;
};

ops::LogitTransform transform_of(int kind) {
  ops::LogitTransform t;
  if (kind == 0) return t;
  t.enabled = true;
  if (kind == 1 || kind == 3) t.multiplier = 0.7071f;
  if (kind >= 2) {
    t.has_cap = true;
    t.cap = 30.0f;
    t.inv_cap = 1.0f / t.cap;
  }
  return t;
}

TEST(MarkovEager, BiasMatchesCpu) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  int cases = 0;
  for (const int markov_rank : {7, 8, 20, 64, 256, 512, 1024}) {
    for (const int vocab : {1, 33, 1000, 4099}) {
      for (const int rows : {1, 3, 8}) {
        const uint64_t seed = 1000u * markov_rank + 10u * vocab + rows;
        SCOPED_TRACE("rank " + std::to_string(markov_rank) + " vocab " + std::to_string(vocab) +
                     " rows " + std::to_string(rows) + " seed " + std::to_string(seed));
        Gen gen(seed);
        std::vector<bf16> e = gen.bf16s(static_cast<size_t>(rows) * markov_rank, -1.0f, 1.0f);
        std::vector<bf16> w2 = gen.bf16s(static_cast<size_t>(vocab) * markov_rank, -0.5f, 0.5f);
        // Tiny products (subnormal partial sums) and exact cancellations.
        if (rows > 1) e[static_cast<size_t>(markov_rank)] = to_bf16(2e-39f);
        w2[0] = to_bf16(-1e-20f);
        // Non-finite weights follow the tensor core's rules on both sides: +-inf in
        // w2 rows, NaN in another, +inf in the last row of e.
        if (vocab > 3) {
          w2[static_cast<size_t>(markov_rank)] = to_bf16(std::numeric_limits<float>::infinity());
          w2[static_cast<size_t>(2 * markov_rank + markov_rank / 2)] =
              to_bf16(-std::numeric_limits<float>::infinity());
          w2[static_cast<size_t>(3 * markov_rank + markov_rank - 1)] =
              to_bf16(std::numeric_limits<float>::quiet_NaN());
        }
        if (rows > 2)
          e[static_cast<size_t>((rows - 1) * markov_rank)] =
              to_bf16(std::numeric_limits<float>::infinity());
        std::vector<bf16> expected(static_cast<size_t>(rows) * vocab);
        cpu::markov_bias(e.data(), rows, w2.data(), vocab, markov_rank, expected.data(), 4);
        DeviceBuffer<bf16> d_e(e, stream.get()), d_w2(w2, stream.get()), d_bias(expected.size());
        cuda::markov_bias(d_e.data(), rows, d_w2.data(), vocab, markov_rank, d_bias.data(),
                          stream.get());
        ASSERT_TRUE(test::same_bits(d_bias.download(stream.get()), expected, {vocab})) << "bias";
        ++cases;
      }
    }
  }
  std::printf("[markov] bias vs CPU: %d cases\n", cases);
}

TEST(MarkovEager, StepLogitsMatchCpu) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  int cases = 0;
  for (const int vocab : {1, 1000, 32001}) {
    for (const int rows : {1, 5}) {
      for (int kind = 0; kind < 4; ++kind) {
        const uint64_t seed = 77u * vocab + 7u * rows + kind;
        SCOPED_TRACE("vocab " + std::to_string(vocab) + " rows " + std::to_string(rows) +
                     " transform " + std::to_string(kind) + " seed " + std::to_string(seed));
        Gen gen(seed);
        const size_t n = static_cast<size_t>(rows) * vocab;
        std::vector<bf16> base = gen.bf16s(n, -40.0f, 40.0f), bias = gen.bf16s(n, -3.0f, 3.0f);
        // Specials: NaNs of both signs, infinities, an overflowing sum, zeros.
        const uint16_t specials[] = {0x7fc0, 0xffc1, 0x7f80, 0xff80, 0x7f7f, 0x8000};
        for (int i = 0; i < 6 && i < static_cast<int>(n); ++i)
          base[static_cast<size_t>(gen.integer(0, static_cast<int64_t>(n) - 1))] =
              bf16{specials[i]};
        if (n > 1) bias[n - 1] = bf16{0x7f7f};  // with base 0x7f7f below: inf
        if (n > 1) base[n - 1] = bf16{0x7f7f};
        const ops::LogitTransform t = transform_of(kind);
        // Slots: row r -> cache slot rows - 1 - r, every third row padding.
        const int slots = rows + 2;
        std::vector<int64_t> cache_slots(rows);
        for (int r = 0; r < rows; ++r) cache_slots[r] = r % 3 == 1 ? -1 : rows - 1 - r;
        std::vector<bf16> expected(n),
            expected_cache(static_cast<size_t>(slots) * vocab, bf16{kUntouched});
        for (int r = 0; r < rows; ++r) {
          cpu::step_logits(base.data() + static_cast<size_t>(r) * vocab,
                           bias.data() + static_cast<size_t>(r) * vocab, vocab, t,
                           expected.data() + static_cast<size_t>(r) * vocab);
          if (cache_slots[r] >= 0)
            std::copy_n(expected.data() + static_cast<size_t>(r) * vocab, vocab,
                        expected_cache.data() + cache_slots[r] * vocab);
        }
        DeviceBuffer<bf16> d_base(base, stream.get()), d_bias(bias, stream.get()), d_l(n);
        DeviceBuffer<bf16> d_cache(
            std::vector<bf16>(static_cast<size_t>(slots) * vocab, bf16{kUntouched}), stream.get());
        DeviceBuffer<int64_t> d_slots(cache_slots, stream.get());
        ops::MarkovRows mrows;
        mrows.num_rows = rows;
        mrows.cache_slots = d_slots.data();
        cuda::markov_step_logits(d_base.data(), vocab, d_bias.data(), mrows, 0, vocab, t,
                                 d_l.data(), d_cache.data(), vocab, stream.get());
        test::BitsOptions logits_opts{vocab, true};
        logits_opts.note = [&](size_t i) {
          return "base " + test::hex_bits(base[i].bits, 2) + ", bias " +
                 test::hex_bits(bias[i].bits, 2);
        };
        ASSERT_TRUE(test::same_bits(d_l.download(stream.get()), expected, logits_opts)) << "logits";
        ASSERT_TRUE(test::same_bits(d_cache.download(stream.get()), expected_cache, {vocab, true}))
            << "cache [slot][vocab]";
        ++cases;
      }
    }
  }
  std::printf("[markov] step logits vs CPU: %d cases\n", cases);
}

TEST(MarkovEager, SamplerMatchesCpu) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  int cases = 0;
  const float temps[] = {0.0f, 0.7f, 1.0f, 1e-3f, 2.5f};
  for (const int vocab : {1, 2047, 2048, 2049, 32000, 151936}) {
    for (const int64_t offset : {int64_t{0}, int64_t{12345}}) {
      for (const int step : {0, 5}) {
        const int rows = 6;
        const uint64_t seed = 31u * vocab + 3u * static_cast<uint64_t>(offset) + step;
        SCOPED_TRACE("vocab " + std::to_string(vocab) + " id_offset " + std::to_string(offset) +
                     " step " + std::to_string(step) + " seed " + std::to_string(seed));
        Gen gen(seed);
        std::vector<bf16> l = gen.bf16s(static_cast<size_t>(rows) * vocab, -8.0f, 8.0f);
        std::vector<float> t(rows);
        std::vector<int64_t> seeds(rows), positions(rows);
        for (int r = 0; r < rows; ++r) {
          t[r] = r == 2 ? 0.0f : temps[(r + step) % 5];
          seeds[r] = static_cast<int64_t>(gen.integer(INT64_MIN / 2, INT64_MAX / 2));
          positions[r] = gen.integer(0, 1 << 20);
          bf16* row = l.data() + static_cast<size_t>(r) * vocab;
          if (r == 1) {  // two NaNs: the lower id wins
            row[vocab - 1] = bf16{0x7fc0};
            row[vocab / 2] = bf16{0xffc0};
          }
          if (r == 2 || r == 3) {  // exact ties at the top (T = 0 or tiny T)
            row[vocab - 1] = to_bf16(100.0f);
            row[vocab / 3] = to_bf16(100.0f);
            row[vocab / 3 + (vocab > 2)] = to_bf16(100.0f);
          }
          if (r == 4) row[vocab - 1] = bf16{0x7f80};  // +inf
        }
        DeviceBuffer<bf16> d_l(l, stream.get());
        DeviceBuffer<float> d_t(t, stream.get());
        DeviceBuffer<int64_t> d_seeds(seeds, stream.get()), d_pos(positions, stream.get());
        DeviceBuffer<cuda::MarkovCandidate> partials(static_cast<size_t>(rows) *
                                                     cuda::markov_sample_blocks(vocab));
        DeviceBuffer<cuda::MarkovCandidate> best(rows);
        DeviceBuffer<int64_t> tokens(rows);
        ops::MarkovRows mrows;
        mrows.num_rows = rows;
        mrows.anchor_positions = d_pos.data();
        mrows.seeds = d_seeds.data();
        mrows.temperatures = d_t.data();
        cuda::markov_sample(d_l.data(), mrows, vocab, offset, step, partials.data(), best.data(),
                            tokens.data(), 1, stream.get());
        const std::vector<cuda::MarkovCandidate> found = best.download(stream.get());
        const std::vector<int64_t> found_tokens = tokens.download(stream.get());
        for (int r = 0; r < rows; ++r) {
          const uint32_t gs = draft_step_seed(seeds[r], positions[r], step);
          const cpu::RowBest want =
              cpu::sample_row(l.data() + static_cast<size_t>(r) * vocab, vocab, offset, t[r], gs);
          ASSERT_EQ(found[r].id, want.id) << "row " << r << " T " << t[r] << ": token";
          ASSERT_EQ(found_tokens[r], want.id) << "row " << r << ": tokens[]";
          ASSERT_TRUE(test::same_bits(&found[r].value, &want.value, 1, {0, true}))
              << "row " << r << " T " << t[r] << ": score";
          if (r == 1) EXPECT_EQ(want.id, offset + vocab / 2) << "lowest NaN id";
          if (r == 2 && vocab > 2) EXPECT_EQ(want.id, offset + vocab / 3) << "lowest id of a tie";
        }
        ++cases;
      }
    }
  }
  std::printf("[markov] sampler vs CPU: %d cases\n", cases);
}

// ---- whole loops ---------------------------------------------------------------------------

struct LoopCase {
  int vocab = 1000;
  int markov_rank = 64;
  int rows = 1;
  int steps = 7;
  int transform = 0;                           // transform_of kind
  std::vector<float> temps{0.0f, 0.7f, 1.0f};  // cycled over rows
  bool nan = false;                            // NaN base logits at some (row, step)
  bool ties = false;                           // exact ties at the top for T = 0 rows, even steps
  bool padding = false;                        // every fourth row is a padding row (slot -1)
  bool bad_weights = false;                    // +inf, -inf and NaN in three w2 rows
  int tp_size = 0;                             // also run the loopback vocab-parallel loop (0: no)
  bool variants = false;  // also fused with PDL off and without the alternating walk
  // Base logits (make_inputs): 0 uniform [-8, 8]; 1 the trained profile (bulk
  // -2 + 2.5 N(0, 1), 8 ids in [18, 26), as bench markov --logits trained); 2 one entry
  // 64 above a bulk in [-8, 8] (the slot cut drops all but one); 3 the cut's edge: the
  // top 40 at 4 ids, the rest at 40 - kGumbelMax + kGumbelMin and a few bf16 ulps either
  // side (entries whose bound lands on the row's bound); 4 mixed slots: each entry in
  // [36, 40) with a probability that cycles over (row + step) through 0.005, 0.02, 0.06,
  // 0.15, 0.4, else in [-8, 8] (at T 1 and 0.5 the slots without such an entry are cut,
  // the others not, so a warp's drawing slots range from none to all). With zero_w2 the bias is +0
  // and l is the base itself (no transform).
  int logits = 0;
  bool zero_w2 = false;
  uint64_t seed = 1;

  int cache_slots() const { return rows + 3; }
  float temp(int r) const { return temps[static_cast<size_t>(r) % temps.size()]; }
  std::string describe() const {
    std::ostringstream os;
    os << "V " << vocab << " rank " << markov_rank << " rows " << rows << " N " << steps
       << " transform " << transform << " T {";
    for (size_t i = 0; i < temps.size(); ++i) os << (i ? "," : "") << temps[i];
    os << "}" << (nan ? " nan" : "") << (ties ? " ties" : "") << (padding ? " padding" : "")
       << (bad_weights ? " bad-weights" : "");
    if (logits) os << " logits " << logits << (zero_w2 ? " zero-w2" : "");
    if (tp_size) os << " shards " << tp_size;
    os << " seed " << seed;
    return os.str();
  }
};

// Ids whose w2 rows and (at tie steps) base logits are equal.
std::vector<int64_t> tie_ids(int vocab) { return {3, vocab / 2 + 1, vocab - 1}; }

// NaN positions of row r at step j (empty: none). Two per hit, the lower must win.
std::vector<int64_t> nan_ids(const LoopCase& c, int r, int j) {
  if (!c.nan || r % 3 != 1 || j % 3 != r % 3) return {};
  if (r % 2 == 1) return {c.vocab - 1};  // the very last entry (last tile, last block)
  return {c.vocab / 3 + r, c.vocab - 2};
}

struct LoopInputs {
  DeviceBuffer<bf16> w1, w2, base;
  DeviceBuffer<int64_t> anchors, positions, seeds, slots;
  DeviceBuffer<float> temps;
  std::vector<int64_t> h_slots;
  cuda::MarkovHead head;
};

void set_bf16(bf16* dst, bf16 value, cudaStream_t s) {
  SD_CUDA_CHECK(cudaMemcpyAsync(dst, &value, sizeof(bf16), cudaMemcpyHostToDevice, s));
  SD_CUDA_CHECK(cudaStreamSynchronize(s));
}

// The base logits of the profiles 1..3 (LoopCase::logits), seeded by the case's seed.
std::vector<bf16> profile_logits(const LoopCase& c) {
  const size_t v = static_cast<size_t>(c.vocab), count = static_cast<size_t>(c.rows) * c.steps * v;
  std::vector<bf16> out(count);
  std::mt19937_64 gen(c.seed * 4 + 3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::uniform_int_distribution<size_t> pick(0, v - 1);
  const float edge = 40.0f - kGumbelMax + kGumbelMin;
  const float near_share[] = {0.005f, 0.02f, 0.06f, 0.15f, 0.4f};
  for (size_t v0 = 0; v0 < count; v0 += v) {
    const size_t r = v0 / v / static_cast<size_t>(c.steps),
                 j = v0 / v % static_cast<size_t>(c.steps);
    const float near = near_share[(r + j) % 5];
    for (size_t i = 0; i < v; ++i) {
      if (c.logits == 4) {
        const bool high = unit(gen) < near;
        const float x = unit(gen);
        out[v0 + i] = to_bf16(high ? 36.0f + 4.0f * x : -8.0f + 16.0f * x);
      } else if (c.logits == 1) {
        out[v0 + i] = to_bf16(-2.0f + 2.5f * normal(gen));
      } else if (c.logits == 2) {
        out[v0 + i] = to_bf16(-8.0f + 16.0f * unit(gen));
      } else {
        const int ulps = static_cast<int>(pick(gen) % 7) - 3;  // -3 .. 3 bf16 ulps
        out[v0 + i] = bf16{static_cast<uint16_t>(to_bf16(edge).bits + ulps)};
      }
    }
    if (c.logits == 1)
      for (int h = 0; h < 8; ++h) out[v0 + pick(gen)] = to_bf16(18.0f + 8.0f * unit(gen));
    else if (c.logits == 2)
      out[v0 + pick(gen)] = to_bf16(72.0f);
    else if (c.logits == 3)
      for (int h = 0; h < 4; ++h) out[v0 + pick(gen)] = to_bf16(40.0f);
  }
  return out;
}

LoopInputs make_inputs(const LoopCase& c, cudaStream_t s) {
  LoopInputs in;
  const size_t v = c.vocab, k = c.markov_rank, rows = c.rows, n = c.steps;
  in.w1 = DeviceBuffer<bf16>(v * k);
  in.w2 = DeviceBuffer<bf16>(v * k);
  in.base = DeviceBuffer<bf16>(rows * n * v);
  cuda::fill_uniform_bf16(in.w1.data(), in.w1.size(), c.seed * 4 + 1, -0.5f, 0.5f, s);
  cuda::fill_uniform_bf16(in.w2.data(), in.w2.size(), c.seed * 4 + 2, -0.5f, 0.5f, s);
  cuda::fill_uniform_bf16(in.base.data(), in.base.size(), c.seed * 4 + 3, -8.0f, 8.0f, s);
  if (c.zero_w2) SD_CUDA_CHECK(cudaMemsetAsync(in.w2.data(), 0, in.w2.size() * sizeof(bf16), s));
  if (c.logits != 0) in.base.upload(profile_logits(c), s);
  if (c.bad_weights && v > 8) {  // the tensor core's rules for non-finite weights, both paths
    set_bf16(in.w2.data() + 5 * k, to_bf16(std::numeric_limits<float>::infinity()), s);
    set_bf16(in.w2.data() + (v / 3) * k + k - 1, to_bf16(-std::numeric_limits<float>::infinity()),
             s);
    set_bf16(in.w2.data() + (v - 2) * k + k / 2, to_bf16(std::numeric_limits<float>::quiet_NaN()),
             s);
  }
  Gen gen(c.seed);
  std::vector<int64_t> anchors(rows), positions(rows), seeds(rows);
  std::vector<float> temps(rows);
  in.h_slots.resize(rows);
  // Slots: a permutation into [0, rows + 3), every fourth row padding when asked.
  std::vector<int64_t> perm(static_cast<size_t>(c.cache_slots()));
  for (size_t i = 0; i < perm.size(); ++i) perm[i] = static_cast<int64_t>(i);
  std::shuffle(perm.begin(), perm.end(), std::mt19937_64(c.seed + 9));
  for (int r = 0; r < c.rows; ++r) {
    anchors[r] = gen.integer(0, c.vocab - 1);
    positions[r] = gen.integer(0, (int64_t{1} << 31) - 64);
    seeds[r] = gen.integer(INT64_MIN / 2, INT64_MAX / 2);
    temps[r] = c.temp(r);
    in.h_slots[r] = c.padding && r % 4 == 3 ? -1 : perm[static_cast<size_t>(r)];
  }
  in.anchors = DeviceBuffer<int64_t>(anchors, s);
  in.positions = DeviceBuffer<int64_t>(positions, s);
  in.seeds = DeviceBuffer<int64_t>(seeds, s);
  in.slots = DeviceBuffer<int64_t>(in.h_slots, s);
  in.temps = DeviceBuffer<float>(temps, s);
  if (c.ties) {
    const std::vector<int64_t> ids = tie_ids(c.vocab);
    for (size_t i = 1; i < ids.size(); ++i)
      SD_CUDA_CHECK(cudaMemcpyAsync(in.w2.data() + ids[i] * c.markov_rank,
                                    in.w2.data() + ids[0] * c.markov_rank, k * sizeof(bf16),
                                    cudaMemcpyDeviceToDevice, s));
    for (int r = 0; r < c.rows; ++r)
      for (int j = 0; j < c.steps; j += 2)
        if (c.temp(r) == 0.0f)
          for (const int64_t id : ids)
            set_bf16(in.base.data() + (static_cast<int64_t>(r) * c.steps + j) * c.vocab + id,
                     to_bf16(40.0f), s);
  }
  for (int r = 0; r < c.rows; ++r)
    for (int j = 0; j < c.steps; ++j)
      for (const int64_t id : nan_ids(c, r, j))
        set_bf16(in.base.data() + (static_cast<int64_t>(r) * c.steps + j) * c.vocab + id,
                 bf16{static_cast<uint16_t>(id % 2 ? 0x7fc0 : 0xffc1)}, s);
  SD_CUDA_CHECK(cudaStreamSynchronize(s));
  in.head.w1 = in.w1.data();
  in.head.w2 = in.w2.data();
  in.head.vocab = c.vocab;
  in.head.markov_rank = c.markov_rank;
  in.head.transform = transform_of(c.transform);
  return in;
}

struct LoopOutputs {
  std::vector<int64_t> tokens;  // [rows, N]
  std::vector<bf16> cache;      // [slots, N, V]
};

enum class LoopKind { eager, fused, sharded };

struct RunOptions {
  LoopKind kind = LoopKind::fused;
  bool pdl = true;
  bool alternate = true;
  int tp_size = 1;
};

cuda::MarkovBatch batch_of(const LoopCase& c, LoopInputs& in, int64_t* tokens, bf16* cache) {
  cuda::MarkovBatch b;
  b.rows = ops::MarkovRows{c.rows,          in.anchors.data(), in.positions.data(),
                           in.seeds.data(), in.temps.data(),   in.slots.data()};
  b.steps = c.steps;
  b.base_logits = in.base.data();
  b.draft_tokens = tokens;
  b.cache = cache;
  return b;
}

LoopOutputs run_loop(const LoopCase& c, LoopInputs& in, const RunOptions& o, cudaStream_t s) {
  const size_t cache_len = static_cast<size_t>(c.cache_slots()) * c.steps * c.vocab;
  DeviceBuffer<int64_t> tokens(static_cast<size_t>(c.rows) * c.steps);
  DeviceBuffer<bf16> cache(std::vector<bf16>(cache_len, bf16{kUntouched}), s);
  tokens.zero(s);
  const cuda::MarkovBatch batch = batch_of(c, in, tokens.data(), cache.data());
  if (o.kind == LoopKind::sharded) {
    const int width = c.vocab / o.tp_size;
    // Each shard's base logits [rows, N, V/S] and its slice of w2.
    std::vector<DeviceBuffer<bf16>> bases;
    bases.reserve(static_cast<size_t>(o.tp_size));
    std::vector<cuda::MarkovShard> shards(static_cast<size_t>(o.tp_size));
    for (int sh = 0; sh < o.tp_size; ++sh) {
      bases.emplace_back(static_cast<size_t>(c.rows) * c.steps * width);
      SD_CUDA_CHECK(cudaMemcpy2DAsync(bases.back().data(), width * sizeof(bf16),
                                      in.base.data() + static_cast<int64_t>(sh) * width,
                                      c.vocab * sizeof(bf16), width * sizeof(bf16),
                                      static_cast<size_t>(c.rows) * c.steps,
                                      cudaMemcpyDeviceToDevice, s));
      shards[sh] = cuda::MarkovShard{
          in.w2.data() + static_cast<int64_t>(sh) * width * c.markov_rank, bases.back().data()};
    }
    cuda::LoopbackComm comm(o.tp_size);
    cuda::VocabParallelMarkov loop(in.head, comm, c.rows, c.steps);
    loop.workspace().set_pdl(o.pdl);
    loop.workspace().set_alternate_direction(o.alternate);
    loop.run(batch, shards, s);
  } else {
    cuda::MarkovWorkspace ws(c.rows, c.steps, c.vocab, c.markov_rank, 1);
    ws.set_pdl(o.pdl);
    ws.set_alternate_direction(o.alternate);
    if (o.kind == LoopKind::eager)
      cuda::eager_markov_loop(in.head, batch, ws, s);
    else
      cuda::fused_markov_loop(in.head, batch, ws, s);
  }
  SD_CUDA_CHECK(cudaStreamSynchronize(s));
  return LoopOutputs{tokens.download(s), cache.download(s)};
}

// Names the differences: row/step of a token, slot/step/index of the cache.
::testing::AssertionResult same_outputs(const LoopCase& c, const LoopOutputs& found,
                                        const LoopOutputs& expected, bool nan_equal) {
  ::testing::AssertionResult tokens = test::same_bits(found.tokens, expected.tokens, {c.steps});
  if (!tokens) return tokens << " (tokens: row = request row, col = step)";
  test::BitsOptions o{c.vocab, nan_equal};
  o.note = [&](size_t i) {
    return "= cache[slot " + std::to_string(i / c.vocab / c.steps) + "][step " +
           std::to_string(i / c.vocab % c.steps) + "][" + std::to_string(i % c.vocab) + "]";
  };
  return test::same_bits(found.cache, expected.cache, o);
}

// The contract's picks the sweep forces (lowest NaN id; lowest id of a tie), and
// untouched cache slots of padding rows.
::testing::AssertionResult forced_picks(const LoopCase& c, const LoopInputs& in,
                                        const LoopOutputs& out) {
  for (int r = 0; r < c.rows; ++r)
    for (int j = 0; j < c.steps; ++j) {
      const int64_t token = out.tokens[static_cast<size_t>(r) * c.steps + j];
      std::vector<int64_t> nans = nan_ids(c, r, j);
      // The NaN in w2[vocab - 2] makes that entry's bias NaN for every row and step.
      if (c.bad_weights && c.vocab > 8) nans.push_back(c.vocab - 2);
      int64_t want = -1;
      if (!nans.empty())
        want = *std::min_element(nans.begin(), nans.end());
      else if (c.ties && c.temp(r) == 0.0f && j % 2 == 0)
        want = tie_ids(c.vocab)[0];
      if (want < 0) continue;
      if (token != want)
        return ::testing::AssertionFailure() << "row " << r << " step " << j << ": token " << token
                                             << ", the rule picks " << want;
    }
  std::vector<bool> used(static_cast<size_t>(c.cache_slots()), false);
  for (const int64_t slot : in.h_slots)
    if (slot >= 0) used[static_cast<size_t>(slot)] = true;
  const size_t plane = static_cast<size_t>(c.steps) * c.vocab;
  for (size_t slot = 0; slot < used.size(); ++slot) {
    if (used[slot]) continue;
    for (size_t i = 0; i < plane; ++i)
      if (out.cache[slot * plane + i].bits != kUntouched)
        return ::testing::AssertionFailure()
               << "cache slot " << slot << " (no row, or a padding row's) written at step "
               << i / c.vocab << " index " << i % c.vocab;
  }
  return ::testing::AssertionSuccess();
}

// SPARKDRAFT_SWEEP_SAMPLE=k runs every k-th case of the large sweeps (and says so):
// for runs under compute-sanitizer, which slows every kernel by orders of magnitude.
// Unset (CI, the normal GPU run), every case runs.
bool sweep_sample_skips(int n) {
  static const int k = [] {
    const char* v = std::getenv("SPARKDRAFT_SWEEP_SAMPLE");
    const int sample = v ? std::atoi(v) : 1;
    if (sample > 1)
      std::printf("[markov] SPARKDRAFT_SWEEP_SAMPLE=%d: every %d-th case\n", sample, sample);
    return sample > 1 ? sample : 1;
  }();
  return n % k != 0;
}

void check_case(const LoopCase& c, cudaStream_t s) {
  SCOPED_TRACE(c.describe());
  LoopInputs in = make_inputs(c, s);
  const LoopOutputs eager = run_loop(c, in, RunOptions{LoopKind::eager}, s);
  EXPECT_TRUE(forced_picks(c, in, eager)) << "eager";
  const LoopOutputs fused = run_loop(c, in, RunOptions{LoopKind::fused}, s);
  EXPECT_TRUE(same_outputs(c, fused, eager, false)) << "fused (PDL, alternating walk) vs eager";
  if (c.variants) {
    const LoopOutputs plain = run_loop(c, in, RunOptions{LoopKind::fused, false, false}, s);
    EXPECT_TRUE(same_outputs(c, plain, eager, false)) << "fused (no PDL, forward walk) vs eager";
    const LoopOutputs again = run_loop(c, in, RunOptions{LoopKind::fused}, s);
    EXPECT_TRUE(same_outputs(c, again, fused, false)) << "fused run to run";
  }
  if (c.tp_size > 1) {
    const LoopOutputs sharded =
        run_loop(c, in, RunOptions{LoopKind::sharded, true, true, c.tp_size}, s);
    EXPECT_TRUE(same_outputs(c, sharded, eager, false))
        << "vocab-parallel loopback, " << c.tp_size << " shards, vs eager";
    const LoopOutputs sharded_plain =
        run_loop(c, in, RunOptions{LoopKind::sharded, false, false, c.tp_size}, s);
    EXPECT_TRUE(same_outputs(c, sharded_plain, eager, false))
        << "vocab-parallel loopback, " << c.tp_size << " shards, no PDL, forward walk, vs eager";
  }
}

// Each shard's packet of a one-step loop is the CPU best of its vocab slice
// (id offset included), and the gathered cache equals the CPU step logits.
TEST(MarkovVocabParallel, ShardPacketsMatchCpuSliceBest) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  cudaStream_t s = stream.get();
  for (int tp_size : {2, 4, 8}) {
    LoopCase c;
    c.vocab = 1000;
    c.markov_rank = 64;
    c.rows = 2;
    c.steps = 1;
    c.temps = {0.0f, 1.0f};
    c.seed = 4242 + tp_size;
    SCOPED_TRACE(c.describe() + " shards " + std::to_string(tp_size));
    LoopInputs in = make_inputs(c, s);
    const int width = c.vocab / tp_size;
    std::vector<DeviceBuffer<bf16>> bases;
    bases.reserve(static_cast<size_t>(tp_size));
    std::vector<cuda::MarkovShard> local(static_cast<size_t>(tp_size));
    for (int sh = 0; sh < tp_size; ++sh) {
      bases.emplace_back(static_cast<size_t>(c.rows) * width);
      SD_CUDA_CHECK(cudaMemcpy2DAsync(bases.back().data(), width * sizeof(bf16),
                                      in.base.data() + static_cast<int64_t>(sh) * width,
                                      c.vocab * sizeof(bf16), width * sizeof(bf16), c.rows,
                                      cudaMemcpyDeviceToDevice, s));
      local[sh] = cuda::MarkovShard{in.w2.data() + static_cast<int64_t>(sh) * width * c.markov_rank,
                                    bases.back().data()};
    }
    DeviceBuffer<int64_t> tokens(static_cast<size_t>(c.rows));
    DeviceBuffer<bf16> cache(static_cast<size_t>(c.cache_slots()) * c.vocab);
    const cuda::MarkovBatch batch = batch_of(c, in, tokens.data(), cache.data());
    cuda::LoopbackComm comm(tp_size);
    cuda::VocabParallelMarkov loop(in.head, comm, c.rows, c.steps);
    loop.run(batch, local, s);
    SD_CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<cuda::MarkovPacket> packets(static_cast<size_t>(tp_size) * c.rows);
    loop.workspace().packets_recv.download(packets.data(), packets.size(), 0, s);
    // CPU: the step logits of each row over the full vocabulary, then per slice.
    const std::vector<bf16> w1 = in.w1.download(s), w2 = in.w2.download(s),
                            base = in.base.download(s);
    std::vector<int64_t> anchors(c.rows), positions(c.rows), seeds(c.rows);
    in.anchors.download(anchors.data(), c.rows, 0, s);
    in.positions.download(positions.data(), c.rows, 0, s);
    in.seeds.download(seeds.data(), c.rows, 0, s);
    for (int r = 0; r < c.rows; ++r) {
      std::vector<bf16> bias(c.vocab), l(c.vocab);
      cpu::markov_bias(w1.data() + anchors[r] * c.markov_rank, 1, w2.data(), c.vocab, c.markov_rank,
                       bias.data());
      cpu::step_logits(base.data() + static_cast<size_t>(r) * c.vocab, bias.data(), c.vocab,
                       in.head.transform, l.data());
      const uint32_t gs = draft_step_seed(seeds[r], positions[r], 0);
      for (int sh = 0; sh < tp_size; ++sh) {
        const cpu::RowBest best = cpu::sample_row(l.data() + sh * width, width,
                                                  static_cast<int64_t>(sh) * width, c.temp(r), gs);
        const cuda::MarkovPacket& pk = packets[static_cast<size_t>(sh) * c.rows + r];
        EXPECT_EQ(pk.id, best.id) << "row " << r << " shard " << sh << ": packet value " << pk.value
                                  << " nan " << pk.nan << ", cpu value " << best.value;
      }
    }
    // The token is the packets' winner in shard order.
    const std::vector<int64_t> h_tokens = tokens.download(s);
    for (int r = 0; r < c.rows; ++r) {
      cuda::MarkovPacket win = packets[r];
      for (int sh = 1; sh < tp_size; ++sh) {
        const cuda::MarkovPacket& pk = packets[static_cast<size_t>(sh) * c.rows + r];
        const float pv = pk.nan ? NAN : pk.value, wv = win.nan ? NAN : win.value;
        if (better(pv, pk.id, wv, win.id)) win = pk;
      }
      std::ostringstream all;
      for (int sh = 0; sh < tp_size; ++sh) {
        const cuda::MarkovPacket& pk = packets[static_cast<size_t>(sh) * c.rows + r];
        all << " [" << sh << ": " << pk.value << " id " << pk.id << " nan " << pk.nan << "]";
      }
      EXPECT_EQ(h_tokens[r], win.id)
          << "row " << r << ": the pick kernel's token; packets" << all.str();
    }
    // And the multi-step loop against the eager one.
    LoopCase m = c;
    m.rows = 4;
    m.steps = 6;
    m.temps = {0.0f, 0.7f, 1.0f};
    m.tp_size = tp_size;
    LoopInputs min = make_inputs(m, s);
    const LoopOutputs eager = run_loop(m, min, RunOptions{LoopKind::eager}, s);
    for (bool pdl : {false, true}) {
      const LoopOutputs sharded =
          run_loop(m, min, RunOptions{LoopKind::sharded, pdl, false, tp_size}, s);
      EXPECT_TRUE(same_outputs(m, sharded, eager, false)) << "multi-step, pdl " << pdl;
    }
  }
}

#if defined(SPARKDRAFT_HAVE_NCCL)
// The vocab-parallel loop over NCCL, one GPU and one thread per rank (contract.md section 6):
// every rank builds the same seeded inputs on its GPU (make_inputs is deterministic),
// keeps shard r of w2 and of the base logits, and runs VocabParallelMarkov over its
// NcclComm (per step one packet all-gather, then the cache all-gather); every rank's
// tokens and gathered cache are bit for bit the single-GPU eager loop's. Ranks 2, 4
// and 8 as far as the machine has GPUs.
TEST(MarkovVocabParallel, OverNcclOneGpuPerRankEqualsEager) {
  SD_REQUIRE_GPUS(2);
  int n = 0;
  for (const int tp : {2, 4, 8}) {
    if (tp > test::gpu_count()) break;
    std::vector<int> devices(static_cast<size_t>(tp));
    for (int r = 0; r < tp; ++r) devices[static_cast<size_t>(r)] = r;
    for (const int rows : {1, 7, 32}) {
      LoopCase c;
      c.vocab = rows == 7 ? 151936 : 1000;
      c.markov_rank = rows == 7 ? 256 : 64;
      c.rows = rows;
      c.steps = 7;
      c.transform = rows % 4;
      c.nan = rows != 7;
      c.ties = true;
      c.padding = rows >= 7;
      c.seed = 900 + n++;
      SCOPED_TRACE(c.describe() + " over NCCL, " + std::to_string(tp) + " GPUs");
      SD_CUDA_CHECK(cudaSetDevice(0));
      LoopOutputs expected;
      {
        DeviceStream stream;
        LoopInputs in = make_inputs(c, stream.get());
        expected = run_loop(c, in, RunOptions{LoopKind::eager}, stream.get());
      }
      std::vector<LoopOutputs> got(static_cast<size_t>(tp));
      cuda::run_nccl_group(devices, [&](cuda::NcclComm& comm) {
        const int r = comm.tp_rank(), width = c.vocab / tp;
        DeviceStream stream;
        const cudaStream_t s = stream.get();
        LoopInputs in = make_inputs(c, s);
        DeviceBuffer<bf16> base(static_cast<size_t>(c.rows) * c.steps * width);
        SD_CUDA_CHECK(cudaMemcpy2DAsync(
            base.data(), width * sizeof(bf16), in.base.data() + static_cast<int64_t>(r) * width,
            c.vocab * sizeof(bf16), width * sizeof(bf16), static_cast<size_t>(c.rows) * c.steps,
            cudaMemcpyDeviceToDevice, s));
        const cuda::MarkovShard shard{
            in.w2.data() + static_cast<int64_t>(r) * width * c.markov_rank, base.data()};
        const size_t cache_len = static_cast<size_t>(c.cache_slots()) * c.steps * c.vocab;
        DeviceBuffer<int64_t> tokens(static_cast<size_t>(c.rows) * c.steps);
        DeviceBuffer<bf16> cache(std::vector<bf16>(cache_len, bf16{kUntouched}), s);
        tokens.zero(s);
        const cuda::MarkovBatch batch = batch_of(c, in, tokens.data(), cache.data());
        cuda::VocabParallelMarkov loop(in.head, comm, c.rows, c.steps);
        loop.run(batch, std::span<const cuda::MarkovShard>(&shard, 1), s);
        SD_CUDA_CHECK(cudaStreamSynchronize(s));
        got[static_cast<size_t>(r)] = LoopOutputs{tokens.download(s), cache.download(s)};
      });
      for (int r = 0; r < tp; ++r)
        EXPECT_TRUE(same_outputs(c, got[static_cast<size_t>(r)], expected, false))
            << "rank " << r << " of " << tp << " (NCCL) vs the eager loop on one GPU";
    }
  }
}
#endif

TEST(MarkovFused, MatchesEagerSmallVocabEveryBucket) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  int n = 0;
  const int shard_cycle[] = {2, 4, 8};
  for (const int markov_rank : {64, 256, 512}) {
    for (const int rows : {1, 2, 3, 4, 5, 7, 8, 9, 16, 17, 31, 32, 33, 48, 64}) {
      LoopCase c;
      c.vocab = 1000;
      c.markov_rank = markov_rank;
      c.rows = rows;
      c.steps = 1 + (rows + markov_rank / 64) % 16;
      c.transform = rows % 4;
      c.nan = rows % 2 == 1;
      c.ties = rows % 3 != 1;
      c.padding = rows >= 3;
      c.tp_size = n % 3 == 0 ? shard_cycle[(n / 3) % 3] : 0;
      c.variants = n % 5 == 0;
      c.bad_weights = n % 7 == 3;
      c.seed = 100 + n;
      if (!sweep_sample_skips(n)) {
        std::printf("[markov] %s\n", c.describe().c_str());
        check_case(c, stream.get());
      }
      ++n;
    }
  }
  // The other ranks the fused loop runs.
  for (const int markov_rank : {16, 32, 128, 1024}) {
    for (const int rows : {1, 5, 40}) {
      LoopCase c;
      c.vocab = 1000;
      c.markov_rank = markov_rank;
      c.rows = rows;
      c.steps = rows == 40 ? 2 : 4;
      c.nan = true;
      c.ties = true;
      c.padding = true;
      c.tp_size = rows == 5 ? 4 : 0;
      c.seed = 500 + n;
      if (!sweep_sample_skips(n)) {
        std::printf("[markov] %s\n", c.describe().c_str());
        check_case(c, stream.get());
      }
      ++n;
    }
  }
  std::printf("[markov] fused vs eager, V 1000: %d cases\n", n);
}

TEST(MarkovFused, MatchesEagerLargeVocab) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  struct Shape {
    int vocab, markov_rank, rows, steps, transform, tp_size;
  };
  // A sample of the large combinations (not the cross product).
  const Shape shapes[] = {
      {32000, 64, 1, 16, 0, 2},   {32000, 256, 6, 7, 2, 4},  {32000, 512, 24, 3, 1, 8},
      {32000, 256, 64, 2, 3, 0},  {151936, 256, 1, 7, 0, 8}, {151936, 256, 8, 7, 0, 2},
      {151936, 256, 32, 7, 0, 0}, {151936, 64, 17, 3, 2, 4}, {151936, 512, 3, 5, 0, 0},
      {202048, 512, 1, 7, 3, 4},  {202048, 512, 8, 7, 3, 0}, {202048, 256, 64, 2, 0, 8},
      {202048, 64, 2, 16, 1, 0},
  };
  int n = 0;
  for (const Shape& sh : shapes) {
    LoopCase c;
    c.vocab = sh.vocab;
    c.markov_rank = sh.markov_rank;
    c.rows = sh.rows;
    c.steps = sh.steps;
    c.transform = sh.transform;
    c.tp_size = sh.tp_size;
    c.nan = sh.rows > 1;
    c.ties = true;
    c.padding = sh.rows >= 4;
    c.temps = n % 3 == 0 ? std::vector<float>{1.0f} : std::vector<float>{0.0f, 0.7f, 1.0f};
    c.variants = n < 2;
    c.seed = 900 + n;
    if (!sweep_sample_skips(n)) {
      std::printf("[markov] %s\n", c.describe().c_str());
      check_case(c, stream.get());
    }
    ++n;
  }
  std::printf("[markov] fused vs eager, large V: %d cases\n", n);
}

// The loops captured in a CUDA graph (PDL edges included) and replayed on new inputs.
TEST(MarkovFused, GraphReplayMatchesEager) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  const cudaStream_t s = stream.get();
  LoopCase c;
  c.vocab = 32000;
  c.markov_rank = 256;
  c.rows = 5;
  c.steps = 7;
  c.padding = true;
  c.seed = 4242;
  SCOPED_TRACE(c.describe());
  LoopInputs in = make_inputs(c, s);
  const size_t cache_len = static_cast<size_t>(c.cache_slots()) * c.steps * c.vocab;
  DeviceBuffer<int64_t> tok_f(static_cast<size_t>(c.rows) * c.steps), tok_e(tok_f.size());
  DeviceBuffer<bf16> cache_f(std::vector<bf16>(cache_len, bf16{kUntouched}), s);
  DeviceBuffer<bf16> cache_e(std::vector<bf16>(cache_len, bf16{kUntouched}), s);
  cuda::MarkovWorkspace ws(c.rows, c.steps, c.vocab, c.markov_rank, 1);
  const cuda::MarkovBatch fb = batch_of(c, in, tok_f.data(), cache_f.data());
  const cuda::MarkovBatch eb = batch_of(c, in, tok_e.data(), cache_e.data());
  cuda::fused_markov_loop(in.head, fb, ws, s);  // warm up every kernel before capture
  cuda::eager_markov_loop(in.head, eb, ws, s);
  SD_CUDA_CHECK(cudaStreamSynchronize(s));
  const cuda::GraphExec graph(s, [&](cudaStream_t st) {
    cuda::fused_markov_loop(in.head, fb, ws, st);
    cuda::eager_markov_loop(in.head, eb, ws, st);
  });
  for (int replay = 0; replay < 3; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay));
    cuda::fill_uniform_bf16(in.base.data(), in.base.size(), 7000 + replay, -8.0f, 8.0f, s);
    graph.launch(s);
    SD_CUDA_CHECK(cudaStreamSynchronize(s));
    const LoopOutputs f{tok_f.download(s), cache_f.download(s)};
    const LoopOutputs e{tok_e.download(s), cache_e.download(s)};
    EXPECT_TRUE(same_outputs(c, f, e, false));
  }
}

// A draft the fused plan refuses runs eager through MarkovLoop (and says why).
TEST(MarkovFused, LoopFallsBackToEager) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  LoopCase c;
  c.vocab = 1000;
  c.markov_rank = 48;
  c.rows = 3;
  c.steps = 4;
  c.seed = 77;
  SCOPED_TRACE(c.describe());
  LoopInputs in = make_inputs(c, stream.get());
  cuda::MarkovLoop loop(in.head, c.rows, c.steps);
  EXPECT_FALSE(loop.fused());
  EXPECT_NE(loop.refusal().find("rank 48"), std::string::npos) << loop.refusal();
  const size_t cache_len = static_cast<size_t>(c.cache_slots()) * c.steps * c.vocab;
  DeviceBuffer<int64_t> tokens(static_cast<size_t>(c.rows) * c.steps);
  DeviceBuffer<bf16> cache(std::vector<bf16>(cache_len, bf16{kUntouched}), stream.get());
  loop.run(batch_of(c, in, tokens.data(), cache.data()), stream.get());
  const LoopOutputs found{tokens.download(stream.get()), cache.download(stream.get())};
  const LoopOutputs eager = run_loop(c, in, RunOptions{LoopKind::eager}, stream.get());
  EXPECT_TRUE(same_outputs(c, found, eager, false));
  EXPECT_THROW(run_loop(c, in, RunOptions{LoopKind::fused}, stream.get()), InvalidArgument);

  c.markov_rank = 64;
  LoopInputs in64 = make_inputs(c, stream.get());
  cuda::MarkovLoop fused_loop(in64.head, c.rows, c.steps);
  EXPECT_TRUE(fused_loop.fused()) << fused_loop.refusal();
}

// ---- the fused loop against the CPU ops composed into the loop ------------------------------

LoopOutputs cpu_loop(const LoopCase& c, const LoopInputs& in, cudaStream_t s) {
  const std::vector<bf16> w1 = in.w1.download(s), w2 = in.w2.download(s),
                          base = in.base.download(s);
  const std::vector<int64_t> anchors = in.anchors.download(s), positions = in.positions.download(s),
                             seeds = in.seeds.download(s);
  const std::vector<float> temps = in.temps.download(s);
  const int64_t v = c.vocab, k = c.markov_rank, n = c.steps;
  LoopOutputs out{
      std::vector<int64_t>(static_cast<size_t>(c.rows * n)),
      std::vector<bf16>(static_cast<size_t>(c.cache_slots() * n * v), bf16{kUntouched})};
  std::vector<bf16> e(static_cast<size_t>(c.rows * k)), bias(static_cast<size_t>(c.rows * v)),
      l(static_cast<size_t>(v));
  for (int j = 0; j < c.steps; ++j) {
    for (int r = 0; r < c.rows; ++r) {
      const int64_t prev = j == 0 ? anchors[r] : out.tokens[static_cast<size_t>(r * n + j - 1)];
      std::copy_n(w1.data() + prev * k, k, e.data() + r * k);
    }
    cpu::markov_bias(e.data(), c.rows, w2.data(), c.vocab, c.markov_rank, bias.data(), 8);
    for (int r = 0; r < c.rows; ++r) {
      cpu::step_logits(base.data() + (r * n + j) * v, bias.data() + r * v, c.vocab,
                       in.head.transform, l.data());
      if (in.h_slots[r] >= 0)
        std::copy_n(l.data(), v, out.cache.data() + (in.h_slots[r] * n + j) * v);
      const uint32_t gs = draft_step_seed(seeds[r], positions[r], j);
      out.tokens[static_cast<size_t>(r * n + j)] =
          cpu::sample_row(l.data(), c.vocab, 0, temps[r], gs).id;
    }
  }
  return out;
}

TEST(MarkovFused, MatchesCpuLoop) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  struct Shape {
    int vocab, markov_rank, rows, steps, transform;
  };
  const Shape shapes[] = {
      {1000, 64, 5, 6, 2},
      {32000, 256, 4, 7, 0},
      {151936, 256, 2, 3, 1},
      {202048, 512, 1, 2, 3},
  };
  int n = 0;
  for (const Shape& sh : shapes) {
    LoopCase c;
    c.vocab = sh.vocab;
    c.markov_rank = sh.markov_rank;
    c.rows = sh.rows;
    c.steps = sh.steps;
    c.transform = sh.transform;
    c.nan = sh.rows > 1;
    c.ties = true;
    c.padding = sh.rows >= 4;
    c.bad_weights = n % 2 == 0;  // +-inf and NaN in w2: the twin's rules in the whole loop
    c.seed = 3000 + n;
    SCOPED_TRACE(c.describe());
    std::printf("[markov] CPU loop: %s\n", c.describe().c_str());
    LoopInputs in = make_inputs(c, stream.get());
    const LoopOutputs fused = run_loop(c, in, RunOptions{LoopKind::fused}, stream.get());
    const LoopOutputs want = cpu_loop(c, in, stream.get());
    EXPECT_TRUE(same_outputs(c, fused, want, true)) << "fused GPU loop vs CPU loop";
    EXPECT_TRUE(forced_picks(c, in, want)) << "CPU loop";
    ++n;
  }
}

// The slot cut of the fused epilogue (epilogue.cuh slot_below: slots whose best bound
// is below the row's bound draw no noise) on logits where it cuts: the trained
// profile, one entry far above the rest (every other slot cut), the cut's edge
// (entries within a few ulps of the row's bound, ties of the top), NaN rows and
// padding, at T 0.05, 1 and 2 (and 0); fused == eager == CPU, bit for bit. The mixed
// slots (profile 4, T 1, 0.5, 0, 1, 2 over the rows) give warps with every mix of cut and
// drawing slots, at 8 entries a slot (16 rows and more: a warp spans 2 or 4 rows, a T 0 row among
// them; 33 rows: a pass with inactive lanes), 4, 2 and 1, with padding rows; the near entries are
// dense, so a u drawn for the wrong entry would change tokens.
TEST(MarkovFused, SlotCutMatchesEagerAndCpu) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  struct Shape {
    int vocab, markov_rank, rows, steps, logits;
    bool zero_w2;
  };
  // From the 12th on: mixed slots at 8 entries a slot (16, 20 and 33 rows), 4, 2 and 1,
  // then the trained profile and the cut's edge at 8.
  const Shape shapes[] = {
      {1000, 64, 5, 6, 1, false},    {1000, 256, 9, 4, 2, false},    {1000, 64, 7, 5, 3, true},
      {32000, 256, 4, 7, 1, false},  {32000, 64, 33, 3, 2, false},   {32000, 256, 8, 3, 3, true},
      {151936, 256, 1, 7, 1, false}, {151936, 256, 8, 4, 1, false},  {151936, 256, 32, 2, 2, true},
      {202048, 512, 1, 3, 1, false}, {202048, 512, 8, 2, 3, true},   {32000, 256, 16, 3, 4, false},
      {32000, 64, 33, 2, 4, false},  {151936, 512, 20, 2, 4, false}, {4096, 128, 6, 4, 4, false},
      {32000, 256, 3, 5, 4, false},  {32000, 256, 2, 4, 4, true},    {32000, 64, 1, 6, 4, false},
      {32000, 256, 16, 3, 1, false}, {32000, 128, 17, 2, 3, true},
  };
  int n = 0;
  for (const Shape& sh : shapes) {
    LoopCase c;
    c.vocab = sh.vocab;
    c.markov_rank = sh.markov_rank;
    c.rows = sh.rows;
    c.steps = sh.steps;
    c.logits = sh.logits;
    c.zero_w2 = sh.zero_w2;
    c.transform = sh.zero_w2 || sh.logits == 4 ? 0 : n % 4;
    c.temps = sh.logits == 4 ? std::vector<float>{1.0f, 0.5f, 0.0f, 1.0f, 2.0f}
              : n % 2 == 0   ? std::vector<float>{0.05f, 1.0f, 2.0f}
                             : std::vector<float>{1.0f, 0.05f, 0.0f, 2.0f};
    c.nan = sh.rows > 1;
    c.padding = sh.rows >= 4;
    c.variants = n < 3;
    c.tp_size = n % 3 == 1 && sh.vocab % 4 == 0 ? 4 : 0;
    c.seed = 7000 + n;
    if (!sweep_sample_skips(n)) {
      std::printf("[markov] slot cut: %s\n", c.describe().c_str());
      check_case(c, stream.get());
      if (sh.vocab <= 32000 || sh.rows == 1) {
        SCOPED_TRACE(c.describe());
        LoopInputs in = make_inputs(c, stream.get());
        const LoopOutputs fused = run_loop(c, in, RunOptions{LoopKind::fused}, stream.get());
        const LoopOutputs want = cpu_loop(c, in, stream.get());
        EXPECT_TRUE(same_outputs(c, fused, want, true)) << "fused GPU loop vs CPU loop";
      }
    }
    ++n;
  }
  std::printf("[markov] slot cut: %d cases\n", n);
}

// A reduced draft vocabulary (contract.md section 11) on the eager loop: Vd draft ids,
// each stored and scored as its target id (a shuffled, non-monotonic map), the cache rows
// -inf outside the map, (-inf, fill) in each row's fold. Against the CPU loop
// (markov_loop_from_base), bit for bit on tokens and the V-wide cache, with: an all -inf
// step (the fold's lowest id: fill when it is below every mapped id), NaN logits (the
// lowest target id of the NaNs), exact ties at T 0 between two draft ids whose target ids
// are in the other order (the lower target id), a padding row, odd V and Vd. MarkovLoop
// refuses the fused loop for it and runs the eager one.
TEST(MarkovEager, ReducedVocabularyMatchesCpuLoop) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  const cudaStream_t s = stream.get();
  struct Shape {
    int vocab, draft_vocab, markov_rank, rows, steps, transform;
    bool map_has_zero;
  };
  const Shape shapes[] = {{1000, 612, 64, 5, 4, 0, false},
                          {4099, 3001, 32, 4, 3, 2, true},
                          {32000, 2051, 64, 3, 2, 1, false}};
  int n_case = 0;
  for (const Shape& sh : shapes) {
    const uint64_t seed = 7100 + n_case++;
    const int V = sh.vocab, Vd = sh.draft_vocab, K = sh.markov_rank, R = sh.rows, N = sh.steps;
    const int slots = R + 2;
    SCOPED_TRACE("V " + std::to_string(V) + " Vd " + std::to_string(Vd) + " rank " +
                 std::to_string(K) + " rows " + std::to_string(R) + " N " + std::to_string(N) +
                 " transform " + std::to_string(sh.transform) + " seed " + std::to_string(seed));
    std::printf("[markov] reduced vocabulary: V %d Vd %d rank %d rows %d N %d seed %llu\n", V, Vd,
                K, R, N, static_cast<unsigned long long>(seed));
    Gen gen(seed);
    std::mt19937_64 shuffle_rng(seed);
    // The map: Vd distinct target ids, shuffled (not monotonic); id 0 only when asked.
    std::vector<int32_t> all(static_cast<size_t>(V));
    for (int i = 0; i < V; ++i) all[static_cast<size_t>(i)] = i;
    std::shuffle(all.begin() + 1, all.end(), shuffle_rng);
    std::vector<int32_t> ids(all.begin() + (sh.map_has_zero ? 0 : 1),
                             all.begin() + (sh.map_has_zero ? 0 : 1) + Vd);
    std::shuffle(ids.begin(), ids.end(), shuffle_rng);
    const int32_t fill = draft_fill_id(ids, V);
    ASSERT_GE(fill, 0);
    std::vector<bf16> w1 = gen.bf16s(static_cast<size_t>(V) * K, -0.5f, 0.5f);
    std::vector<bf16> w2 = gen.bf16s(static_cast<size_t>(Vd) * K, -0.5f, 0.5f);
    std::vector<bf16> base = gen.bf16s(static_cast<size_t>(R) * N * Vd, -8.0f, 8.0f);
    // Two draft ids tied at T 0 (equal w2 rows and base logits), the lower draft id
    // holding the higher target id.
    const int tie_a = 0, tie_b = 1;
    if (ids[tie_a] < ids[tie_b]) std::swap(ids[tie_a], ids[tie_b]);
    std::copy_n(w2.data() + tie_a * K, K, w2.data() + tie_b * K);
    std::vector<int64_t> anchors(R), positions(R), seeds(R), slots_of(R);
    std::vector<int64_t> slot_perm(static_cast<size_t>(slots));  // distinct slots
    for (int i = 0; i < slots; ++i) slot_perm[static_cast<size_t>(i)] = i;
    std::shuffle(slot_perm.begin(), slot_perm.end(), shuffle_rng);
    std::vector<float> temps(R);
    const float tcycle[] = {0.0f, 0.7f, 1.0f, 1e-3f};
    for (int r = 0; r < R; ++r) {
      anchors[r] = gen.integer(0, V - 1);
      positions[r] = gen.integer(0, int64_t{1} << 30);
      seeds[r] = gen.integer(INT64_MIN / 2, INT64_MAX / 2);
      temps[r] = tcycle[r % 4];
      slots_of[r] = r == R - 1 ? -1 : slot_perm[static_cast<size_t>(r)];  // the last row pads
    }
    auto at = [&](int r, int j, int d) -> bf16& {
      return base[(static_cast<size_t>(r) * N + j) * Vd + d];
    };
    for (int j = 0; j < N; j += 2)  // row 0 (T 0): the tie on even steps
      at(0, j, tie_a) = at(0, j, tie_b) = to_bf16(60.0f);
    if (N > 1)  // row 1: two NaNs at step 1
      at(1, 1, Vd - 1) = bf16{0x7fc0}, at(1, 1, Vd / 2) = bf16{0xffc1};
    if (sh.transform != 2)  // row 2 at the last step: every logit -inf (a cap would make it finite)
      for (int d = 0; d < Vd; ++d) at(2, N - 1, d) = bf16{0xff80};
    const ops::LogitTransform transform = transform_of(sh.transform);

    // CPU.
    ModelConfig c;
    c.vocab_size = V;
    c.draft_vocab_size = Vd;
    c.block_size = N;
    c.markov_rank = K;
    DraftWeights w;
    w.markov_w1 = w1.data();
    w.markov_w2 = w2.data();
    w.draft_ids = ids.data();
    w.draft_fill = fill;
    const ops::MarkovRows host_rows{
        R, anchors.data(), positions.data(), seeds.data(), temps.data(), slots_of.data()};
    std::vector<int64_t> want_tokens(static_cast<size_t>(R) * N, -7);
    std::vector<bf16> want_cache(static_cast<size_t>(slots) * N * V, bf16{kUntouched});
    const MarkovInputs in{&c, &w, &transform, &host_rows, slots, 2};
    markov_loop_from_base(in, 1, base.data(),
                          ProposeOutputs{want_tokens.data(), want_cache.data()});

    // GPU.
    DeviceBuffer<bf16> d_w1(w1, s), d_w2(w2, s), d_base(base, s);
    DeviceBuffer<int32_t> d_ids(ids, s);
    const test::DeviceMarkovRows d_rows(host_rows, s);
    cuda::MarkovHead head;
    head.w1 = d_w1.data();
    head.w2 = d_w2.data();
    head.vocab = V;
    head.markov_rank = K;
    head.transform = transform;
    head.draft_vocab = Vd;
    head.draft_ids = d_ids.data();
    head.fill = fill;
    cuda::MarkovLoop loop(head, R, N);
    EXPECT_FALSE(loop.fused());
    EXPECT_NE(loop.refusal().find("reduced draft vocabulary"), std::string::npos) << loop.refusal();
    DeviceBuffer<int64_t> d_tokens(static_cast<size_t>(R) * N);
    DeviceBuffer<bf16> d_cache(std::vector<bf16>(want_cache.size(), bf16{kUntouched}), s);
    d_tokens.zero(s);
    cuda::MarkovBatch b;
    b.rows = d_rows.view();
    b.steps = N;
    b.base_logits = d_base.data();
    b.draft_tokens = d_tokens.data();
    b.cache = d_cache.data();
    loop.run(b, s);
    SD_CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<int64_t> tokens = d_tokens.download(s);
    const std::vector<bf16> cache = d_cache.download(s);
    EXPECT_TRUE(test::same_bits(tokens, want_tokens, {N}))
        << "tokens (row = request row, col = step)";
    test::BitsOptions o{V, false};
    o.note = [&](size_t i) {
      return "= cache[slot " + std::to_string(i / V / N) + "][step " + std::to_string(i / V % N) +
             "][target id " + std::to_string(i % V) + "]";
    };
    EXPECT_TRUE(test::same_bits(cache, want_cache, o)) << "cache";
    // The contract's picks, on the CPU's tokens (the GPU's equal them).
    auto token = [&](int r, int j) { return want_tokens[static_cast<size_t>(r) * N + j]; };
    for (int j = 0; j < N; j += 2)
      EXPECT_EQ(token(0, j), ids[tie_b]) << "step " << j << ": the tie's lower target id";
    if (N > 1) EXPECT_EQ(token(1, 1), std::min(ids[Vd - 1], ids[Vd / 2])) << "the lowest NaN id";
    if (sh.transform != 2)
      EXPECT_EQ(token(2, N - 1), std::min<int64_t>(fill, *std::min_element(ids.begin(), ids.end())))
          << "an all -inf step: the lowest id of the fold, fill included";
    for (int r = 0; r < R; ++r)
      for (int j = 0; j < N; ++j)
        EXPECT_TRUE(std::find(ids.begin(), ids.end(), token(r, j)) != ids.end() ||
                    token(r, j) == fill)
            << "row " << r << " step " << j << ": token " << token(r, j);
  }
}

// The top-k Markov loop (contract.md section 12) on the eager GPU loop against the CPU loop
// (runtime/markov_loop.cpp), bit for bit: tokens and every cache row (-inf off the
// candidates). First the candidate kernel against core/topk.h's list (as a set of ids, the
// kernel writes them in id order). Odd V, k = 1, k = V, a long tie across the k boundary
// (equal w2 rows), NaNs, an all -inf step, the transforms, a padding row, shuffled slots; the
// fused loop refuses it (the plan's reason).
TEST(MarkovEager, TopkLoopMatchesCpuLoop) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  const cudaStream_t s = stream.get();
  struct Shape {
    int vocab, k, markov_rank, rows, steps, transform, m;  // m > 0: the union form (12.5)
  };
  const Shape shapes[] = {{1000, 7, 64, 5, 4, 0, 0},      {4099, 1, 32, 4, 3, 2, 0},
                          {2053, 2053, 16, 3, 2, 1, 0},   {32000, 300, 64, 3, 2, 0, 0},
                          {151936, 64, 256, 2, 3, 0, 0},  {517, 100, 128, 6, 7, 2, 0},
                          {1000, 7, 64, 5, 4, 1, 5},      {4099, 1, 32, 4, 3, 0, 300},
                          {151936, 16, 256, 3, 4, 0, 16}, {517, 3, 128, 6, 7, 2, 517}};
  int n_case = 0;
  for (const Shape& sh : shapes) {
    const uint64_t seed = 7300 + n_case++;
    const int V = sh.vocab, k = sh.k, K = sh.markov_rank, R = sh.rows, N = sh.steps;
    const int slots = R + 2;
    SCOPED_TRACE("V " + std::to_string(V) + " k " + std::to_string(k) + " m " +
                 std::to_string(sh.m) + " rank " + std::to_string(K) + " rows " +
                 std::to_string(R) + " N " + std::to_string(N) + " transform " +
                 std::to_string(sh.transform) + " seed " + std::to_string(seed));
    std::printf("[markov] top-k loop: V %d k %d m %d rank %d rows %d N %d seed %llu\n", V, k, sh.m,
                K, R, N, static_cast<unsigned long long>(seed));
    Gen gen(seed);
    std::mt19937_64 shuffle_rng(seed);
    std::vector<bf16> w1 = gen.bf16s(static_cast<size_t>(V) * K, -0.5f, 0.5f);
    std::vector<bf16> w2 = gen.bf16s(static_cast<size_t>(V) * K, -0.5f, 0.5f);
    std::vector<bf16> base = gen.bf16s(static_cast<size_t>(R) * N * V, -8.0f, 8.0f);
    auto at = [&](int r, int j, int v) -> bf16& {
      return base[(static_cast<size_t>(r) * N + j) * V + v];
    };
    // Row 0: every third id ties at 60 (more of them than k when k < V / 3), equal w2 rows.
    for (int j = 0; j < N; ++j)
      for (int v = 2; v < V; v += 3) at(0, j, v) = to_bf16(60.0f);
    for (int v = 5; v < V; v += 3) std::copy_n(w2.data() + 2 * K, K, w2.data() + v * K);
    if (N > 1 && R > 1)  // row 1: two NaNs at step 1, and +0 / -0 ties
      at(1, 1, V - 1) = bf16{0x7fc0}, at(1, 1, V / 2) = bf16{0xffc1}, at(1, 0, 3) = bf16{0x8000},
                   at(1, 0, 4) = bf16{0x0000};
    if (R > 2 && sh.transform != 2)  // row 2, last step: every base logit -inf
      for (int v = 0; v < V; ++v) at(2, N - 1, v) = bf16{0xff80};
    const ops::LogitTransform transform = transform_of(sh.transform);
    std::vector<int64_t> anchors(R), positions(R), seeds(R), slots_of(R);
    std::vector<int64_t> slot_perm(static_cast<size_t>(slots));
    for (int i = 0; i < slots; ++i) slot_perm[static_cast<size_t>(i)] = i;
    std::shuffle(slot_perm.begin(), slot_perm.end(), shuffle_rng);
    std::vector<float> temps(R);
    const float tcycle[] = {0.0f, 0.7f, 1.0f, 1e-3f};
    for (int r = 0; r < R; ++r) {
      anchors[r] = gen.integer(0, V - 1);
      positions[r] = gen.integer(0, int64_t{1} << 30);
      seeds[r] = gen.integer(INT64_MIN / 2, INT64_MAX / 2);
      temps[r] = tcycle[r % 4];
      slots_of[r] = r == R - 1 && R > 2 ? -1 : slot_perm[static_cast<size_t>(r)];
    }

    // The candidate kernel: each position's set of ids equals core/topk.h's list.
    DeviceBuffer<bf16> d_w1(w1, s), d_w2(w2, s), d_base(base, s);
    {
      DeviceBuffer<int32_t> d_cand(static_cast<size_t>(R) * N * k);
      cuda::TopkScratch scratch(R * N, V);
      cuda::markov_topk_candidates(d_base.data(), R * N, V, k, d_cand.data(), scratch, s);
      // Twice: the scratch is zero again after a call (the second call's ids are checked).
      cuda::markov_topk_candidates(d_base.data(), R * N, V, k, d_cand.data(), scratch, s);
      const std::vector<int32_t> got = d_cand.download(s);
      std::vector<TopkEntry> list(static_cast<size_t>(k));
      for (int p = 0; p < R * N; ++p) {
        ASSERT_EQ(topk_of_row(base.data() + static_cast<size_t>(p) * V, V, 0, k, list.data()), k);
        std::vector<int32_t> want(static_cast<size_t>(k));
        for (int i = 0; i < k; ++i) want[static_cast<size_t>(i)] = list[static_cast<size_t>(i)].id;
        std::sort(want.begin(), want.end());
        const std::vector<int32_t> have(got.begin() + static_cast<int64_t>(p) * k,
                                        got.begin() + static_cast<int64_t>(p + 1) * k);
        ASSERT_EQ(have, want) << "candidates of position " << p;
      }
    }

    // CPU.
    ModelConfig c;
    c.vocab_size = V;
    c.block_size = N;
    c.markov_rank = K;
    c.markov_topk = k;
    c.markov_bias_topk = sh.m;
    DraftWeights w;
    w.markov_w1 = w1.data();
    w.markov_w2 = w2.data();
    const ops::MarkovRows host_rows{
        R, anchors.data(), positions.data(), seeds.data(), temps.data(), slots_of.data()};
    std::vector<int64_t> want_tokens(static_cast<size_t>(R) * N, -7);
    std::vector<bf16> want_cache(static_cast<size_t>(slots) * N * V, bf16{kUntouched});
    const MarkovInputs in{&c, &w, &transform, &host_rows, slots, 2};
    markov_loop_from_base(in, 1, base.data(),
                          ProposeOutputs{want_tokens.data(), want_cache.data()});

    // GPU.
    const test::DeviceMarkovRows d_rows(host_rows, s);
    cuda::MarkovHead head;
    head.w1 = d_w1.data();
    head.w2 = d_w2.data();
    head.vocab = V;
    head.markov_rank = K;
    head.transform = transform;
    head.topk = k;
    head.bias_topk = sh.m;
    cuda::MarkovLoop loop(head, R, N);
    EXPECT_FALSE(loop.fused());
    EXPECT_NE(loop.refusal().find("top-k Markov loop"), std::string::npos) << loop.refusal();
    DeviceBuffer<int64_t> d_tokens(static_cast<size_t>(R) * N);
    DeviceBuffer<bf16> d_cache(std::vector<bf16>(want_cache.size(), bf16{kUntouched}), s);
    d_tokens.zero(s);
    cuda::MarkovBatch b;
    b.rows = d_rows.view();
    b.steps = N;
    b.base_logits = d_base.data();
    b.draft_tokens = d_tokens.data();
    b.cache = d_cache.data();
    loop.run(b, s);
    SD_CUDA_CHECK(cudaStreamSynchronize(s));
    const std::vector<int64_t> tokens = d_tokens.download(s);
    const std::vector<bf16> cache = d_cache.download(s);
    std::vector<int64_t> tokens_cmp = tokens, want_cmp = want_tokens;
    for (int r = 0; r < R; ++r)  // a padding row's tokens are don't-care
      if (slots_of[r] < 0)
        for (int j = 0; j < N; ++j)
          tokens_cmp[static_cast<size_t>(r) * N + j] = want_cmp[static_cast<size_t>(r) * N + j] = 0;
    EXPECT_TRUE(test::same_bits(tokens_cmp, want_cmp, {N}))
        << "tokens (row = request row, col = step)";
    test::BitsOptions o{V, false};
    o.note = [&](size_t i) {
      return "= cache[slot " + std::to_string(i / V / N) + "][step " + std::to_string(i / V % N) +
             "][id " + std::to_string(i % V) + "]";
    };
    EXPECT_TRUE(test::same_bits(cache, want_cache, o)) << "cache";
    // The contract's picks, on the CPU's tokens (the GPU's equal them).
    auto token = [&](int r, int j) { return want_tokens[static_cast<size_t>(r) * N + j]; };
    for (int j = 0; j < N; ++j)
      if (temps[0] == 0.0f) EXPECT_EQ(token(0, j), 2) << "step " << j << ": the lowest tied id";
    if (N > 1 && R > 1) EXPECT_EQ(token(1, 1), V / 2) << "the lowest NaN id";
    if (R > 2 && sh.transform != 2 && slots_of[2] >= 0)
      EXPECT_EQ(token(2, N - 1), 0) << "an all -inf step: the lowest id of the row";
  }
}

// `bench markov --topk K`: the top-k loop is checked against the CPU reference inside the bench
// (a difference throws) and timed beside the full loop, on both logit profiles.
TEST(BenchMarkov, TopkLoopCheckedAgainstCpuAndTimed) {
  SD_REQUIRE_GPU();
  for (const char* logits : {"uniform", "trained"}) {
    cuda::MarkovBenchOptions o;
    o.vocab = 4099;
    o.markov_rank = 64;
    o.steps = 5;
    o.rows = 3;
    o.repeats = 3;
    o.warmup = 1;
    o.temperature = 0.7f;
    o.logits = logits;
    o.topk = 9;
    std::printf("[markov] bench --topk %d: V %d rank %d rows %d logits %s seed %llu\n", o.topk,
                o.vocab, o.markov_rank, o.rows, logits, static_cast<unsigned long long>(o.seed));
    std::ostringstream log;
    const cuda::MarkovBenchResult r = cuda::bench_markov(o, log);
    EXPECT_GT(r.topk_us, 0.0);
    EXPECT_GT(r.topk_floor_us, 0.0);
    EXPECT_NEAR(r.topk_ratio, r.topk_us / r.topk_floor_us, 1e-9);
    EXPECT_NE(log.str().find("top-k 9:"), std::string::npos) << log.str();
    const nlohmann::json j = cuda::markov_bench_json(r);
    ASSERT_TRUE(j.contains("topk"));
    EXPECT_EQ(j["topk"]["k"], 9);
    EXPECT_EQ(j["topk"]["checked_against"], "cpu");
  }
  cuda::MarkovBenchOptions bad;
  bad.vocab = 100;
  bad.topk = 101;
  std::ostringstream log;
  EXPECT_THROW(cuda::bench_markov(bad, log), InvalidArgument);
}

}  // namespace
}  // namespace sparkdraft
