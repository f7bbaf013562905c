// A CPU draft run through the `check` scenario, recorded (every round's drafts and every
// layer's KV cache), and the comparison of one request's drafts between two runs. Shared by
// the CPU draft tests (runtime/test_draft.cpp, runtime/test_fill_in.cpp).
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "common/bits.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/scenario.h"

namespace sparkdraft::test {

struct DraftRun {
  std::vector<ScenarioRound> rounds;
  std::vector<std::vector<bf16>> kv;
};

// The scenario on the CPU backend at `tp` thread ranks with `threads` workers; options from
// `base`, else the scenario's own.
inline DraftRun run(std::shared_ptr<const Checkpoint> ckpt, const ScenarioOptions& s, int tp = 1,
                    int threads = 2, const DraftOptions* base = nullptr) {
  DraftOptions o = base ? *base : scenario_draft_options(ckpt->config(), s);
  o.tp = tp;
  o.threads = threads;
  auto backend = make_cpu_backend(ckpt, o);
  DraftRun r;
  r.rounds = run_scenario(*backend, s);
  for (int l = 0; l < ckpt->config().num_layers; ++l) r.kv.push_back(backend->kv_cache(l));
  return r;
}

// Every draft of request `id` in a equals the one in b (tokens, cache rows, confidences).
inline void expect_same_request(const DraftRun& a, const DraftRun& b, int id,
                                const std::string& what) {
  ASSERT_EQ(a.rounds.size(), b.rounds.size());
  for (size_t round = 0; round < a.rounds.size(); ++round) {
    const RequestDraft* da = nullptr;
    const RequestDraft* db = nullptr;
    for (const auto& d : a.rounds[round].drafts)
      if (d.request_id == id) da = &d;
    for (const auto& d : b.rounds[round].drafts)
      if (d.request_id == id) db = &d;
    ASSERT_TRUE(da && db) << what << ": request " << id << " missing in round " << round;
    EXPECT_EQ(da->tokens, db->tokens) << what << ": request " << id << " round " << round;
    EXPECT_TRUE(same_bits(da->logits, db->logits))
        << what << ": cache of request " << id << " round " << round;
    EXPECT_TRUE(same_bits(da->confidences, db->confidences))
        << what << ": confidences of request " << id << " round " << round;
  }
}

}  // namespace sparkdraft::test
