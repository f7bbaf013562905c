// The GPU backend's parts that need no GPU: the graph cache's bookkeeping
// (src/cuda/draft/graph_cache.h, over a stand-in for the executable graph), the plan's
// kernel list of a captured step (src/cuda/draft/step_kernels.h, over stand-in kernel
// pointers) and the one place both backends build a verify call's params
// (ops::verify_params).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "cuda/draft/graph_cache.h"
#include "cuda/draft/step_kernels.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/ops/verify.h"

namespace sparkdraft {
namespace {

// Stands in for GraphExec: move-only, says which capture it came from.
struct FakeExec {
  int id = -1;
  FakeExec() = default;
  explicit FakeExec(int i) : id(i) {}
  FakeExec(FakeExec&&) = default;
  FakeExec& operator=(FakeExec&&) = default;
  FakeExec(const FakeExec&) = delete;
  FakeExec& operator=(const FakeExec&) = delete;
};

using Cache = cuda::GraphCache<FakeExec>;

Cache::Pointers pointers(uintptr_t base) {
  Cache::Pointers p{};
  for (size_t i = 0; i < p.size(); ++i) p[i] = reinterpret_cast<const void*>(base + 16 * i);
  return p;
}

// Stand-in kernels: distinct addresses.
const int kKernels[4] = {0, 1, 2, 3};
const void* K(int i) { return &kKernels[i]; }

TEST(StepKernels, NamesEveryKernelInGraphOrderWithRuns) {
  const std::vector<std::string> names{"embed", "gemm", "gemm", "gemm", "norm", "gemm"};
  const std::vector<const void*> k{K(0), K(1), K(1), K(1), K(2), K(1)};
  const PlanPart p = cuda::step_kernels_part(8, names, k, k, false);
  EXPECT_EQ(p.part, "kernels, 8 rows");
  EXPECT_EQ(p.variant, "6 kernels");
  EXPECT_EQ(p.reason, "embed, gemm x3, norm, gemm");
}

TEST(StepKernels, RefusesAGraphKernelTheLogLacks) {
  const std::vector<std::string> names{"embed", "norm"};
  const std::vector<const void*> logged{K(0), K(2)};
  const std::vector<const void*> nodes{K(0), K(3), K(2)};
  try {
    cuda::step_kernels_part(1, names, logged, nodes, false);
    FAIL() << "a kernel outside the launch log was accepted";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("kernel node 1 of 3 is not in the launch log"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("next kernel is norm"), std::string::npos) << e.what();
  }
  // With a communicator the unlogged node is a collective's kernel.
  const PlanPart p = cuda::step_kernels_part(1, names, logged, nodes, true);
  EXPECT_EQ(p.reason, "embed, collective, norm");
  EXPECT_EQ(p.variant, "3 kernels");
}

TEST(StepKernels, RefusesALoggedKernelTheGraphLacksOrReorders) {
  const std::vector<std::string> names{"embed", "gemm", "norm"};
  const std::vector<const void*> logged{K(0), K(1), K(2)};
  EXPECT_THROW(cuda::step_kernels_part(2, names, logged, {K(0), K(1)}, false), DeviceError);
  EXPECT_THROW(cuda::step_kernels_part(2, names, logged, {K(0), K(2), K(1)}, false), DeviceError);
  EXPECT_THROW(cuda::step_kernels_part(2, names, logged, {K(0), K(2), K(1)}, true), DeviceError);
  EXPECT_THROW(cuda::step_kernels_part(2, {"embed"}, logged, logged, false), DeviceError);
}

TEST(StepKernels, PutPartReplacesTheRowCountsPart) {
  StepPlan plan;
  plan.parts.push_back({"markov loop", "fused", ""});
  cuda::put_part(plan, {"kernels, 8 rows", "3 kernels", "a, b, c"});
  cuda::put_part(plan, {"kernels, 1 rows", "2 kernels", "a, b"});
  cuda::put_part(plan, {"kernels, 8 rows", "2 kernels", "a, c"});
  ASSERT_EQ(plan.parts.size(), 3u);
  EXPECT_EQ(plan.at("kernels, 8 rows").reason, "a, c");
  EXPECT_EQ(plan.at("kernels, 1 rows").variant, "2 kernels");
}

TEST(GraphCache, HostGraphsAreKeptPerRowCount) {
  Cache g;
  EXPECT_EQ(g.find(3), nullptr);
  g.put(3, false, FakeExec(30));
  g.put(5, false, FakeExec(50));
  ASSERT_NE(g.find(3), nullptr);
  EXPECT_EQ(g.find(3)->id, 30);
  ASSERT_NE(g.find(5), nullptr);
  EXPECT_EQ(g.find(5)->id, 50);
  EXPECT_EQ(g.find(4), nullptr);
  EXPECT_EQ(g.size(), 2u);
  EXPECT_EQ(g.bound_size(), 0u);
  EXPECT_EQ(g.put(3, false, FakeExec(31)).id, 31);  // a recapture replaces the row count's graph
  EXPECT_EQ(g.find(3)->id, 31);
  EXPECT_EQ(g.size(), 2u);
  // A batch with per-request lengths (one more kernel) has its own graph per row count.
  EXPECT_EQ(g.find(3, true), nullptr);
  g.put(3, true, FakeExec(32));
  ASSERT_NE(g.find(3, true), nullptr);
  EXPECT_EQ(g.find(3, true)->id, 32);
  EXPECT_EQ(g.find(3)->id, 31) << "the graph without lengths is kept";
  EXPECT_EQ(g.size(), 3u);
}

TEST(GraphCache, BoundGraphsReplayOnlyOnTheirPointers) {
  Cache g;
  const Cache::Pointers a = pointers(0x1000), b = pointers(0x2000);
  EXPECT_EQ(g.find_bound(2, a), nullptr);
  g.put_bound(2, a, FakeExec(1));
  ASSERT_NE(g.find_bound(2, a), nullptr);
  EXPECT_EQ(g.find_bound(2, a)->id, 1);
  EXPECT_EQ(g.find_bound(2, b), nullptr) << "other pointers must not replay a's graph";
  EXPECT_EQ(g.find_bound(3, a), nullptr) << "another row count has no graph yet";
  Cache::Pointers one_moved = a;
  one_moved[7] = reinterpret_cast<const void*>(0x9999);
  EXPECT_EQ(g.find_bound(2, one_moved), nullptr) << "one moved output must not replay it";
  g.put_bound(2, b, FakeExec(2));  // the recapture on b replaces a's graph
  EXPECT_EQ(g.find_bound(2, a), nullptr);
  ASSERT_NE(g.find_bound(2, b), nullptr);
  EXPECT_EQ(g.find_bound(2, b)->id, 2);
  EXPECT_EQ(g.bound_size(), 1u);
  EXPECT_EQ(g.find(2), nullptr) << "the host API's graphs are apart from the bound ones";
  g.put(2, false, FakeExec(7));
  g.clear();
  EXPECT_EQ(g.size(), 0u);
  EXPECT_EQ(g.bound_size(), 0u);
  EXPECT_EQ(g.find(2), nullptr);
  EXPECT_EQ(g.find_bound(2, b), nullptr);
}

TEST(VerifyParams, BuiltFromTheBatchTheConfigAndTheOptions) {
  const ModelConfig c = preset_config("tiny", "qwen3");
  DraftOptions o;
  o.cache_slots = 11;
  const int R = 3, N = c.block_size;
  std::vector<int64_t> tokens(static_cast<size_t>(R) * N), anchors(R), seeds(R), slots(R);
  std::vector<float> temps(R), top_p(R);
  std::vector<int32_t> top_k(R), accepted(R);
  std::vector<bf16> draft_logits(1);
  std::vector<float> target(1);
  std::vector<int64_t> out_tokens(static_cast<size_t>(R) * (N + 1));
  VerifyBatch b;
  b.num_rows = R;
  b.draft_tokens = tokens.data();
  b.anchor_positions = anchors.data();
  b.seeds = seeds.data();
  b.temperatures = temps.data();
  b.top_k = top_k.data();
  b.top_p = top_p.data();
  b.cache_slots = slots.data();
  b.draft_logits = draft_logits.data();
  b.target_logits = target.data();
  b.target_dtype = LogitsDType::f32;
  b.method = VerifyMethod::block;
  const VerifyOutputs out{accepted.data(), out_tokens.data()};
  const ops::VerifyParams p = ops::verify_params(c, o, b, out);
  EXPECT_EQ(p.rows, R);
  EXPECT_EQ(p.n, c.block_size);
  EXPECT_EQ(p.vocab, c.vocab_size);
  EXPECT_EQ(p.cache_rows, 11);
  EXPECT_EQ(p.draft_tokens, tokens.data());
  EXPECT_EQ(p.anchor_positions, anchors.data());
  EXPECT_EQ(p.seeds, seeds.data());
  EXPECT_EQ(p.temperatures, temps.data());
  EXPECT_EQ(p.top_k, top_k.data());
  EXPECT_EQ(p.top_p, top_p.data());
  EXPECT_EQ(p.cache_slots, slots.data());
  EXPECT_EQ(p.draft_logits, draft_logits.data());
  EXPECT_EQ(p.target_logits, static_cast<const void*>(target.data()));
  EXPECT_EQ(p.target_dtype, LogitsDType::f32);
  EXPECT_EQ(p.method, VerifyMethod::block);
  EXPECT_EQ(p.num_accepted, accepted.data());
  EXPECT_EQ(p.tokens, out_tokens.data());
  // The streams' salts stay the contract's (only tests change them).
  EXPECT_EQ(p.accept_salt, kVerifyAcceptSalt);
  EXPECT_EQ(p.draw_salt, kVerifyDrawSalt);
  EXPECT_NO_THROW(p.check());
}

}  // namespace
}  // namespace sparkdraft
