// The whole draft job on the CPU backend: determinism, batch invariance (a
// request alone vs inside a batch with padding rows), TP invariance (thread
// ranks), a DeepSpec-style checkpoint, and the API boundary's refusals.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <memory>

#include "common/bits.h"
#include "common/draft_run.h"
#include "common/errors.h"
#include "common/files.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/error.h"
#include "sparkdraft/plan.h"
#include "sparkdraft/scenario.h"

namespace sparkdraft {
namespace {

using test::TempDir;

std::shared_ptr<const Checkpoint> tiny(const std::string& style, const TempDir& dir,
                                       uint64_t seed = 3) {
  SyntheticOptions so;
  so.seed = seed;
  write_synthetic_checkpoint(preset_config("tiny", style), dir.path(), so);
  return std::make_shared<const Checkpoint>(Checkpoint::load(dir.path()));
}

using test::DraftRun;
using test::expect_same_request;
using test::run;

class DraftStyles : public ::testing::TestWithParam<std::string> {};

TEST_P(DraftStyles, RerunGivesIdenticalTokensCacheAndKv) {
  TempDir dir;
  auto ckpt = tiny(GetParam(), dir);
  ScenarioOptions s;
  s.request_ids = {0, 1, 2};
  const DraftRun a = run(ckpt, s), b = run(ckpt, s, 1, 1);
  for (int id : s.request_ids) expect_same_request(a, b, id, "rerun (2 vs 1 threads)");
  for (size_t l = 0; l < a.kv.size(); ++l)
    EXPECT_TRUE(test::same_bits(a.kv[l], b.kv[l])) << "kv layer " << l;
  // The drafts are real: sampled tokens are in range and the cache is not constant.
  const auto& d = a.rounds[0].drafts[0];
  for (int64_t t : d.tokens) EXPECT_TRUE(t >= 0 && t < ckpt->config().vocab_size);
  bool varies = false;
  for (const auto& x : d.logits) varies |= x.bits != d.logits[0].bits;
  EXPECT_TRUE(varies) << "draft logits are constant";
}

TEST_P(DraftStyles, RequestAloneEqualsRequestInBatchOfFiveWithPadding) {
  TempDir dir;
  auto ckpt = tiny(GetParam(), dir);
  ScenarioOptions batch;
  batch.request_ids = {0, 1, 2};
  batch.padding_before = {1, 3};  // rows: req0, pad, req1, pad, req2
  ScenarioOptions alone;
  alone.request_ids = {2};
  // Same geometry so that request 2 uses the same pages in both runs.
  const DraftOptions o = scenario_draft_options(ckpt->config(), batch);
  const DraftRun b = run(ckpt, batch, 1, 2, &o);
  const DraftRun a = run(ckpt, alone, 1, 2, &o);
  expect_same_request(a, b, 2, "alone vs batch of 5");
}

TEST_P(DraftStyles, TensorParallelRanksGiveTheTokensAndCacheOfOneRank) {
  TempDir dir;
  auto ckpt = tiny(GetParam(), dir);
  ScenarioOptions s;
  s.request_ids = {0, 1, 2, 3};
  s.padding_before = {2};
  const DraftRun one = run(ckpt, s, 1);
  for (int tp : {2, 4, 8}) {
    const DraftRun many = run(ckpt, s, tp);
    for (int id : s.request_ids) expect_same_request(one, many, id, "tp " + std::to_string(tp));
  }
}

INSTANTIATE_TEST_SUITE_P(Tiny, DraftStyles, ::testing::Values("qwen3", "muse"),
                         [](const auto& info) { return info.param; });

// A reduced draft vocabulary (preset tiny-d2t, contract.md section 11) through the whole job:
// tokens are target ids of the map (or the fill id), every cache entry of a target id outside
// the draft vocabulary is -inf (0xff80), and TP 2 and 4 (thread ranks over the 612 draft ids)
// give TP 1's tokens and cache; the real verifier runs on the V-wide cache.
TEST(Draft, ReducedDraftVocabularyTokensCacheAndTp) {
  TempDir dir;
  SyntheticOptions so;
  so.seed = 5;
  write_synthetic_checkpoint(preset_config("tiny-d2t"), dir.path(), so);
  auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(dir.path()));
  const ModelConfig& c = ckpt->config();
  const int V = c.vocab_size, N = c.block_size;
  std::vector<bool> draft(static_cast<size_t>(V), false);
  for (int d = 0; d < c.draft_vocab(); ++d) draft[ckpt->weights().draft_ids[d]] = true;
  ScenarioOptions s;
  s.request_ids = {0, 1, 2, 3};
  s.padding_before = {1};
  s.real_verifier = true;
  const DraftRun one = run(ckpt, s, 1);
  int outside = 0;
  for (const ScenarioRound& round : one.rounds)
    for (const RequestDraft& d : round.drafts) {
      for (int64_t t : d.tokens)
        EXPECT_TRUE(draft[static_cast<size_t>(t)] || t == ckpt->weights().draft_fill) << t;
      for (int j = 0; j < N; ++j)
        for (int v = 0; v < V; ++v) {
          const bf16 x = d.logits[static_cast<size_t>(j) * V + v];
          if (draft[static_cast<size_t>(v)]) continue;
          ++outside;
          ASSERT_EQ(x.bits, 0xff80u) << "request " << d.request_id << " step " << j << " id " << v;
        }
    }
  EXPECT_EQ(outside, 3 * 4 * N * (V - c.draft_vocab()));
  for (int tp : {2, 4}) {
    const DraftRun many = run(ckpt, s, tp);
    for (int id : s.request_ids) expect_same_request(one, many, id, "tp " + std::to_string(tp));
  }
  DraftOptions o = scenario_draft_options(c, s);
  o.tp = 8;
  test::expect_mentions(test::error_of<InvalidArgument>([&] { make_cpu_backend(ckpt, o); }),
                        {"tp 8", "draft vocabulary (612)"});
}

// The top-k Markov loop (contract.md section 12) through the whole job on the CPU backend:
// every cache row holds exactly k finite entries (the synthetic weights are finite) and -inf
// elsewhere, each token is one of them, TP 2, 4 and 8 give TP 1's tokens and cache, and
// k = V gives the dense loop's.
TEST(Draft, TopkMarkovLoopTokensCacheAndTp) {
  ScenarioOptions s;
  s.request_ids = {0, 1, 2, 3};
  s.padding_before = {1};
  s.real_verifier = true;
  auto with_topk = [](const std::string& style, int k, const TempDir& dir) {
    ModelConfig c = preset_config("tiny", style);
    c.markov_topk = k;
    SyntheticOptions so;
    so.seed = 11;
    write_synthetic_checkpoint(c, dir.path(), so);
    return std::make_shared<const Checkpoint>(Checkpoint::load(dir.path()));
  };
  for (const std::string style : {"qwen3", "muse"}) {
    SCOPED_TRACE(style);
    TempDir dir_k, dir_v, dir_dense;
    auto ckpt = with_topk(style, 5, dir_k);
    const int V = ckpt->config().vocab_size, N = ckpt->config().block_size;
    const DraftRun one = run(ckpt, s, 1);
    for (const ScenarioRound& round : one.rounds)
      for (const RequestDraft& d : round.drafts)
        for (int j = 0; j < N; ++j) {
          int finite = 0;
          for (int v = 0; v < V; ++v) {
            const bf16 x = d.logits[static_cast<size_t>(j) * V + v];
            if (x.bits == 0xff80u) continue;
            ++finite;
            EXPECT_TRUE(std::isfinite(to_f32(x))) << "request " << d.request_id << " id " << v;
          }
          EXPECT_EQ(finite, 5) << "request " << d.request_id << " step " << j;
          const int64_t t = d.tokens[static_cast<size_t>(j)];
          EXPECT_NE(d.logits[static_cast<size_t>(j) * V + t].bits, 0xff80u)
              << "the token is a candidate: request " << d.request_id << " step " << j;
        }
    for (int tp : {2, 4, 8}) {
      const DraftRun many = run(ckpt, s, tp);
      for (int id : s.request_ids) expect_same_request(one, many, id, "tp " + std::to_string(tp));
    }
    test::expect_mentions(make_cpu_backend(ckpt, scenario_draft_options(ckpt->config(), s))
                              ->plan()
                              .at("markov loop")
                              .reason,
                          {"top-k loop", "5 base top-k candidates"});
    const DraftRun all = run(with_topk(style, V, dir_v), s, 2);
    const DraftRun dense = run(with_topk(style, 0, dir_dense), s, 1);
    for (int id : s.request_ids) expect_same_request(dense, all, id, "k = V vs dense");
  }
}

// The gated and rnn Markov heads (contract.md section 13) through the CPU backend: TP 2, 4 and
// 8 (the layers sharded where they split, the head's projection replicated, the vocabulary
// split) give TP 1's tokens and cache bit for bit; the plan says which head runs; the head
// changes the draft (the same seed's vanilla checkpoint drafts otherwise).
TEST(Draft, MarkovHeadsTokensCacheAndTp) {
  ScenarioOptions s;
  s.request_ids = {0, 1, 2, 3};
  s.padding_before = {1};
  s.real_verifier = true;
  auto checkpoint = [](const std::string& preset, const std::string& style, const TempDir& dir) {
    SyntheticOptions so;
    so.seed = 13;
    write_synthetic_checkpoint(preset_config(preset, style), dir.path(), so);
    return std::make_shared<const Checkpoint>(Checkpoint::load(dir.path()));
  };
  for (const std::string style : {"qwen3", "muse"}) {
    TempDir vanilla_dir;
    const DraftRun vanilla = run(checkpoint("tiny", style, vanilla_dir), s, 1);
    for (const std::string preset : {"tiny-gated", "tiny-rnn"}) {
      SCOPED_TRACE(preset + " " + style);
      TempDir dir;
      auto ckpt = checkpoint(preset, style, dir);
      const DraftRun one = run(ckpt, s, 1);
      for (int tp : {2, 4, 8}) {
        const DraftRun many = run(ckpt, s, tp);
        for (int id : s.request_ids) expect_same_request(one, many, id, "tp " + std::to_string(tp));
      }
      bool differs = false;
      for (size_t r = 0; r < one.rounds.size(); ++r)
        for (size_t d = 0; d < one.rounds[r].drafts.size(); ++d)
          differs = differs || !test::same_bits(one.rounds[r].drafts[d].logits,
                                                vanilla.rounds[r].drafts[d].logits);
      EXPECT_TRUE(differs) << "the head left every cache row as the vanilla head's";
      test::expect_mentions(make_cpu_backend(ckpt, scenario_draft_options(ckpt->config(), s))
                                ->plan()
                                .at("markov loop")
                                .reason,
                            {preset == "tiny-gated" ? "gated Markov head" : "rnn Markov head",
                             "contract.md section 13"});
    }
  }
}

TEST(Draft, DeepSpecStyleCheckpointLoadsAndDrafts) {
  TempDir dir;
  SyntheticOptions so;
  so.seed = 11;
  so.hf_config = true;
  write_synthetic_checkpoint(preset_config("tiny", "qwen3"), dir.path(), so);
  auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(dir.path()));
  EXPECT_EQ(ckpt->config().layer_style, LayerStyle::pre_norm);
  ScenarioOptions s;
  const DraftRun r = run(ckpt, s);
  EXPECT_EQ(r.rounds.size(), 3u);
  EXPECT_EQ(r.rounds[0].drafts.size(), 3u);
}

TEST(Draft, RefusesBadInputAtTheBoundary) {
  TempDir dir;
  auto ckpt = tiny("qwen3", dir);
  ScenarioOptions s;
  DraftOptions o = scenario_draft_options(ckpt->config(), s);
  o.threads = 1;
  auto backend = make_cpu_backend(ckpt, o);
  const int N = ckpt->config().block_size, V = ckpt->config().vocab_size;
  int64_t anchor = 5, apos = 20, seed = 1, slot = 0;
  float temp = 0.5f;
  std::vector<int32_t> table(o.max_pages_per_req);
  for (int p = 0; p < o.max_pages_per_req; ++p) table[p] = p;
  std::vector<int64_t> tokens(N);
  std::vector<bf16> cache(static_cast<size_t>(o.cache_slots) * N * V);
  auto propose = [&] {
    ProposeBatch b{1, &anchor, &apos, &seed, &temp, &slot, table.data()};
    backend->propose(b, ProposeOutputs{tokens.data(), cache.data()});
  };
  EXPECT_NO_THROW(propose());
  temp = -0.1f;
  EXPECT_THROW(propose(), InvalidArgument);
  temp = std::numeric_limits<float>::quiet_NaN();
  EXPECT_THROW(propose(), InvalidArgument);
  temp = std::numeric_limits<float>::infinity();
  EXPECT_THROW(propose(), InvalidArgument);
  temp = 0.5f;
  anchor = V;
  EXPECT_THROW(propose(), InvalidArgument);
  anchor = 5;
  slot = o.cache_slots;
  EXPECT_THROW(propose(), InvalidArgument);
  slot = 0;
  apos = o.max_positions();
  EXPECT_THROW(propose(), InvalidArgument);
  // a + N overflowed int64 here and passed (then a SIGBUS in the KV reads).
  for (int64_t big : {std::numeric_limits<int64_t>::max() - 3, std::numeric_limits<int64_t>::max(),
                      std::numeric_limits<int64_t>::min()}) {
    apos = big;
    EXPECT_THROW(propose(), InvalidArgument) << "anchor position " << big;
  }
  apos = 20;
  table[1] = o.num_pages;
  EXPECT_THROW(propose(), InvalidArgument);
  table[1] = 1;
  try {
    temp = -1.0f;
    propose();
    ADD_FAILURE() << "negative temperature accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("temperature"), std::string::npos) << e.what();
  }
}

// Positions past the config's max_position_embeddings are refused even where the
// block table reaches further, and the RoPE table is sized by that limit (a block
// table of 2^21 pages cost 2 GB of table at construction; INT_MAX aborted).
TEST(Draft, PositionsStopAtMaxPositionEmbeddings) {
  TempDir dir;
  auto ckpt = tiny("qwen3", dir);
  const ModelConfig& c = ckpt->config();
  DraftOptions o;
  o.threads = 1;
  o.max_pages_per_req = 1 << 21;  // 2^25 positions of the block table, 8192 of the config
  EXPECT_EQ(position_limit(c, o), c.max_position_embeddings);
  auto backend = make_cpu_backend(ckpt, o);
  std::vector<bf16> hidden(static_cast<size_t>(c.taps()) * c.target_hidden_size, to_bf16(0.5f));
  int64_t pos = c.max_position_embeddings - 1, slot = 3;
  EXPECT_NO_THROW(backend->store_context({1, hidden.data(), &pos, &slot}));
  pos = c.max_position_embeddings;
  try {
    backend->store_context({1, hidden.data(), &pos, &slot});
    ADD_FAILURE() << "position " << pos << " accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("max_position_embeddings"), std::string::npos) << e.what();
  }
  const int N = c.block_size;
  int64_t anchor = 5, apos = c.max_position_embeddings - N + 1, seed = 1, cslot = 0;
  float temp = 0.5f;
  std::vector<int32_t> table(static_cast<size_t>(o.max_pages_per_req), 0);
  std::vector<int64_t> tokens(N);
  std::vector<bf16> cache(static_cast<size_t>(o.cache_slots) * N * c.vocab_size);
  auto propose = [&] {
    ProposeBatch b{1, &anchor, &apos, &seed, &temp, &cslot, table.data()};
    backend->propose(b, ProposeOutputs{tokens.data(), cache.data()});
  };
  EXPECT_THROW(propose(), InvalidArgument);  // the block's last position is the limit
  apos -= 1;
  EXPECT_NO_THROW(propose());
  // A table that no limit cuts small enough is refused by size, not allocated.
  ModelConfig big = c;
  big.max_position_embeddings = std::numeric_limits<int>::max();
  DraftOptions huge;
  huge.max_pages_per_req = std::numeric_limits<int>::max();
  try {
    validate_options(big, huge);
    ADD_FAILURE() << "a RoPE table of 2^31 positions accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("RoPE table"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sparkdraft

namespace sparkdraft {
namespace {

// DraftOptions::kv_caches: a CPU draft on the caller's KV caches drafts what a draft on
// its own caches drafts (tokens, cache rows), and the caller's memory then holds what
// the draft's own caches hold; kv_cache_data points at them. Refusals: a count other
// than the layers', a null pointer, tp > 1.
TEST(CpuDraft, CallersKvCachesEqualOwnCaches) {
  TempDir dir;
  auto ckpt = tiny("qwen3", dir);
  const ModelConfig& c = ckpt->config();
  ScenarioOptions s;
  s.request_ids = {0, 3, 1};
  s.padding_before = {1};
  const DraftOptions o = scenario_draft_options(c, s);
  const DraftRun own = run(ckpt, s);
  const size_t per_layer =
      static_cast<size_t>(o.num_pages) * o.page_size * c.num_kv_heads * 2 * c.head_dim;
  std::vector<std::vector<bf16>> mine(static_cast<size_t>(c.num_layers),
                                      std::vector<bf16>(per_layer, bf16{0}));
  DraftOptions ext = o;
  for (auto& m : mine) ext.kv_caches.push_back(m.data());
  const DraftRun theirs = run(ckpt, s, 1, 2, &ext);
  for (int id : s.request_ids) expect_same_request(own, theirs, id, "caller's KV caches");
  for (int l = 0; l < c.num_layers; ++l) {
    EXPECT_TRUE(test::same_bits(mine[static_cast<size_t>(l)], own.kv[static_cast<size_t>(l)]))
        << "layer " << l;
    EXPECT_TRUE(test::same_bits(theirs.kv[static_cast<size_t>(l)], own.kv[static_cast<size_t>(l)]))
        << "layer " << l;
  }
  auto backend = make_cpu_backend(ckpt, ext);
  EXPECT_EQ(backend->kv_cache_data(1), mine[1].data());
  EXPECT_THROW(backend->kv_cache_data(c.num_layers), InvalidArgument);

  DraftOptions bad = ext;
  bad.kv_caches.pop_back();
  EXPECT_THROW(make_cpu_backend(ckpt, bad), InvalidArgument);
  bad = ext;
  bad.kv_caches[0] = nullptr;
  EXPECT_THROW(make_cpu_backend(ckpt, bad), InvalidArgument);
  bad = ext;
  bad.tp = 2;
  EXPECT_THROW(make_cpu_backend(ckpt, bad), InvalidArgument);
  // The backend's own caches: kv_cache_data at tp 1, Unavailable where they are sharded.
  auto own_backend = make_cpu_backend(ckpt, o);
  EXPECT_NE(own_backend->kv_cache_data(0), nullptr);
  DraftOptions tp2 = o;
  tp2.tp = 2;
  tp2.threads = 2;
  auto sharded = make_cpu_backend(ckpt, tp2);
  ASSERT_TRUE(sharded->plan().runs("layers", "sharded")) << sharded->plan().text();
  EXPECT_THROW(sharded->kv_cache_data(0), Unavailable);
}

}  // namespace
}  // namespace sparkdraft
