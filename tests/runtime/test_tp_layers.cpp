// Tensor parallelism of the layers on the CPU backend (contract.md section 6): thread
// ranks that each hold their heads, intermediate columns, K slices of o_proj and
// down_proj and KV heads give the bits of TP 1 at TP 2, 4 and 8 (draft tokens,
// the draft-logits cache, every layer's KV cache, the final hidden states of every
// rank, round after round); the slice tree is what makes it so (a rank-order
// all-reduce, or a rank adding its slices left to right, is caught on seeded
// inputs with cancellation); a config that does not split runs replicated layers
// and the plan says why; a rank that fails stops every rank with an error naming it.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <future>
#include <memory>
#include <ostream>
#include <string>
#include <thread>
#include <vector>

#include "common/bits.h"
#include "common/errors.h"
#include "common/files.h"
#include "common/random.h"
#include "common/tp_model.h"
#include "runtime/cpu_draft.h"
#include "runtime/cpu_ops.h"
#include "runtime/layer_shard.h"
#include "sparkdraft/check.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/comm.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/error.h"
#include "sparkdraft/scenario.h"

namespace sparkdraft {
namespace {

using test::TempDir;

using test::checkpoint_of;
using test::shardable;

// Everything a run leaves, per round: the drafts, every layer's KV cache (TP 1
// layout), every layer rank's KV shards and final hidden states.
struct Snapshot {
  ScenarioRound round;
  std::vector<std::vector<bf16>> kv;                   // [layer]
  std::vector<std::vector<std::vector<bf16>>> shards;  // [rank][layer]
  std::vector<std::vector<bf16>> hidden;               // [rank]
};
struct TpRun {
  int layer_tp = 0;
  StepPlan plan;
  std::vector<Snapshot> rounds;
};

TpRun run_tp(std::shared_ptr<const Checkpoint> ckpt, const ScenarioOptions& s, int tp,
             const DraftOptions& base, CpuOpsFactory ops = nullptr) {
  DraftOptions o = base;
  o.tp = tp;
  o.threads = 2 * tp;  // 2 per rank: the ranks' ops share the worker pool concurrently
  auto backend = make_cpu_draft(ckpt, o, std::move(ops));
  TpRun r;
  r.layer_tp = backend->layer_tp_size();
  r.plan = backend->plan();
  const int L = ckpt->config().num_layers;
  run_scenario(*backend, s, [&](int, const ScenarioRound& round) {
    Snapshot snap{round, {}, {}, {}};
    for (int l = 0; l < L; ++l) snap.kv.push_back(backend->kv_cache(l));
    for (int k = 0; k < r.layer_tp; ++k) {
      snap.shards.emplace_back();
      for (int l = 0; l < L; ++l) snap.shards.back().push_back(backend->kv_cache_shard(k, l));
      snap.hidden.push_back(backend->last_hidden(k));
    }
    r.rounds.push_back(std::move(snap));
  });
  // Every GEMM of the step found the weight the backend packed at load.
  EXPECT_EQ(backend->packed_weight_misses(), 0) << "tp " << tp;
  return r;
}

bool varies(const std::vector<bf16>& v) {
  for (const bf16& x : v)
    if (x.bits != v[0].bits) return true;
  return false;
}

// `many` has the bits of `one` (a TP 1 run) in every round: tokens, cache rows,
// KV caches (whole and per rank's heads) and every rank's hidden states.
void expect_same_as_tp1(const TpRun& one, const TpRun& many, const ModelConfig& c,
                        const std::string& what) {
  ASSERT_EQ(one.rounds.size(), many.rounds.size()) << what;
  const size_t head = 2 * static_cast<size_t>(c.head_dim);
  for (size_t round = 0; round < one.rounds.size(); ++round) {
    const Snapshot &a = one.rounds[round], &b = many.rounds[round];
    const std::string at = what + " round " + std::to_string(round);
    ASSERT_EQ(a.round.drafts.size(), b.round.drafts.size()) << at;
    for (size_t i = 0; i < a.round.drafts.size(); ++i) {
      const RequestDraft &da = a.round.drafts[i], &db = b.round.drafts[i];
      ASSERT_EQ(da.request_id, db.request_id) << at;
      EXPECT_EQ(da.tokens, db.tokens) << at << " request " << da.request_id;
      EXPECT_TRUE(test::same_bits(db.logits, da.logits, {c.vocab_size}))
          << at << " draft-logits cache of request " << da.request_id;
    }
    for (size_t l = 0; l < a.kv.size(); ++l) {
      EXPECT_TRUE(test::same_bits(b.kv[l], a.kv[l], {c.num_kv_heads * 2 * c.head_dim}))
          << at << " KV cache of layer " << l;
      // Rank k's shard is exactly KV heads [k*Hkv/t, (k+1)*Hkv/t) of every slot.
      const int t = many.layer_tp, per = c.num_kv_heads / t;
      const size_t slots = a.kv[l].size() / (head * c.num_kv_heads);
      for (int k = 0; k < t; ++k) {
        std::vector<bf16> expected;
        for (size_t s = 0; s < slots; ++s) {
          const bf16* src = a.kv[l].data() + (s * c.num_kv_heads + k * per) * head;
          expected.insert(expected.end(), src, src + per * head);
        }
        EXPECT_TRUE(test::same_bits(b.shards[k][l], expected, {per * static_cast<int64_t>(head)}))
            << at << " KV shard of rank " << k << " layer " << l;
      }
    }
    for (size_t k = 0; k < b.hidden.size(); ++k)
      EXPECT_TRUE(test::same_bits(b.hidden[k], a.hidden[0], {c.hidden_size}))
          << at << " final hidden states of rank " << k;
  }
}

struct ShardCase {
  std::string style;
  int heads, kv_heads;
};

void PrintTo(const ShardCase& p, std::ostream* os) {
  *os << p.style << " style, " << p.heads << " heads, " << p.kv_heads << " KV heads";
}

class TpLayers : public ::testing::TestWithParam<ShardCase> {};

TEST_P(TpLayers, ShardedLayersGiveTheBitsOfOneRankAtTp248) {
  const ShardCase& p = GetParam();
  const uint64_t seed = 0x7B1A0 + p.heads + 3 * p.kv_heads + (p.style == "muse" ? 100 : 0);
  SCOPED_TRACE("synthetic checkpoint seed " + std::to_string(seed) + ", style " + p.style + ", " +
               std::to_string(p.heads) + " heads / " + std::to_string(p.kv_heads) + " KV heads");
  const ModelConfig c = shardable(p.style, p.heads, p.kv_heads);
  TempDir dir;
  auto ckpt = checkpoint_of(c, dir, seed);
  ScenarioOptions s;
  s.request_ids = {0, 1, 2, 3};
  s.padding_before = {1};
  s.rounds = 3;
  s.seed = seed;
  const DraftOptions o = scenario_draft_options(c, s);
  const TpRun one = run_tp(ckpt, s, 1, o);
  ASSERT_EQ(one.layer_tp, 1);
  // The drafts are real: non-constant caches, KV and hidden states.
  ASSERT_EQ(one.rounds.size(), 3u);
  for (const Snapshot& snap : one.rounds) {
    for (const RequestDraft& d : snap.round.drafts) EXPECT_TRUE(varies(d.logits));
    for (const auto& kv : snap.kv) EXPECT_TRUE(varies(kv));
    EXPECT_TRUE(varies(snap.hidden[0]));
  }
  for (int tp : {2, 4, 8}) {
    const TpRun many = run_tp(ckpt, s, tp, o);
    ASSERT_EQ(many.layer_tp, tp) << "the test shape must shard at tp " << tp << ":\n"
                                 << many.plan.text();
    EXPECT_EQ(many.plan.at("layers").variant, "sharded") << many.plan.text();
    expect_same_as_tp1(one, many, c, "tp " + std::to_string(tp));
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, TpLayers,
                         ::testing::Values(ShardCase{"qwen3", 8, 8}, ShardCase{"muse", 8, 8},
                                           ShardCase{"qwen3", 16, 8}),
                         [](const auto& info) {
                           return info.param.style + "_" + std::to_string(info.param.heads) + "h" +
                                  std::to_string(info.param.kv_heads) + "kv";
                         });

// The tiny preset (4 heads, 2 KV heads, q 64, I 160) shards at TP 2 only; at 4 and
// 8 its layers are replicated, the plan says why, and the bits are still TP 1's.
TEST(TpLayersTiny, ReplicatedWhereTheConfigDoesNotSplitAndThePlanSaysWhy) {
  const uint64_t seed = 0x7B1A1;
  SCOPED_TRACE("synthetic checkpoint seed " + std::to_string(seed));
  const ModelConfig c = preset_config("tiny", "muse");
  TempDir dir;
  auto ckpt = checkpoint_of(c, dir, seed);
  ScenarioOptions s;
  s.request_ids = {0, 1, 2};
  s.rounds = 2;
  s.seed = seed;
  const DraftOptions o = scenario_draft_options(c, s);
  const TpRun one = run_tp(ckpt, s, 1, o);
  for (int tp : {2, 4, 8}) {
    const TpRun many = run_tp(ckpt, s, tp, o);
    EXPECT_EQ(many.layer_tp, tp == 2 ? 2 : 1) << "tp " << tp;
    expect_same_as_tp1(one, many, c, "tiny tp " + std::to_string(tp));
  }
  const StepPlan plan8 = cpu_plan(c, 8);
  const PlanPart& layers = plan8.at("layers");
  EXPECT_EQ(layers.variant, "replicated");
  test::expect_mentions(layers.reason,
                        {"2 KV heads do not split over 8 ranks",
                         "4 query heads do not split over 8 ranks", "the vocabulary still shards"});
  test::expect_mentions(plan8.text(), {"layers: replicated (", "lm_head: eager (vocab-parallel"});
  EXPECT_EQ(cpu_plan(c, 4).at("layers").variant, "replicated");
  test::expect_mentions(cpu_plan(c, 4).at("layers").reason,
                        {"2 KV heads do not split over 4 ranks", "down_proj's K 160"});
  EXPECT_EQ(cpu_plan(c, 2).at("layers").variant, "sharded");
  EXPECT_EQ(cpu_plan(c, 1).at("layers").variant, "replicated");
  EXPECT_EQ(cpu_plan(c, 1).at("layers").reason, "one rank");
}

TEST(TpLayersTiny, RefusalNamesEveryReason) {
  ModelConfig c = shardable("qwen3");
  for (int tp : {1, 2, 4, 8}) EXPECT_EQ(layer_shard_refusal(c, tp), "") << "tp " << tp;
  EXPECT_NE(layer_shard_refusal(c, 16), "");
  test::expect_mentions(layer_shard_refusal(c, 16),
                        {"8 query heads do not split over 16 ranks",
                         "o_proj's K 128 has 8 canonical slices, too few for 16 ranks"});
  c.intermediate_size = 192;  // 3 * 64: 4 slices, not 8
  EXPECT_EQ(layer_shard_refusal(c, 4), "");
  test::expect_mentions(
      layer_shard_refusal(c, 8),
      {"down_proj's K 192 has 4 canonical slices, too few for 8 ranks", "a multiple of 128"});
  EXPECT_EQ(layer_tp_size(c, 8), 1);
  EXPECT_EQ(layer_tp_size(c, 4), 4);
  const DraftOptions o;
  EXPECT_THROW(DraftStep(c, o, LayerShard{0, 8}), InvalidArgument);
  EXPECT_THROW(DraftStep(c, o, LayerShard{4, 4}), InvalidArgument);
  EXPECT_NO_THROW(DraftStep(c, o, LayerShard{3, 4}));
}

// ---- the slice tree is what makes it exact --------------------------------------------

// A communicator that adds the ranks' partials in rank order ((p0+p1)+p2)+p3 instead
// of the tree: what the TP check must catch.
class RankOrderComm final : public Communicator {
 public:
  explicit RankOrderComm(Communicator& inner) : in_(inner) {}
  int tp_size() const override { return in_.tp_size(); }
  const std::vector<int>& local_ranks() const override { return in_.local_ranks(); }
  CommMemory memory() const override { return in_.memory(); }
  using Communicator::all_gather;
  using Communicator::all_reduce_sum;
  void all_gather(const void* const* send, void* recv, size_t bytes, void* stream) override {
    in_.all_gather(send, recv, bytes, stream);
  }
  void all_reduce_sum(float* const* data, size_t count, void*) override {
    std::vector<float> all(count * static_cast<size_t>(tp_size()));
    in_.all_gather(data[0], all.data(), count * sizeof(float));
    for (size_t i = 0; i < count; ++i) {
      float sum = all[i];
      for (int r = 1; r < tp_size(); ++r) sum = sum + all[static_cast<size_t>(r) * count + i];
      data[0][i] = sum;
    }
  }
  void barrier() override { in_.barrier(); }

 private:
  Communicator& in_;
};

// The cancelling o_proj-like inputs (tests/common/tp_model.h) and TP 1's product.
struct Cancelling : test::CancellingSlices {
  explicit Cancelling(test::Gen& gen) : CancellingSlices(gen, 7) {}
  std::vector<bf16> tp1() const {
    std::vector<bf16> y(static_cast<size_t>(M) * N);
    cpu::gemm(ops::gemm_of(x.data(), K, w.data(), M, N, K, y.data(), N, 8));
    return y;
  }
};

size_t count_differences(const std::vector<bf16>& a, const std::vector<bf16>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += a[i].bits != b[i].bits;
  return n;
}

// What one rank of `tp` computes through CpuOps::gemm_all_reduce (the backend's
// path) on communicator `comm`: its K columns x[:, r*K/t ..], w[:, r*K/t ..].
void rank_gemm(const Cancelling& p, Communicator& comm, std::vector<bf16>& y) {
  const int t = comm.tp_size(), r = comm.tp_rank(), k0 = r * p.K / t;
  CpuOps ops(1, &comm);
  ops::GemmParams g =
      ops::gemm_of(p.x.data() + k0, p.K, p.w.data() + k0, p.M, p.N, p.K / t, y.data(), p.N, 8 / t);
  g.w_stride = p.K;
  ops.gemm_all_reduce(g);
}

TEST(TpLayersTree, ShardedOProjIsTheSliceTreeAndOtherOrdersAreCaught) {
  const uint64_t seed = 0x7B1A2;
  test::Gen gen(seed);
  const Cancelling p(gen);
  const std::vector<bf16> expected = p.tp1();
  // The tree over ranks completes the tree over slices: TP 1's bits at 2, 4, 8.
  for (int tp : {2, 4, 8}) {
    std::vector<std::vector<bf16>> got(tp, std::vector<bf16>(expected.size()));
    run_thread_group(tp, [&](Communicator& comm) { rank_gemm(p, comm, got[comm.tp_rank()]); });
    for (int r = 0; r < tp; ++r)
      EXPECT_TRUE(test::same_bits(got[r], expected, {p.N}))
          << "seed " << seed << " tp " << tp << " rank " << r;
  }
  // An all-reduce in rank order instead of the tree gives other bits (TP 4 and 8).
  for (int tp : {4, 8}) {
    std::vector<bf16> got(expected.size());
    run_thread_group(tp, [&](Communicator& comm) {
      RankOrderComm wrong(comm);
      std::vector<bf16> mine(expected.size());
      rank_gemm(p, wrong, mine);
      if (comm.tp_rank() == 0) got = mine;
    });
    EXPECT_GT(count_differences(got, expected), expected.size() / 10)
        << "seed " << seed << " tp " << tp << ": a rank-order all-reduce went unnoticed";
  }
  // A rank (TP 2) that adds its 4 slices left to right instead of its subtree.
  {
    std::vector<bf16> got(expected.size());
    run_thread_group(2, [&](Communicator& comm) {
      const int len = p.K / 8, first = 4 * comm.tp_rank();
      std::vector<float> part(static_cast<size_t>(p.M) * p.N), sum(part.size(), 0.0f);
      for (int s = first; s < first + 4; ++s) {
        cpu::gemm(ops::gemm_f32_of(p.x.data() + s * len, p.K, p.w.data() + s * len, p.K, p.M, p.N,
                                   len, part.data(), p.N, 1));
        for (size_t i = 0; i < sum.size(); ++i) sum[i] = s == first ? part[i] : sum[i] + part[i];
      }
      comm.all_reduce_sum(sum.data(), sum.size());
      if (comm.tp_rank() == 0)
        for (size_t i = 0; i < sum.size(); ++i) got[i] = to_bf16(sum[i]);
    });
    EXPECT_GT(count_differences(got, expected), expected.size() / 10)
        << "seed " << seed << ": slices added left to right went unnoticed";
  }
}

// ---- faults -------------------------------------------------------------------------

// Runs f on a thread; a group that hangs aborts the test binary (a hang must
// not pass as a slow test).
void within_seconds(int seconds, const std::function<void()>& f) {
  std::packaged_task<void()> task(f);
  std::future<void> done = task.get_future();
  std::thread th(std::move(task));
  if (done.wait_for(std::chrono::seconds(seconds)) != std::future_status::ready) {
    std::fprintf(stderr, "the thread group hung (more than %d s)\n", seconds);
    std::abort();
  }
  th.join();
  done.get();
}

// CpuOps that throw on one rank at the n-th call of one op.
class FaultyOps final : public CpuOps {
 public:
  FaultyOps(int threads, Communicator* comm, int rank, int at_call, bool in_backbone)
      : CpuOps(threads, comm), rank_(rank), at_(at_call), backbone_(in_backbone) {}
  void gemm_all_reduce(const ops::GemmParams& p) override {
    if (backbone_) trip();
    CpuOps::gemm_all_reduce(p);
  }
  void kv_insert(const ops::KvInsertParams& p) override {
    if (!backbone_) trip();
    CpuOps::kv_insert(p);
  }

 private:
  void trip() {
    if (comm() && comm()->tp_rank() == rank_ && ++calls_ == at_)
      throw DeviceError("injected fault at call " + std::to_string(at_));
  }
  int rank_, at_, calls_ = 0;
  bool backbone_;
};

TEST(TpLayersFaults, ARankThatThrowsStopsEveryRankWithAnErrorNamingIt) {
  const uint64_t seed = 0x7B1A3;
  SCOPED_TRACE("synthetic checkpoint seed " + std::to_string(seed));
  const ModelConfig c = shardable("qwen3");
  TempDir dir;
  auto ckpt = checkpoint_of(c, dir, seed);
  ScenarioOptions s;
  s.request_ids = {0, 1};
  s.rounds = 1;
  const DraftOptions base = scenario_draft_options(c, s);
  struct Fault {
    int tp, rank, at_call;
    bool backbone;
  };
  // Backbone: rank 1 fails at layer 1's o_proj (call 3) while the others wait in
  // its all-reduce; rank 3 at its first down_proj. Context chain: rank 2 at its
  // second KV insert (no collective: the others finish, the error still surfaces).
  for (const Fault f : {Fault{4, 1, 3, true}, Fault{8, 3, 2, true}, Fault{4, 2, 2, false}}) {
    const std::string what = "tp " + std::to_string(f.tp) + " rank " + std::to_string(f.rank) +
                             (f.backbone ? " backbone" : " context chain");
    DraftOptions o = base;
    o.tp = f.tp;
    o.threads = 2;
    auto backend = make_cpu_draft(ckpt, o, [&](int threads, Communicator* comm) {
      return std::make_unique<FaultyOps>(threads, comm, f.rank, f.at_call, f.backbone);
    });
    ASSERT_EQ(backend->layer_tp_size(), f.tp) << what;
    std::string message;
    within_seconds(
        60, [&] { message = test::error_of<DeviceError>([&] { run_scenario(*backend, s); }); });
    test::expect_mentions(
        message, {"TP rank " + std::to_string(f.rank) + " of " + std::to_string(f.tp) + ": ",
                  "injected fault"});
  }
}

// `sparkdraft check --backend cpu --tp N`'s comparison (sparkdraft/check.h): on a
// shape that shards, every line is equal at TP 2, 4 and 8 and the report says the
// layers were sharded; a report with a differing line is not ok.
TEST(TpLayersCheck, CheckTpInvarianceReportsShardedLayersEqualToTp1) {
  const uint64_t seed = 0x7C4ECC;
  SCOPED_TRACE("seed " + std::to_string(seed));
  TempDir dir;
  auto ckpt = checkpoint_of(shardable("muse"), dir, seed);
  ScenarioOptions s;
  s.request_ids = {0, 1, 2};
  s.rounds = 2;
  s.seed = seed;
  for (int tp : {2, 4, 8}) {
    const CheckReport report = check_tp_invariance(ckpt, s, tp);
    EXPECT_TRUE(report.ok()) << report.text();
    // 2 rounds x 3 requests x (tokens, logits) + 2 layers' KV caches.
    EXPECT_EQ(report.lines.size(), 14u) << report.text();
    test::expect_mentions(report.text(), {"TP " + std::to_string(tp) + " vs TP 1", "layers sharded",
                                          "check: all 14 of 14 comparisons bit for bit equal"});
  }
  EXPECT_THROW(check_tp_invariance(ckpt, s, 1), InvalidArgument);
  CheckReport bad = check_tp_invariance(ckpt, s, 2);
  bad.lines[3].equal = false;
  bad.lines[3].detail = "index 0: found 0x1 expected 0x2";
  EXPECT_FALSE(bad.ok());
  test::expect_mentions(bad.text(), {"DIFFERENT", "index 0: found 0x1 expected 0x2",
                                     "check: 13 of 14 comparisons bit for bit equal"});
  EXPECT_FALSE(CheckReport{}.ok()) << "a report without comparisons proves nothing";
}

}  // namespace
}  // namespace sparkdraft
