// DraftBackend::verify on the CPU backend inside the multi-round scenario (draft,
// verify, continue from what was accepted and emitted): the same accepted counts
// and emitted tokens at TP 1, 2 and 4 (one vocabulary slice per rank, combined in
// the fixed tree), and for a request alone or inside a batch with padding rows.
#include <gtest/gtest.h>

#include <memory>

#include "common/files.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/scenario.h"

namespace sparkdraft {
namespace {

std::vector<ScenarioRound> verified_rounds(std::shared_ptr<const Checkpoint> ckpt,
                                           const ScenarioOptions& s, int tp) {
  DraftOptions o = scenario_draft_options(ckpt->config(), s);
  o.tp = tp;
  o.threads = 2;
  auto backend = make_cpu_backend(ckpt, o);
  return run_scenario(*backend, s);
}

void expect_same_verification(const std::vector<ScenarioRound>& a,
                              const std::vector<ScenarioRound>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t round = 0; round < a.size(); ++round) {
    for (const RequestDraft& da : a[round].drafts) {
      const RequestDraft* db = nullptr;
      for (const RequestDraft& d : b[round].drafts)
        if (d.request_id == da.request_id) db = &d;
      ASSERT_NE(db, nullptr) << what << ": request " << da.request_id << " round " << round;
      EXPECT_EQ(da.tokens, db->tokens)
          << what << ": request " << da.request_id << " round " << round;
      EXPECT_EQ(da.accepted, db->accepted)
          << what << ": request " << da.request_id << " round " << round;
      EXPECT_EQ(da.emitted, db->emitted)
          << what << ": request " << da.request_id << " round " << round;
    }
  }
}

TEST(VerifyBackend, TpRanksAndBatchCompositionGiveTheSameBits) {
  test::TempDir dir;
  SyntheticOptions so;
  so.seed = 5;
  write_synthetic_checkpoint(preset_config("tiny", "qwen3"), dir.path(), so);
  auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(dir.path()));
  ScenarioOptions s;
  s.request_ids = {0, 1, 2, 3, 4};
  s.rounds = 4;
  s.seed = 9;
  s.real_verifier = true;
  s.target_noise = 0.3f;
  const std::vector<ScenarioRound> tp1 = verified_rounds(ckpt, s, 1);
  int accepted = 0;
  for (const auto& r : tp1)
    for (const auto& d : r.drafts) accepted += d.accepted;
  EXPECT_GT(accepted, 0) << "no draft accepted: the test would not see the accept path";
  for (int tp : {2, 4})
    expect_same_verification(tp1, verified_rounds(ckpt, s, tp), "tp " + std::to_string(tp));
  ScenarioOptions alone = s;
  alone.request_ids = {3};
  expect_same_verification(verified_rounds(ckpt, alone, 1), tp1, "request 3 alone");
  ScenarioOptions padded = s;
  padded.padding_before = {0, 3};
  expect_same_verification(verified_rounds(ckpt, padded, 2), tp1, "with padding rows");
}

}  // namespace
}  // namespace sparkdraft
