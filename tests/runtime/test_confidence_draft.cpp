// The confidence head through the CPU backend (contract.md section 9): propose
// returns a value per drafted position beside the tokens, the same bits alone or in
// a batch with padding rows, at every TP size (layers and vocabulary sharded), and
// a config without the head refuses to be asked for them.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>

#include "common/bits.h"
#include "common/conf_checkpoint.h"
#include "common/files.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/error.h"
#include "sparkdraft/scenario.h"

namespace sparkdraft {
namespace {

using test::TempDir;

std::vector<ScenarioRound> run(std::shared_ptr<const Checkpoint> ckpt, const ScenarioOptions& s,
                               const DraftOptions& base, int tp, int threads) {
  DraftOptions o = base;
  o.tp = tp;
  o.threads = threads;
  auto backend = make_cpu_backend(ckpt, o);
  return run_scenario(*backend, s);
}

const RequestDraft& draft_of(const ScenarioRound& r, int id) {
  for (const RequestDraft& d : r.drafts)
    if (d.request_id == id) return d;
  throw std::runtime_error("no request " + std::to_string(id));
}

class ConfidenceDraft : public ::testing::TestWithParam<std::tuple<bool, std::string>> {};

TEST_P(ConfidenceDraft, SameBitsAloneInABatchAndAtEveryTpSize) {
  const auto [with_markov, style] = GetParam();
  TempDir dir;
  auto ckpt = test::conf_checkpoint(dir, style, with_markov);
  const int N = ckpt->config().block_size;
  ScenarioOptions batch;
  batch.request_ids = {0, 1, 2};
  batch.padding_before = {1, 3};
  const DraftOptions o = scenario_draft_options(ckpt->config(), batch);
  const std::vector<ScenarioRound> ref = run(ckpt, batch, o, 1, 2);
  // Real values: in [0, 1], one per position, not all equal.
  const RequestDraft& d0 = draft_of(ref[0], 0);
  ASSERT_EQ(d0.confidences.size(), static_cast<size_t>(N));
  bool varies = false;
  for (const RequestDraft& d : ref[0].drafts)
    for (float c : d.confidences) {
      EXPECT_TRUE(c >= 0.0f && c <= 1.0f) << c;
      varies |= c != d0.confidences[0];
    }
  EXPECT_TRUE(varies) << "every confidence is the same value";

  ScenarioOptions alone = batch;
  alone.request_ids = {2};
  alone.padding_before = {};
  const std::vector<ScenarioRound> one = run(ckpt, alone, o, 1, 1);
  for (size_t round = 0; round < ref.size(); ++round)
    EXPECT_TRUE(
        test::same_bits(draft_of(one[round], 2).confidences, draft_of(ref[round], 2).confidences))
        << "alone vs batch, round " << round;
  for (int tp : {2, 4}) {
    const std::vector<ScenarioRound> many = run(ckpt, batch, o, tp, 2);
    for (size_t round = 0; round < ref.size(); ++round)
      for (int id : batch.request_ids) {
        EXPECT_EQ(draft_of(many[round], id).tokens, draft_of(ref[round], id).tokens);
        EXPECT_TRUE(test::same_bits(draft_of(many[round], id).confidences,
                                    draft_of(ref[round], id).confidences))
            << "tp " << tp << " round " << round << " request " << id;
      }
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, ConfidenceDraft,
                         ::testing::Combine(::testing::Bool(),
                                            ::testing::Values(std::string("qwen3"), "muse")),
                         [](const auto& info) {
                           return std::string(std::get<0>(info.param) ? "markov_" : "plain_") +
                                  std::get<1>(info.param);
                         });

// Per-position calibration (STS, contract.md 9.1) changes the confidences only: the tokens are
// the uncalibrated draft's, temperatures of 1 give its bits, and T_j = 2 pulls every value
// towards 1/2 (sigmoid(z / 2) lies between 1/2 and sigmoid(z)), at TP 1 and 2.
TEST(ConfidenceDraft, CalibrationChangesOnlyTheConfidences) {
  ScenarioOptions batch;
  batch.request_ids = {0, 1, 2};
  batch.padding_before = {1};
  TempDir d0, d1, d2;
  auto plain = test::conf_checkpoint(d0, "qwen3", true);
  const int N = plain->config().block_size;
  auto ones = test::conf_checkpoint(d1, "qwen3", true, std::vector<float>(N, 1.0f));
  auto twos = test::conf_checkpoint(d2, "qwen3", true, std::vector<float>(N, 2.0f));
  const DraftOptions o = scenario_draft_options(plain->config(), batch);
  for (int tp : {1, 2}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    const std::vector<ScenarioRound> a = run(plain, batch, o, tp, 2),
                                     b = run(ones, batch, o, tp, 2), c = run(twos, batch, o, tp, 2);
    int pulled = 0;
    for (size_t round = 0; round < a.size(); ++round)
      for (int id : batch.request_ids) {
        const RequestDraft &pa = draft_of(a[round], id), &pb = draft_of(b[round], id),
                           &pc = draft_of(c[round], id);
        EXPECT_EQ(pa.tokens, pb.tokens);
        EXPECT_EQ(pa.tokens, pc.tokens);
        EXPECT_TRUE(test::same_bits(pb.confidences, pa.confidences)) << "T = 1, request " << id;
        for (int j = 0; j < N; ++j) {
          const float x = pa.confidences[j], y = pc.confidences[j];
          EXPECT_LE(std::fabs(y - 0.5f), std::fabs(x - 0.5f)) << "request " << id << " step " << j;
          EXPECT_EQ(y >= 0.5f, x >= 0.5f) << "request " << id << " step " << j;
          pulled += y != x;
        }
      }
    EXPECT_GT(pulled, 10) << "T = 2 changed too few confidences";
  }
}

TEST(ConfidenceDraft, ConfigWithoutTheHeadRefusesTheOutput) {
  TempDir dir;
  write_synthetic_checkpoint(preset_config("tiny"), dir.path(), SyntheticOptions{});
  auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(dir.path()));
  ScenarioOptions s;
  DraftOptions o = scenario_draft_options(ckpt->config(), s);
  o.threads = 1;
  auto backend = make_cpu_backend(ckpt, o);
  const int N = ckpt->config().block_size, V = ckpt->config().vocab_size;
  int64_t anchor = 5, apos = 20, seed = 1, slot = 0;
  float temp = 0.5f;
  std::vector<int32_t> table(static_cast<size_t>(o.max_pages_per_req));
  for (int p = 0; p < o.max_pages_per_req; ++p) table[static_cast<size_t>(p)] = p;
  std::vector<int64_t> tokens(static_cast<size_t>(N));
  std::vector<bf16> cache(static_cast<size_t>(o.cache_slots) * N * V);
  std::vector<float> conf(static_cast<size_t>(N));
  ProposeBatch b{1, &anchor, &apos, &seed, &temp, &slot, table.data()};
  EXPECT_NO_THROW(backend->propose(b, ProposeOutputs{tokens.data(), cache.data()}));
  try {
    backend->propose(b, ProposeOutputs{tokens.data(), cache.data(), conf.data()});
    ADD_FAILURE() << "no refusal";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("enable_confidence_head"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sparkdraft
