// The fill-in layout (contract.md section 14) through the CPU backend.
//
// The oracle is written from the section's text, independently of the backend's row
// selection: the fill-in query block [anchor, mask x N] at positions a .. a+N is, token for
// token, the anchor layout's query block of N + 1 slots, so the anchor-layout backend with
// block_size N + 1 on the same weights gives the fill-in backbone's every hidden state and
// every KV cache entry; slots 1 .. N of it then go through lm_head (one GEMM row each) and a
// naive Markov loop (prev: the anchor, then each sampled token; the noise of step j keyed by
// (seed, a, j)). The fill-in backend must equal that bit for bit (tokens, cache, hidden
// states, KV caches), and its TP 2, 4 and 8 runs its TP 1 run, alone or in a batch with
// padding rows, with the confidence head and with a reduced draft vocabulary.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <memory>

#include "common/bits.h"
#include "common/draft_run.h"
#include "common/files.h"
#include "common/random.h"
#include "runtime/cpu_draft.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/core/philox.h"
#include "sparkdraft/core/sampling.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/ops/markov.h"
#include "sparkdraft/scenario.h"

namespace sparkdraft {
namespace {

using test::TempDir;

std::shared_ptr<const Checkpoint> write_and_load(const ModelConfig& c, const TempDir& dir,
                                                 uint64_t seed) {
  SyntheticOptions so;
  so.seed = seed;
  write_synthetic_checkpoint(c, dir.path(), so);
  return std::make_shared<const Checkpoint>(Checkpoint::load(dir.path()));
}

// One store_context and one propose on a backend; what it returns and holds after.
struct OneStep {
  std::vector<int64_t> tokens;
  std::vector<bf16> cache, hidden;
  std::vector<std::vector<bf16>> kv;
};

struct StepInputs {
  int rows = 0;
  std::vector<bf16> ctx_hidden;
  std::vector<int64_t> ctx_pos, ctx_slots;
  std::vector<int64_t> anchors, apos, seeds, slots;
  std::vector<float> temps;
  std::vector<int32_t> tables;
};

// Rows: 0, 2, 3 requests (row 1 padding); each request's context is positions [0, a).
StepInputs make_inputs(const ModelConfig& c, const DraftOptions& o, test::Gen& gen) {
  StepInputs in;
  in.rows = 4;
  const int width = c.taps() * c.target_hidden_size;
  for (int r = 0; r < in.rows; ++r) {
    const bool pad = r == 1;
    const int64_t a = pad ? 0 : 5 + 11 * r + gen.integer(0, 9);
    in.anchors.push_back(pad ? 0 : gen.integer(0, c.vocab_size - 1));
    in.apos.push_back(a);
    in.seeds.push_back(static_cast<int64_t>(gen.bits()));
    in.temps.push_back(r == 0 ? 0.0f : (r == 2 ? 0.7f : 1.0f));
    in.slots.push_back(pad ? -1 : r);
    for (int p = 0; p < o.max_pages_per_req; ++p) in.tables.push_back(r * o.max_pages_per_req + p);
    if (pad) continue;
    for (int64_t p = 0; p < a; ++p) {
      in.ctx_pos.push_back(p);
      in.ctx_slots.push_back(static_cast<int64_t>(r * o.max_pages_per_req + p / o.page_size) *
                                 o.page_size +
                             p % o.page_size);
    }
  }
  in.ctx_hidden = gen.normal_bf16s(in.ctx_pos.size() * static_cast<size_t>(width), 1.0f);
  return in;
}

OneStep run_step(std::shared_ptr<const Checkpoint> ckpt, const DraftOptions& o,
                 const StepInputs& in) {
  const ModelConfig& c = ckpt->config();
  auto backend = make_cpu_draft(ckpt, o);
  backend->store_context(ContextBatch{static_cast<int>(in.ctx_pos.size()), in.ctx_hidden.data(),
                                      in.ctx_pos.data(), in.ctx_slots.data()});
  OneStep s;
  s.tokens.assign(static_cast<size_t>(in.rows) * c.block_size, -1);
  s.cache.assign(static_cast<size_t>(o.cache_slots) * c.block_size * c.vocab_size, to_bf16(-3.0f));
  backend->propose(ProposeBatch{in.rows, in.anchors.data(), in.apos.data(), in.seeds.data(),
                                in.temps.data(), in.slots.data(), in.tables.data()},
                   ProposeOutputs{s.tokens.data(), s.cache.data()});
  s.hidden = backend->last_hidden(0);
  for (int l = 0; l < c.num_layers; ++l) s.kv.push_back(backend->kv_cache(l));
  return s;
}

class FillIn : public ::testing::TestWithParam<std::string> {};

TEST_P(FillIn, EqualsTheAnchorBackboneOfNPlusOneSlotsAndANaiveLoop) {
  const std::string style = GetParam();
  const uint64_t seed = 20261204;
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  TempDir dir_f, dir_a;
  const ModelConfig cf = preset_config("tiny-fillin", style);
  ModelConfig ca = cf;  // the anchor layout over the same N + 1 query slots
  ca.sample_from_anchor = true;
  ca.block_size = cf.block_size + 1;
  auto fill = write_and_load(cf, dir_f, 9);
  auto anchor = write_and_load(ca, dir_a, 9);
  // The same weights: the synthetic values depend on the tensor names and shapes only.
  ASSERT_EQ(test::read_file(dir_f / "model.safetensors"),
            test::read_file(dir_a / "model.safetensors"));
  const int N = cf.block_size, Q = N + 1, H = cf.hidden_size, V = cf.vocab_size;
  const int K = cf.markov_rank;
  DraftOptions o;
  o.max_reqs = 4;
  o.cache_slots = 4;
  o.page_size = 16;
  o.max_pages_per_req = 8;
  o.num_pages = 4 * 8;
  o.threads = 2;
  test::Gen gen(seed);
  const StepInputs in = make_inputs(cf, o, gen);
  const OneStep f = run_step(fill, o, in);
  const OneStep a = run_step(anchor, o, in);

  // The backbone and the KV caches: the anchor layout's of N + 1 slots.
  ASSERT_EQ(f.hidden.size(), static_cast<size_t>(in.rows) * Q * H);
  EXPECT_TRUE(test::same_bits(f.hidden, a.hidden)) << "hidden states of the 1 + N slots";
  for (size_t l = 0; l < f.kv.size(); ++l)
    EXPECT_TRUE(test::same_bits(f.kv[l], a.kv[l])) << "kv layer " << l;

  // Slots 1 .. N through lm_head and the naive loop.
  const DraftWeights& w = fill->weights();
  const ops::LogitTransform transform = ops::LogitTransform::from_config(cf);
  for (int r = 0; r < in.rows; ++r) {
    if (in.slots[r] < 0) continue;
    int64_t prev = in.anchors[r];
    for (int j = 0; j < N; ++j) {
      const bf16* h = &a.hidden[(static_cast<size_t>(r) * Q + 1 + j) * H];
      std::vector<bf16> base(V), bias(V), l(V);
      cpu::gemm(ops::gemm_of(h, H, w.lm_head, 1, V, H, base.data(), V));
      cpu::markov_bias(&w.markov_w1[static_cast<size_t>(prev) * K], 1, w.markov_w2, V, K,
                       bias.data());
      cpu::step_logits(base.data(), bias.data(), V, transform, l.data());
      const uint32_t gs = draft_step_seed(in.seeds[r], in.apos[r], j);
      int64_t best = 0;
      float best_z = noised_score(to_f32(l[0]), in.temps[r], gs, 0);
      for (int v = 1; v < V; ++v) {
        const float z = noised_score(to_f32(l[v]), in.temps[r], gs, v);
        if (std::isnan(best_z)) break;  // the lowest NaN stays
        if (std::isnan(z) || z > best_z) {
          best = v;
          best_z = z;
        }
      }
      EXPECT_EQ(f.tokens[static_cast<size_t>(r) * N + j], best) << "row " << r << " step " << j;
      const bf16* cached = &f.cache[(static_cast<size_t>(in.slots[r]) * N + j) * V];
      EXPECT_TRUE(test::same_bits(std::vector<bf16>(cached, cached + V), l))
          << "cache row " << r << " step " << j;
      prev = best;
    }
  }
  // The padding row's cache slot (1) is untouched.
  for (size_t i = 0; i < static_cast<size_t>(N) * V; ++i)
    ASSERT_EQ(f.cache[static_cast<size_t>(1) * N * V + i].bits, to_bf16(-3.0f).bits);
}

using test::DraftRun;
using test::expect_same_request;

DraftRun run(std::shared_ptr<const Checkpoint> ckpt, const ScenarioOptions& s, int tp,
             const DraftOptions& base) {
  return test::run(ckpt, s, tp, 2, &base);
}

TEST_P(FillIn, TpRanksAndABatchWithPaddingGiveTheBitsOfOneRankAlone) {
  const std::string style = GetParam();
  // The preset, then the confidence head and a reduced draft vocabulary on top of it.
  for (const int variant : {0, 1, 2}) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    ModelConfig c = preset_config("tiny-fillin", style);
    if (variant == 1) c.confidence_head = c.confidence_head_with_markov = true;
    if (variant == 2) c.draft_vocab_size = 612;
    TempDir dir;
    auto ckpt = write_and_load(c, dir, 13);
    ScenarioOptions batch;
    batch.request_ids = {0, 1, 2};
    batch.padding_before = {1, 3};
    batch.real_verifier = true;
    ScenarioOptions alone = batch;
    alone.request_ids = {2};
    alone.padding_before = {};
    const DraftOptions o = scenario_draft_options(c, batch);
    const DraftRun one = run(ckpt, batch, 1, o);
    // Real drafts: tokens in range, the cache not constant.
    const RequestDraft& d = one.rounds[0].drafts[0];
    ASSERT_EQ(d.tokens.size(), static_cast<size_t>(c.block_size));
    bool varies = false;
    for (const bf16& x : d.logits) varies |= x.bits != d.logits[0].bits;
    EXPECT_TRUE(varies) << "draft logits are constant";
    expect_same_request(one, run(ckpt, alone, 1, o), 2, "alone vs batch of 5");
    for (int tp : variant == 2 ? std::vector<int>{2, 4} : std::vector<int>{2, 4, 8}) {
      const DraftRun many = run(ckpt, batch, tp, o);
      for (int id : batch.request_ids)
        expect_same_request(one, many, id, "tp " + std::to_string(tp));
      for (size_t l = 0; l < one.kv.size(); ++l)
        EXPECT_TRUE(test::same_bits(one.kv[l], many.kv[l])) << "kv layer " << l << " tp " << tp;
    }
  }
}

// The plan names the layout; the anchor layout's plan has no such part.
TEST(FillInPlan, TheCpuPlanNamesTheLayout) {
  const StepPlan fill = cpu_plan(preset_config("tiny-fillin"), 2);
  EXPECT_TRUE(fill.runs("layout", "fill-in"));
  EXPECT_NE(fill.at("layout").reason.find("1 + N query slots"), std::string::npos);
  const StepPlan anchor = cpu_plan(preset_config("tiny"), 2);
  for (const PlanPart& p : anchor.parts) EXPECT_NE(p.part, "layout");
}

INSTANTIATE_TEST_SUITE_P(Tiny, FillIn, ::testing::Values("qwen3", "muse"),
                         [](const auto& info) { return info.param; });

}  // namespace
}  // namespace sparkdraft
