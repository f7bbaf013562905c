// Tensor parallelism of the GPU backend (contract.md section 6): TP ranks that each hold
// their heads, intermediate columns, canonical K slices of o_proj and down_proj, KV
// heads and vocabulary shard give TP 1's bits at TP 2, 4 and 8: draft tokens, the
// draft-logits cache, every KV cache and every rank's final hidden states, round
// after round (cuda::check_tp). On one GPU the ranks share the device as threads
// (cuda/shared_device_comm.h); with two GPUs or more, one GPU a rank over NCCL. The
// ranks' o_proj all-reduce is TP 1's slice tree bit for bit, and a rank holding
// another rank's K slices (another order of the tree) is caught on cancelling
// inputs; a draft whose ranks hold their shards out of order fails the comparison. The refusals of
// make_cuda_backend and of a rank without a communicator name what is wrong.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "check/check_draft.h"
#include "common/bits.h"
#include "common/errors.h"
#include "common/files.h"
#include "common/random.h"
#include "common/tp_model.h"
#include "cuda/comm/peer_reduce.h"
#include "cuda/gpu_test_util.h"
#include "cuda/kernels.h"
#include "sparkdraft/check.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/comm.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/draft.h"
#include "sparkdraft/cuda/shared_device_comm.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/error.h"
#include "sparkdraft/scenario.h"

namespace sparkdraft {
namespace {

using test::TempDir;

using test::checkpoint_of;
using test::shardable;

// `requests` requests over `rounds` rounds, with a padding row before the last one.
ScenarioOptions scenario_of(int requests, int rounds, uint64_t seed) {
  ScenarioOptions s;
  s.request_ids.clear();
  for (int r = 0; r < requests; ++r) s.request_ids.push_back(r);
  s.padding_before = {requests > 1 ? requests - 1 : 0};
  s.rounds = rounds;
  s.seed = seed;
  return s;
}

template <class E, class F>
void expect_refusal(F&& f, const std::vector<std::string>& needles) {
  test::expect_mentions(test::error_of<E>(std::forward<F>(f)), needles);
}

TEST(CudaTp, SharedDeviceRanksEqualTp1BitForBit) {
  SD_REQUIRE_GPU();
  for (const std::string style : {"qwen3", "muse"}) {
    TempDir dir;
    const uint64_t seed = 0x7B01 + (style == "muse");
    auto ckpt = checkpoint_of(shardable(style), dir, seed);
    const ScenarioOptions s = scenario_of(3, 3, seed);
    for (int tp : {2, 4, 8}) {
      SCOPED_TRACE(style + " checkpoint seed " + std::to_string(seed) + " tp " +
                   std::to_string(tp));
      const CheckReport report = cuda::check_tp(ckpt, s, tp, {0});
      EXPECT_TRUE(report.ok()) << report.text();
      test::expect_mentions(report.text(),
                            {"layers+vocab", "hidden states, rank " + std::to_string(tp - 1)});
      std::printf("[tp] %s tp %d: %zu comparisons equal\n", style.c_str(), tp, report.lines.size());
    }
  }
}

// The tiny preset's layers do not split over 4 ranks (2 KV heads): they stay
// replicated, the vocabulary still shards, and the bits are TP 1's.
TEST(CudaTp, ReplicatedLayersWithVocabShardsEqualTp1) {
  SD_REQUIRE_GPU();
  TempDir dir;
  auto ckpt = checkpoint_of(preset_config("tiny", "qwen3"), dir, 0x7B03);
  const CheckReport report = cuda::check_tp(ckpt, scenario_of(2, 2, 0x7B03), 4, {0});
  EXPECT_TRUE(report.ok()) << report.text();
  test::expect_mentions(report.text(), {"vocab: 4 ranks: the layers replicated", "KV heads"});
}

// Rank r runs the shard of rank perm[r] (its heads, K slices and vocabulary), placed
// at position r of every collective: the tree over the ranks then adds the slices in
// another order, and the vocabulary shards arrive out of order.
class ShuffledComm final : public Communicator {
 public:
  ShuffledComm(Communicator& inner, const std::vector<int>& perm)
      : inner_(inner), local_{perm[static_cast<size_t>(inner.tp_rank())]} {}
  int tp_size() const override { return inner_.tp_size(); }
  const std::vector<int>& local_ranks() const override { return local_; }
  CommMemory memory() const override { return inner_.memory(); }
  bool graph_capturable() const override { return inner_.graph_capturable(); }
  void reserve_reduce(size_t count) override { inner_.reserve_reduce(count); }
  using Communicator::all_gather;
  using Communicator::all_reduce_sum;
  void all_gather(const void* const* send, void* recv, size_t bytes, void* stream) override {
    inner_.all_gather(send, recv, bytes, stream);
  }
  void all_reduce_sum(float* const* data, size_t count, void* stream) override {
    inner_.all_reduce_sum(data, count, stream);
  }
  void barrier() override { inner_.barrier(); }

 private:
  Communicator& inner_;
  std::vector<int> local_;
};

// The draft with its ranks' shards out of order: the vocabulary shards of the cache
// arrive in the wrong places, so the comparison with TP 1 fails (the check can fail).
TEST(CudaTp, RanksFedAnotherShardOrderFailTheComparison) {
  SD_REQUIRE_GPU();
  TempDir dir;
  const uint64_t seed = 0x7B04;
  auto ckpt = checkpoint_of(shardable("qwen3"), dir, seed);
  const ScenarioOptions s = scenario_of(2, 1, seed);
  DraftOptions o = scenario_draft_options(ckpt->config(), s);
  std::vector<ScenarioRound> want;
  {
    cuda::CudaDraft tp1(ckpt, o);
    want = run_scenario(tp1, s);
  }
  o.tp = 4;
  const std::vector<int> perm = {0, 2, 1, 3};
  std::vector<ScenarioRound> found;
  run_thread_group(4, [&](Communicator& host) {
    cuda::SharedDeviceComm shared(host, 0);
    ShuffledComm shuffled(shared, perm);
    cuda::CudaDraft rank(ckpt, o, {}, &shuffled);
    std::vector<ScenarioRound> rounds = run_scenario(rank, s);
    if (host.tp_rank() == 0) found = std::move(rounds);
  });
  SCOPED_TRACE("checkpoint seed " + std::to_string(seed));
  CheckReport report;
  compare_check_sides(report, CheckSide{want, {}}, CheckSide{found, {}}, "tp 1 vs shuffled tp 4");
  EXPECT_FALSE(report.ok()) << report.text();
  test::expect_mentions(report.text(), {"DIFFERENT", "draft logits"});
}

using Cancelling = test::CancellingSlices;

// What the rank at position r of `tp` computes for o_proj when it holds the K
// columns of rank shard_of[r]: its slices' subtree (cuda::gemm_f32), the tree over
// the ranks (SharedDeviceComm::all_reduce_sum), one rounding (cuda::narrow): the
// GPU op table's gemm_all_reduce. Returns rank 0's result.
std::vector<bf16> all_reduce_gemm(const Cancelling& p, int tp, const std::vector<int>& shard_of) {
  std::vector<bf16> y;
  run_thread_group(tp, [&](Communicator& host) {
    cuda::SharedDeviceComm comm(host, 0);
    cuda::DeviceStream stream;
    const int r = shard_of[static_cast<size_t>(host.tp_rank())], Kl = p.K / tp;
    std::vector<bf16> w_shard(static_cast<size_t>(p.N) * Kl);
    for (int n = 0; n < p.N; ++n)
      for (int k = 0; k < Kl; ++k) w_shard[n * Kl + k] = p.w[n * p.K + r * Kl + k];
    cuda::DeviceBuffer<bf16> x(p.x), w(w_shard), out(static_cast<size_t>(p.M) * p.N);
    cuda::DeviceBuffer<float> sum(static_cast<size_t>(p.M) * p.N);
    cuda::gemm(ops::gemm_f32_of(x.data() + r * Kl, p.K, w.data(), 0, p.M, p.N, Kl, sum.data(), p.N,
                                8 / tp),
               stream.get());
    comm.all_reduce_sum(sum.data(), sum.size(), stream.get());
    cuda::narrow(sum.data(), static_cast<int64_t>(sum.size()), out.data(), stream.get());
    std::vector<bf16> mine = out.download(stream.get());
    if (host.tp_rank() == 0) y = std::move(mine);
  });
  return y;
}

// TP 1's o_proj (cuda::gemm, 8 canonical slices) == the ranks' all-reduce at TP 2, 4
// and 8, bit for bit; a rank holding another rank's columns changes the order of the
// tree and is caught on the cancelling inputs.
TEST(CudaTp, AllReduceGemmIsTp1sTreeAndCatchesAnotherOrder) {
  SD_REQUIRE_GPU();
  const uint64_t seed = 0x7B07;
  test::Gen gen(seed);
  for (int M : {7, 9}) {
    const Cancelling p(gen, M, 48, 8 * 64);
    cuda::DeviceStream stream;
    cuda::DeviceBuffer<bf16> x(p.x), w(p.w), y(static_cast<size_t>(M) * p.N);
    cuda::gemm(ops::gemm_of(x.data(), p.K, w.data(), M, p.N, p.K, y.data(), p.N, 8), stream.get());
    const std::vector<bf16> want = y.download(stream.get());
    for (int tp : {2, 4, 8}) {
      SCOPED_TRACE("seed " + std::to_string(seed) + " M " + std::to_string(M) + " tp " +
                   std::to_string(tp));
      std::vector<int> in_order(static_cast<size_t>(tp));
      for (int r = 0; r < tp; ++r) in_order[static_cast<size_t>(r)] = r;
      EXPECT_TRUE(test::same_bits(all_reduce_gemm(p, tp, in_order), want, {p.N}));
      if (tp == 2) continue;  // two partials add the same either way round
      std::vector<int> swapped = in_order;
      std::swap(swapped[1], swapped[2]);  // (p0+p2)+(p1+p3) where the tree is (p0+p1)+(p2+p3)
      const CheckLine line = compare_bf16("swapped", all_reduce_gemm(p, tp, swapped), want);
      EXPECT_FALSE(line.equal) << "ranks 1 and 2 swapped their slices and the bits did not change";
    }
  }
}

// One GPU a rank over NCCL: the fused peer boundary (what auto picks there) and the
// eager all-gather both give TP 1's bits, in a CUDA graph.
TEST(CudaTp, NcclOneGpuPerRankEqualsTp1BitForBit) {
  SD_REQUIRE_GPUS(2);
  TempDir dir;
  const uint64_t seed = 0x7B05;
  auto ckpt = checkpoint_of(shardable("muse"), dir, seed);
  for (cuda::TpReduce reduce : {cuda::TpReduce::automatic, cuda::TpReduce::eager}) {
    SCOPED_TRACE(std::string("tp_reduce ") + cuda::to_string(reduce));
    const CheckReport report = cuda::check_tp(ckpt, scenario_of(3, 3, seed), 2, {}, reduce);
    EXPECT_TRUE(report.ok()) << report.text();
    test::expect_mentions(report.text(),
                          {"layers+vocab", "cuda graph on",
                           reduce == cuda::TpReduce::eager ? "not fused: tp_reduce eager"
                                                           : "the fused peer boundary"});
  }
}

// The fused peer boundary with the ranks sharing one GPU (tp_reduce fused; auto
// picks the all-gather there): TP 1's bits at TP 2 and 4. It needs eager module
// loading; under lazy loading the refusal says so and the test skips after checking it.
TEST(CudaTp, FusedPeerBoundaryOnOneGpuEqualsTp1BitForBit) {
  SD_REQUIRE_GPU();
  TempDir dir;
  const uint64_t seed = 0x7B06;
  auto ckpt = checkpoint_of(shardable("qwen3"), dir, seed);
  const ScenarioOptions s = scenario_of(3, 3, seed);
  if (cuda::module_loading_is_lazy()) {
    expect_refusal<InvalidArgument>(
        [&] { (void)cuda::check_tp(ckpt, s, 2, {0}, cuda::TpReduce::fused); },
        {"tp_reduce fused", "CUDA_MODULE_LOADING=EAGER"});
    GTEST_SKIP() << "CUDA loads kernels lazily here: the fused boundary on one shared GPU was "
                    "refused as it should be; run with CUDA_MODULE_LOADING=EAGER to run it";
  }
  for (int tp : {2, 4}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    const CheckReport report = cuda::check_tp(ckpt, s, tp, {0}, cuda::TpReduce::fused);
    EXPECT_TRUE(report.ok()) << report.text();
    test::expect_mentions(report.text(), {"layers+vocab", "the fused peer boundary"});
    std::printf("[tp] fused boundary tp %d on one GPU: %zu comparisons equal\n", tp,
                report.lines.size());
  }
  // auto keeps the all-gather on a shared GPU, and says why.
  const CheckReport automatic = cuda::check_tp(ckpt, s, 2, {0});
  EXPECT_TRUE(automatic.ok()) << automatic.text();
  test::expect_mentions(automatic.text(), {"not fused: the ranks share one GPU"});
}

TEST(CudaTp, BadRankSetupsAreRefused) {
  SD_REQUIRE_GPU();
  TempDir dir;
  auto ckpt = checkpoint_of(shardable("qwen3"), dir, 0x7B06);
  DraftOptions o;
  o.tp = 2;
  expect_refusal<InvalidArgument>([&] { cuda::CudaDraft d(ckpt, o); },
                                  {"CudaDraft runs one TP rank", "tp 2", "communicator"});
  expect_refusal<InvalidArgument>(
      [&] {
        cuda::make_cuda_backend(ckpt, o, {}, {0, 0, 0});
      },
      {"3 devices for tp 2"});
  expect_refusal<InvalidArgument>(
      [&] {
        cuda::make_cuda_backend(ckpt, o, {}, {0, 4096});
      },
      {"device 4096 does not exist"});
  if (test::gpu_count() < 2)
    expect_refusal<InvalidArgument>([&] { cuda::make_cuda_backend(ckpt, o); },
                                    {"tp 2 needs 2 GPUs", "--devices 0"});
  cuda::CudaDraftOptions eager;
  eager.fused_markov = false;
  expect_refusal<InvalidArgument>([&] { cuda::make_cuda_backend(ckpt, o, eager, {0}); },
                                  {"fused only"});
  o.tp = 3;
  expect_refusal<InvalidArgument>([&] { cuda::make_cuda_backend(ckpt, o, {}, {0}); }, {"tp"});
}

}  // namespace
}  // namespace sparkdraft
