// Per-request lengths in propose (contract.md 9.5) on the CPU backend.
//
// The oracle is the section's prefix property: a row of length n drafts steps 0 .. n-1 bit for
// bit as a propose without lengths (tokens, cache rows, confidences), and past n its tokens are
// -1, its confidences +0 and its cache rows are not written. The scenario's odd rounds draft
// seeded lengths (ScenarioOptions::lengths) into one host cache that lives across rounds, so a
// cache row past the length must still hold what the previous round left there. Every tiny
// preset (dense, confidence head, reduced vocabulary, top-k and its union, gated and rnn heads,
// the fill-in layout), then TP 2 and 4 against TP 1 with lengths.
#include <gtest/gtest.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/bits.h"
#include "common/draft_run.h"
#include "common/files.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/error.h"
#include "sparkdraft/scenario.h"

namespace sparkdraft {
namespace {

std::shared_ptr<const Checkpoint> preset(const std::string& name, const std::string& style,
                                         const test::TempDir& dir) {
  SyntheticOptions so;
  so.seed = 11;
  write_synthetic_checkpoint(preset_config(name, style), dir.path(), so);
  return std::make_shared<const Checkpoint>(Checkpoint::load(dir.path()));
}

ScenarioOptions scenario(bool lengths) {
  ScenarioOptions s;
  s.request_ids = {0, 1, 2, 3, 4, 5};
  s.padding_before = {2};
  s.rounds = 2;  // round 0 the full block, round 1 the lengths
  s.seed = 1;    // round 1's lengths: 4 0 1 7 3 0 (0, N = 7 and between)
  s.lengths = lengths;
  return s;
}

struct Preset {
  const char* name;
  const char* style;
};
const Preset kPresets[] = {
    {"tiny", "qwen3"},       {"tiny", "muse"},       {"tiny-conf", "qwen3"},
    {"tiny-d2t", "qwen3"},   {"tiny-topk", "qwen3"}, {"tiny-topk-union", "qwen3"},
    {"tiny-gated", "qwen3"}, {"tiny-rnn", "qwen3"},  {"tiny-fillin", "qwen3"}};

TEST(ProposeLengths, EveryTinyPresetDraftsThePrefixOfTheFullBlock) {
  int zero = 0, full = 0, between = 0;
  for (const Preset& p : kPresets) {
    SCOPED_TRACE(std::string(p.name) + "/" + p.style);
    test::TempDir dir;
    auto ckpt = preset(p.name, p.style, dir);
    const int N = ckpt->config().block_size;
    const size_t V = ckpt->config().vocab_size;
    const test::DraftRun with = test::run(ckpt, scenario(true));
    const test::DraftRun without = test::run(ckpt, scenario(false));
    ASSERT_EQ(with.rounds.size(), 2u);
    // Round 0 runs the full block in both.
    for (size_t i = 0; i < with.rounds[0].drafts.size(); ++i) {
      const RequestDraft &a = with.rounds[0].drafts[i], &b = without.rounds[0].drafts[i];
      EXPECT_EQ(a.length, N);
      EXPECT_EQ(a.tokens, b.tokens) << "round 0 request " << a.request_id;
      EXPECT_TRUE(test::same_bits(a.logits, b.logits)) << "round 0 request " << a.request_id;
      EXPECT_TRUE(test::same_bits(a.confidences, b.confidences))
          << "round 0 request " << a.request_id;
    }
    for (size_t i = 0; i < with.rounds[1].drafts.size(); ++i) {
      const RequestDraft& d = with.rounds[1].drafts[i];
      const RequestDraft& full_d = without.rounds[1].drafts[i];
      const RequestDraft& before = with.rounds[0].drafts[i];
      const int n = d.length;
      ASSERT_GE(n, 0);
      ASSERT_LE(n, N);
      zero += n == 0;
      full += n == N;
      between += n > 0 && n < N;
      std::printf("%s/%s request %d: length %d\n", p.name, p.style, d.request_id, n);
      // The same request state in both runs: round 0 accepted the same k.
      ASSERT_EQ(d.anchor_position, full_d.anchor_position);
      ASSERT_EQ(d.anchor_token, full_d.anchor_token);
      for (int j = 0; j < N; ++j) {
        const std::string at = "request " + std::to_string(d.request_id) + " length " +
                               std::to_string(n) + " step " + std::to_string(j);
        const std::vector<bf16> row(d.logits.begin() + j * V, d.logits.begin() + (j + 1) * V);
        const std::vector<bf16> row_full(full_d.logits.begin() + j * V,
                                         full_d.logits.begin() + (j + 1) * V);
        const std::vector<bf16> row_before(before.logits.begin() + j * V,
                                           before.logits.begin() + (j + 1) * V);
        if (j < n) {
          EXPECT_EQ(d.tokens[j], full_d.tokens[j]) << at;
          EXPECT_TRUE(test::same_bits(row, row_full)) << at << ": cache row";
          if (!d.confidences.empty()) {
            EXPECT_TRUE(test::same_bits(std::vector<float>{d.confidences[j]},
                                        std::vector<float>{full_d.confidences[j]}))
                << at << ": confidence";
          }
        } else {
          EXPECT_EQ(d.tokens[j], -1) << at;
          EXPECT_TRUE(test::same_bits(row, row_before)) << at << ": a cache row past the length "
                                                        << "was written";
          if (!d.confidences.empty()) {
            EXPECT_TRUE(
                test::same_bits(std::vector<float>{d.confidences[j]}, std::vector<float>{0.0f}))
                << at << ": confidence past the length";
          }
        }
      }
    }
  }
  // The seeds give every kind of length somewhere (else the test proves less than it says).
  EXPECT_GT(zero, 0) << "no row of length 0";
  EXPECT_GT(full, 0) << "no row of length N";
  EXPECT_GT(between, 0) << "no row of a length in (0, N)";
}

// Thread ranks with lengths: every round (full and with lengths, so the later rounds start from
// states that the lengths shaped) equal TP 1's.
TEST(ProposeLengths, TpRanksEqualTp1) {
  for (const Preset& p : {Preset{"tiny", "qwen3"}, Preset{"tiny-conf", "qwen3"},
                          Preset{"tiny-topk-union", "qwen3"}, Preset{"tiny-rnn", "qwen3"}}) {
    test::TempDir dir;
    auto ckpt = preset(p.name, p.style, dir);
    ScenarioOptions s = scenario(true);
    s.rounds = 4;
    const test::DraftRun tp1 = test::run(ckpt, s, 1);
    for (int tp : {2, 4}) {
      SCOPED_TRACE(std::string(p.name) + " tp " + std::to_string(tp));
      const test::DraftRun tpn = test::run(ckpt, s, tp);
      for (int id : s.request_ids) test::expect_same_request(tpn, tp1, id, "tp");
    }
  }
}

TEST(ProposeLengths, RefusesALengthOutsideTheBlockAndIgnoresPaddingRows) {
  test::TempDir dir;
  auto ckpt = preset("tiny", "qwen3", dir);
  const ModelConfig& c = ckpt->config();
  DraftOptions o;
  o.max_reqs = 2;
  o.cache_slots = 2;
  const int64_t anchors[2] = {5, 0}, apos[2] = {3, 0}, seeds[2] = {1, 2}, slots[2] = {0, -1};
  const float temps[2] = {1.0f, 1.0f};
  std::vector<int32_t> tables(2 * o.max_pages_per_req, 0);
  for (const int32_t bad : {-1, c.block_size + 1, 1 << 30}) {
    const int32_t lengths[2] = {bad, 3};
    const ProposeBatch b{2, anchors, apos, seeds, temps, slots, tables.data(), lengths};
    try {
      validate_propose(c, o, b);
      ADD_FAILURE() << "length " << bad << " was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("row 0: length " + std::to_string(bad)),
                std::string::npos)
          << e.what();
    }
  }
  for (const int32_t good : {0, 1, c.block_size}) {
    const int32_t lengths[2] = {good, -99};  // row 1 is padding: its length is never read
    const ProposeBatch b{2, anchors, apos, seeds, temps, slots, tables.data(), lengths};
    EXPECT_NO_THROW(validate_propose(c, o, b)) << "length " << good;
  }
}

}  // namespace
}  // namespace sparkdraft
