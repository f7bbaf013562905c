// The confidence head's CPU reference (ops/confidence.h, contract.md section 9)
// against a naive re-statement of the contract, bit for bit: odd widths, with and
// without the Markov part, NaN / inf / saturating rows, padding rows, every thread
// count; which token feeds which step; the refusals of check().
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "common/bits.h"
#include "common/random.h"
#include "sparkdraft/core/confidence.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/cpu/confidence.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

using test::same_bits;

// The contract written out: 32 lanes, chunk c = i / 8 on lane c % 32, one fma per
// term from +0 in increasing i, the butterfly, + bias, our sigmoid.
float naive_confidence(const std::vector<float>& x, const std::vector<float>& w, float b,
                       float temperature = 0.0f) {
  const size_t n = x.size();
  float lane[32] = {};
  for (size_t i = 0; i < n; ++i) {
    const size_t l = (i / 8) % 32;
    lane[l] = std::fmaf(x[i], w[i], lane[l]);
  }
  for (int off = 16; off > 0; off /= 2)
    for (int l = 0; l < off; ++l) lane[l] = lane[l] + lane[l + off];
  const float z = lane[0] + b;
  return sigmoid_f32(temperature > 0.0f ? z / temperature : z);  // STS (9.1): one division
}

struct Case {
  int rows, steps, hidden, rank, vocab;
  std::vector<bf16> hidden_states, w1, weight;
  bf16 bias;
  std::vector<int64_t> anchors, tokens, slots;
  std::vector<float> temperatures;  // STS (contract.md 9.1); empty: uncalibrated

  ops::ConfidenceParams params(float* out) const {
    ops::ConfidenceParams p;
    p.rows = rows;
    p.steps = steps;
    p.hidden = hidden;
    p.rank = rank;
    p.hidden_states = hidden_states.data();
    p.anchor_tokens = anchors.data();
    p.draft_tokens = tokens.data();
    p.cache_slots = slots.data();
    p.w1 = rank > 0 ? w1.data() : nullptr;
    p.weight = weight.data();
    p.bias = &bias;
    p.out = out;
    if (!temperatures.empty()) {
      p.calibrated = true;
      for (int j = 0; j < steps; ++j) p.temperatures[j] = temperatures[static_cast<size_t>(j)];
    }
    return p;
  }

  std::vector<float> naive() const {
    std::vector<float> out(static_cast<size_t>(rows) * steps);
    for (int r = 0; r < rows; ++r)
      for (int j = 0; j < steps; ++j) {
        const size_t t = static_cast<size_t>(r) * steps + j;
        if (slots[r] < 0) {
          out[t] = 0.0f;
          continue;
        }
        const int64_t prev = j == 0 ? anchors[r] : tokens[t - 1];
        std::vector<float> x, w;
        for (int i = 0; i < hidden; ++i) x.push_back(to_f32(hidden_states[t * hidden + i]));
        for (int i = 0; i < rank; ++i) x.push_back(to_f32(w1[prev * rank + i]));
        for (int i = 0; i < hidden + rank; ++i) w.push_back(to_f32(weight[i]));
        out[t] = naive_confidence(
            x, w, to_f32(bias), temperatures.empty() ? 0.0f : temperatures[static_cast<size_t>(j)]);
      }
    return out;
  }
};

Case make_case(test::Gen& rng, int rows, int steps, int hidden, int rank, int vocab, float scale) {
  Case c{rows, steps, hidden, rank, vocab, {}, {}, {}, bf16{0}, {}, {}, {}, {}};
  c.hidden_states = rng.bf16s(static_cast<size_t>(rows) * steps * hidden, -scale, scale);
  c.w1 = rng.bf16s(static_cast<size_t>(vocab) * std::max(rank, 1), -scale, scale);
  c.weight = rng.bf16s(static_cast<size_t>(hidden + rank), -scale, scale);
  c.bias = to_bf16(rng.uniform(-1.0f, 1.0f));
  for (int r = 0; r < rows; ++r) {
    c.anchors.push_back(rng.integer(0, vocab - 1));
    c.slots.push_back(r);
    for (int j = 0; j < steps; ++j) c.tokens.push_back(rng.integer(0, vocab - 1));
  }
  return c;
}

TEST(CpuConfidence, MatchesTheContractBitForBit) {
  const uint64_t seed = 2501;
  test::Gen rng(seed);
  struct Shape {
    int rows, steps, hidden, rank;
  };
  // Odd widths: chunks that straddle h and e, fewer terms than lanes, many per lane.
  for (const Shape s : {Shape{1, 1, 1, 0}, Shape{3, 7, 37, 5}, Shape{2, 5, 64, 64},
                        Shape{4, 3, 300, 0}, Shape{1, 9, 513, 31}, Shape{5, 2, 8, 1}}) {
    SCOPED_TRACE("rows " + std::to_string(s.rows) + " steps " + std::to_string(s.steps) +
                 " hidden " + std::to_string(s.hidden) + " rank " + std::to_string(s.rank));
    for (float scale : {0.05f, 1.0f, 8.0f}) {  // moderate to saturating logits
      Case c = make_case(rng, s.rows, s.steps, s.hidden, s.rank, 50, scale);
      const std::vector<float> want = c.naive();
      for (int threads : {1, 2, 5}) {
        std::vector<float> got(want.size(), -7.0f);
        cpu::confidence(c.params(got.data()), threads);
        EXPECT_TRUE(same_bits(got, want, {s.steps})) << "scale " << scale << " threads " << threads;
      }
    }
  }
}

TEST(CpuConfidence, SpecialRowsAndPadding) {
  const uint64_t seed = 2502;
  test::Gen rng(seed);
  Case c = make_case(rng, 6, 4, 29, 7, 20, 1.0f);
  const float inf = std::numeric_limits<float>::infinity();
  auto row_of = [&](int r, int j) {
    return &c.hidden_states[(static_cast<size_t>(r) * 4 + j) * 29];
  };
  row_of(0, 1)[3] = to_bf16(std::numeric_limits<float>::quiet_NaN());  // NaN -> NaN
  row_of(1, 0)[0] = to_bf16(inf);                                      // +-inf * w
  for (int i = 0; i < 29; ++i) row_of(2, 2)[i] = bf16{0};              // e and bias only
  for (int i = 0; i < 29; ++i)
    row_of(3, 3)[i] = to_bf16(c.weight[i].bits & 0x8000 ? -300.0f : 300.0f);
  c.slots[4] = -1;       // padding: +0 everywhere, nothing read
  c.anchors[4] = -5;     // an id that would read outside w1
  c.tokens[4 * 4] = -9;  // likewise
  const std::vector<float> want = c.naive();
  std::vector<float> got(want.size(), -7.0f);
  cpu::confidence(c.params(got.data()), 3);
  EXPECT_TRUE(same_bits(got, want, {4, true}));
  EXPECT_TRUE(std::isnan(got[1]));
  EXPECT_EQ(got[3 * 4 + 3], 1.0f);  // z far above 40
  for (int j = 0; j < 4; ++j) {
    uint32_t bits;
    std::memcpy(&bits, &got[4 * 4 + j], 4);
    EXPECT_EQ(bits, 0u) << "padding row step " << j;
  }
  for (float v : got) {
    if (!std::isnan(v)) {
      EXPECT_TRUE(v >= 0.0f && v <= 1.0f) << v;
    }
  }
}

// Step j reads w1[prev]: the anchor at j = 0, the token of step j-1 after it; the
// last token feeds nothing. A head without the Markov part reads no token.
TEST(CpuConfidence, EachStepReadsItsPredecessor) {
  const uint64_t seed = 2503;
  test::Gen rng(seed);
  for (int rank : {0, 6}) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    Case c = make_case(rng, 2, 5, 16, rank, 30, 1.0f);
    std::vector<float> base(10), other(10);
    cpu::confidence(c.params(base.data()));
    // Row 1: the anchor (-1) feeds step 0, token k feeds step k + 1 (value 5 + k + 1).
    for (int changed = -1; changed < 4; ++changed) {
      Case d = c;
      int64_t& id = changed < 0 ? d.anchors[1] : d.tokens[static_cast<size_t>(5 + changed)];
      id = (id + 1) % 30;
      cpu::confidence(d.params(other.data()));
      const int reader = 5 + changed + 1;
      for (int t = 0; t < 10; ++t) {
        uint32_t a, b;
        std::memcpy(&a, &base[static_cast<size_t>(t)], 4);
        std::memcpy(&b, &other[static_cast<size_t>(t)], 4);
        if (rank > 0 && t == reader)
          EXPECT_NE(a, b) << "changing input " << changed << " did not move step " << t;
        else
          EXPECT_EQ(a, b) << "changing input " << changed << " moved value " << t;
      }
    }
    Case last = c;
    last.tokens[9] = (last.tokens[9] + 1) % 30;
    cpu::confidence(last.params(other.data()));
    EXPECT_TRUE(same_bits(other, base)) << "the last token fed a step";
  }
}

TEST(CpuConfidence, SurvivalProductsAndThreshold) {
  const float c[] = {0.9f, 0.5f, 1.0f, 0.25f, std::numeric_limits<float>::quiet_NaN(), 0.5f};
  float a[6];
  survival_products(c, 6, a);
  EXPECT_EQ(a[0], 0.9f);
  EXPECT_EQ(a[1], 0.9f * 0.5f);
  EXPECT_EQ(a[2], a[1]);
  EXPECT_EQ(a[3], a[1] * 0.25f);
  EXPECT_TRUE(std::isnan(a[4]) && std::isnan(a[5]));
  EXPECT_EQ(threshold_length(c, 6, 0.5f), 3);  // 0.25 cuts
  EXPECT_EQ(threshold_length(c, 6, 0.6f), 1);
  EXPECT_EQ(threshold_length(c, 6, 0.95f), 0);
  EXPECT_EQ(threshold_length(c, 6, 0.0f), 4);  // the NaN still cuts
  EXPECT_EQ(threshold_length(c, 4, 0.25f), 4);
}

// Per-position calibration (STS, 9.1): step j's value is sigmoid(z / T_j), one fp32 division;
// temperatures of 1 give the uncalibrated bits (z / 1 = z), other ones change every value
// that is not saturated or NaN.
TEST(CpuConfidence, CalibrationDividesByTheStepTemperature) {
  const uint64_t seed = 2505;
  test::Gen rng(seed);
  for (int rank : {0, 9}) {
    SCOPED_TRACE("rank " + std::to_string(rank) + " seed " + std::to_string(seed));
    Case c = make_case(rng, 4, 7, 41, rank, 30, 1.0f);
    c.hidden_states[5] = to_bf16(std::numeric_limits<float>::quiet_NaN());  // row 0, step 0
    const std::vector<float> plain = c.naive();
    c.temperatures = {0.5f, 1.0f, 1.5f, 3.0f, 0.7f, 1e-3f, 2.25f};
    const std::vector<float> want = c.naive();
    for (int threads : {1, 3}) {
      std::vector<float> got(want.size(), -7.0f);
      cpu::confidence(c.params(got.data()), threads);
      EXPECT_TRUE(same_bits(got, want, {7, true})) << "threads " << threads;
    }
    int moved = 0;
    for (size_t t = 0; t < want.size(); ++t) {
      if (t % 7 == 1 || std::isnan(want[t])) continue;  // T = 1, the NaN
      moved += f32_bits(want[t]) != f32_bits(plain[t]);
    }
    EXPECT_GT(moved, 20) << "the temperatures changed too few values";
    c.temperatures.assign(7, 1.0f);
    std::vector<float> ones(want.size(), -7.0f);
    cpu::confidence(c.params(ones.data()));
    EXPECT_TRUE(same_bits(ones, plain, {7, true})) << "T = 1 everywhere is the plain head";
  }
}

TEST(CpuConfidence, CheckRefusesBadParams) {
  const uint64_t seed = 2504;
  test::Gen rng(seed);
  Case c = make_case(rng, 1, 2, 8, 4, 10, 1.0f);
  std::vector<float> out(2);
  auto refused = [&](auto edit, const char* what) {
    ops::ConfidenceParams p = c.params(out.data());
    edit(p);
    EXPECT_THROW(cpu::confidence(p), InvalidArgument) << what;
  };
  refused([](ops::ConfidenceParams& p) { p.steps = 0; }, "steps 0");
  refused([](ops::ConfidenceParams& p) { p.hidden = 0; }, "hidden 0");
  refused([](ops::ConfidenceParams& p) { p.rank = -1; }, "rank -1");
  refused([](ops::ConfidenceParams& p) { p.w1 = nullptr; }, "no w1");
  refused([](ops::ConfidenceParams& p) { p.out = nullptr; }, "no out");
  refused([](ops::ConfidenceParams& p) { p.bias = nullptr; }, "no bias");
  for (const float t : {0.0f, -1.0f, std::numeric_limits<float>::infinity(),
                        std::numeric_limits<float>::quiet_NaN()})
    refused(
        [t](ops::ConfidenceParams& p) {
          p.calibrated = true;
          p.temperatures[0] = 1.0f;
          p.temperatures[1] = t;
        },
        "a temperature that is not finite and > 0");
  ops::ConfidenceParams none = c.params(nullptr);
  none.rows = 0;
  EXPECT_NO_THROW(cpu::confidence(none));
}

}  // namespace
}  // namespace sparkdraft
