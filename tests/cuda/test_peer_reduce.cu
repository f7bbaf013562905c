// The fused all-reduce (cuda/comm/peer_reduce.h), its TP ranks on one GPU: every rank a
// PeerAllReduce of its own on its own stream, all launched from this thread (no
// rank's thread makes a device-wide call while a peer waits), with few enough rows
// that every rank's blocks run at once. The plain sum is the fixed tree of the
// ranks' partials bit for bit (canonical_tree_sum on the host), at every rank count
// 1 to 8, odd counts, several calls in a row (the epochs and both parities, counts
// changing between calls), NaN and inf partials, in place; the boundary is
// cpu::residual_boundary on the narrowed tree bit for bit (both residual dtypes,
// plain and norm-preserving, with and without the post-norm, odd widths, 1 row);
// both replay in CUDA graphs; ranks in two processes reach each other through CUDA
// IPC (this binary runs itself as the second rank); a rank whose peer never comes
// stops waiting and check() names the peer; bad setups are refused.
#include <gtest/gtest.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <limits>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/bits.h"
#include "common/errors.h"
#include "common/files.h"
#include "common/random.h"
#include "cuda/comm/peer_reduce.h"
#include "cuda/common/graph.h"
#include "cuda/gpu_test_util.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/reduce.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

using cuda::DeviceBuffer;
using cuda::DeviceStream;
using cuda::PeerAllReduce;
using cuda::PeerEndpoint;
using cuda::PeerReduceOptions;

// tp ranks on the current GPU, connected to each other, a stream each.
struct Group {
  std::vector<std::unique_ptr<PeerAllReduce>> ranks;
  std::vector<DeviceStream> streams;

  Group(int tp, const PeerReduceOptions& o) {
    std::vector<PeerEndpoint> all;
    for (int r = 0; r < tp; ++r) {
      ranks.push_back(std::make_unique<PeerAllReduce>(r, tp, o));
      all.push_back(ranks.back()->endpoint());
      streams.emplace_back();
    }
    for (auto& r : ranks) r->connect(all);
  }
  void synchronize() {
    for (auto& s : streams) s.synchronize();
    for (auto& r : ranks) r->check();
  }
};

// Partials x * 2^e (mixed magnitudes: another order of the adds gives other bits
// from 3 ranks on), with a NaN, an inf and a -inf in place where count allows.
std::vector<std::vector<float>> partials(test::Gen& g, int tp, size_t count) {
  std::vector<std::vector<float>> p(static_cast<size_t>(tp), std::vector<float>(count));
  for (auto& v : p)
    for (float& x : v) x = std::ldexp(g.uniform(-1.0f, 1.0f), static_cast<int>(g.integer(-14, 14)));
  if (count > 7) {
    p[0][3] = std::numeric_limits<float>::quiet_NaN();
    p[static_cast<size_t>(tp - 1)][5] = std::numeric_limits<float>::infinity();
    p[0][7] = -std::numeric_limits<float>::infinity();
  }
  return p;
}

std::vector<float> host_tree(const std::vector<std::vector<float>>& p) {
  const int tp = static_cast<int>(p.size());
  std::vector<float> out(p[0].size()), t(static_cast<size_t>(tp));
  for (size_t i = 0; i < out.size(); ++i) {
    for (int r = 0; r < tp; ++r) t[static_cast<size_t>(r)] = p[static_cast<size_t>(r)][i];
    out[i] = canonical_tree_sum(t.data(), tp);
  }
  return out;
}

TEST(PeerReduce, SumIsTheFixedTreeAtEveryRankCount) {
  SD_REQUIRE_GPU();
  test::Gen g(20261202);
  for (int tp : {1, 2, 3, 4, 5, 8}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    PeerReduceOptions o;
    o.max_count = 70000;
    o.max_slots = 16;
    Group group(tp, o);
    // Several calls in a row: odd counts, one element, a count over several blocks,
    // the same count twice (both parities twice).
    for (size_t count :
         {size_t{37}, size_t{1}, size_t{65537}, size_t{8192}, size_t{8192}, size_t{4099}}) {
      SCOPED_TRACE("count " + std::to_string(count));
      const auto p = partials(g, tp, count);
      const std::vector<float> want = host_tree(p);
      std::vector<DeviceBuffer<float>> data;
      for (int r = 0; r < tp; ++r) data.emplace_back(p[static_cast<size_t>(r)]);
      for (int r = 0; r < tp; ++r)
        group.ranks[static_cast<size_t>(r)]->all_reduce_sum(
            data[static_cast<size_t>(r)].data(), count,
            group.streams[static_cast<size_t>(r)].get());
      group.synchronize();
      for (int r = 0; r < tp; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        EXPECT_TRUE(test::same_bits(data[static_cast<size_t>(r)].download(), want, {0, true}));
      }
    }
  }
}

// Another order of the ranks' adds is caught: at 3 ranks the tree (p0+p1)+p2 and
// p0+(p1+p2) differ on cancelling inputs, so the comparison above can fail.
TEST(PeerReduce, TheTreeOrderIsObservable) {
  const float p[3] = {1.0f, 1e8f, -1e8f};
  float t[3] = {p[0], p[1], p[2]};
  const float tree = canonical_tree_sum(t, 3);
  const float other = p[0] + (p[1] + p[2]);
  EXPECT_NE(f32_bits(tree), f32_bits(other)) << "tree " << tree << ", other order " << other;
}

struct BoundaryCase {
  int tp, rows, hidden;
  StreamDType dtype;
  bool post_norm, alpha_beta;
  NormGain gain;
};

std::string name_of(const BoundaryCase& c) {
  return "tp " + std::to_string(c.tp) + ", rows " + std::to_string(c.rows) + ", hidden " +
         std::to_string(c.hidden) + (c.dtype == StreamDType::f32 ? ", f32" : ", bf16") +
         (c.post_norm ? ", post-norm" : "") + (c.alpha_beta ? ", alpha/beta" : "") + ", gain " +
         std::to_string(static_cast<int>(c.gain));
}

TEST(PeerReduce, BoundaryIsTheNarrowedTreeThenTheBoundary) {
  SD_REQUIRE_GPU();
  test::Gen g(20261203);
  const std::vector<BoundaryCase> cases = {
      {2, 1, 4096, StreamDType::bf16, false, false, NormGain::weight},
      {2, 7, 4096, StreamDType::f32, true, true, NormGain::one_plus_weight},
      {4, 16, 8192, StreamDType::bf16, true, false, NormGain::weight},
      {8, 5, 4096, StreamDType::f32, false, true, NormGain::none},
      {3, 3, 1000, StreamDType::bf16, false, false, NormGain::weight},  // not whole chunks
      {2, 2, 37, StreamDType::f32, true, true, NormGain::weight},       // odd width
      {1, 4, 4096, StreamDType::bf16, false, false, NormGain::weight},
      // Rows of 4 and 8 chunks a thread: the kernel that reads the rank count at run time.
      {2, 3, 16384, StreamDType::f32, true, true, NormGain::weight},
      {4, 2, 32768, StreamDType::bf16, false, false, NormGain::one_plus_weight},
  };
  for (const BoundaryCase& c : cases) {
    SCOPED_TRACE(name_of(c));
    PeerReduceOptions o;
    o.max_count = static_cast<size_t>(16) * 8192;
    o.max_slots = 16;
    Group group(c.tp, o);
    const size_t n = static_cast<size_t>(c.rows) * c.hidden, H = static_cast<size_t>(c.hidden);
    // Two calls, so the second runs the other parity with new partials.
    for (int call = 0; call < 2; ++call) {
      SCOPED_TRACE("call " + std::to_string(call));
      auto p = partials(g, c.tp, n);
      for (auto& v : p)
        for (float& x : v)
          if (std::isfinite(x)) x = std::ldexp(x, -10);  // a branch of sensible size
      const std::vector<float> tree = host_tree(p);
      std::vector<bf16> branch(n);
      for (size_t i = 0; i < n; ++i) branch[i] = to_bf16(tree[i]);
      const std::vector<bf16> post_w = g.bf16s(H, 0.5f, 1.5f), pre_w = g.bf16s(H, 0.5f, 1.5f);
      const std::vector<float> alpha = g.floats(H, 0.5f, 1.0f), beta = g.floats(H, 0.5f, 1.0f);
      const std::vector<float> res32 = g.floats(n, -2.0f, 2.0f);
      std::vector<bf16> res16(n);
      for (size_t i = 0; i < n; ++i) res16[i] = to_bf16(res32[i]);

      // The reference: cpu::residual_boundary on the narrowed tree.
      ops::BoundaryParams hp;
      hp.rows = c.rows;
      hp.hidden = c.hidden;
      hp.residual_dtype = c.dtype;
      hp.post_norm = c.post_norm;
      hp.post_weight = c.post_norm && c.gain != NormGain::none ? post_w.data() : nullptr;
      hp.alpha = c.alpha_beta ? alpha.data() : nullptr;
      hp.beta = c.alpha_beta ? beta.data() : nullptr;
      hp.pre_weight = c.gain != NormGain::none ? pre_w.data() : nullptr;
      hp.gain = c.gain;
      hp.eps = 1e-6f;
      std::vector<float> want32 = res32;
      std::vector<bf16> want16 = res16, want_next(n);
      cpu::residual_boundary(hp, branch.data(),
                             c.dtype == StreamDType::f32 ? static_cast<void*>(want32.data())
                                                         : static_cast<void*>(want16.data()),
                             want_next.data());

      const DeviceBuffer<bf16> d_post(post_w), d_pre(pre_w);
      const DeviceBuffer<float> d_alpha(alpha), d_beta(beta);
      ops::BoundaryParams dp = hp;
      dp.post_weight = hp.post_weight ? d_post.data() : nullptr;
      dp.pre_weight = hp.pre_weight ? d_pre.data() : nullptr;
      dp.alpha = hp.alpha ? d_alpha.data() : nullptr;
      dp.beta = hp.beta ? d_beta.data() : nullptr;
      std::vector<DeviceBuffer<float>> part, r32;
      std::vector<DeviceBuffer<bf16>> r16, next;
      for (int r = 0; r < c.tp; ++r) {
        part.emplace_back(p[static_cast<size_t>(r)]);
        r32.emplace_back(res32);
        r16.emplace_back(res16);
        next.emplace_back(n);
      }
      for (int r = 0; r < c.tp; ++r) {
        const size_t k = static_cast<size_t>(r);
        void* residual = c.dtype == StreamDType::f32 ? static_cast<void*>(r32[k].data())
                                                     : static_cast<void*>(r16[k].data());
        group.ranks[k]->residual_boundary(dp, part[k].data(), residual, next[k].data(),
                                          group.streams[k].get());
      }
      group.synchronize();
      for (int r = 0; r < c.tp; ++r) {
        SCOPED_TRACE("rank " + std::to_string(r));
        const size_t k = static_cast<size_t>(r);
        EXPECT_TRUE(test::same_bits(next[k].download(), want_next, {c.hidden}));
        if (c.dtype == StreamDType::f32)
          EXPECT_TRUE(test::same_bits(r32[k].download(), want32, {c.hidden, true}));
        else
          EXPECT_TRUE(test::same_bits(r16[k].download(), want16, {c.hidden}));
        // The partial is read, never written.
        EXPECT_TRUE(test::same_bits(part[k].download(), p[k], {c.hidden, true}));
      }
    }
  }
}

// Captured once per rank, replayed with new partials: the epochs live on the
// device, so every replay is a new call.
TEST(PeerReduce, ReplaysInCudaGraphs) {
  SD_REQUIRE_GPU();
  test::Gen g(20261204);
  const int tp = 4;
  const size_t count = 20000;
  PeerReduceOptions o;
  o.max_count = count;
  o.max_slots = 8;
  Group group(tp, o);
  std::vector<DeviceBuffer<float>> data;
  for (int r = 0; r < tp; ++r) data.emplace_back(count);
  std::vector<cuda::GraphExec> graphs;
  for (int r = 0; r < tp; ++r) {
    const size_t k = static_cast<size_t>(r);
    graphs.emplace_back(group.streams[k].get(), [&](cudaStream_t s) {
      group.ranks[k]->all_reduce_sum(data[k].data(), count, s);
    });
  }
  for (int replay = 0; replay < 5; ++replay) {
    SCOPED_TRACE("replay " + std::to_string(replay));
    const auto p = partials(g, tp, count);
    for (int r = 0; r < tp; ++r) data[static_cast<size_t>(r)].upload(p[static_cast<size_t>(r)]);
    SD_CUDA_CHECK(cudaDeviceSynchronize());
    for (int r = 0; r < tp; ++r)
      graphs[static_cast<size_t>(r)].launch(group.streams[static_cast<size_t>(r)].get());
    group.synchronize();
    const std::vector<float> want = host_tree(p);
    for (int r = 0; r < tp; ++r)
      EXPECT_TRUE(test::same_bits(data[static_cast<size_t>(r)].download(), want, {0, true}))
          << "rank " << r;
  }
}

// Rank 1 never calls: rank 0 gives up after the timeout, and check() says who it
// waited for; every later call is refused.
TEST(PeerReduce, AMissingPeerIsNamedNotAHang) {
  SD_REQUIRE_GPU();
  PeerReduceOptions o;
  o.max_count = 4096;
  o.max_slots = 4;
  o.timeout_s = 0.2;
  Group group(2, o);
  DeviceBuffer<float> data(std::vector<float>(4096, 1.0f));
  group.ranks[0]->all_reduce_sum(data.data(), 4096, group.streams[0].get());
  group.streams[0].synchronize();
  const std::string e = test::error_of<DeviceError>([&] { group.ranks[0]->check(); });
  test::expect_mentions(e, {"rank 0 of 2", "rank 1's partial", "did not arrive", "out of step"});
  test::expect_mentions(test::error_of<DeviceError>([&] {
                          group.ranks[0]->all_reduce_sum(data.data(), 4096, group.streams[0].get());
                        }),
                        {"did not arrive"});
}

// One rank of the two-process test: its endpoint written to dir/rank<r>.bin, the
// peer's read back (waiting for it), then three sums of the same seeded partials
// both processes draw, each checked against the host tree.
void run_rank_of_two_processes(int r, const std::string& dir) {
  PeerReduceOptions o;
  o.max_count = 20000;
  o.max_slots = 8;
  o.timeout_s = 30;  // processes sharing a GPU take turns: a wait can last a time slice
  PeerAllReduce me(r, 2, o);
  const PeerEndpoint mine = me.endpoint();
  ASSERT_TRUE(mine.ipc) << "this platform gives no CUDA IPC handle";
  {
    const std::string tmp = dir + "/rank" + std::to_string(r) + ".tmp";
    std::ofstream(tmp, std::ios::binary).write(reinterpret_cast<const char*>(&mine), sizeof mine);
    std::filesystem::rename(tmp, dir + "/rank" + std::to_string(r) + ".bin");
  }
  const std::string theirs = dir + "/rank" + std::to_string(1 - r) + ".bin";
  const auto t0 = std::chrono::steady_clock::now();
  while (!std::filesystem::exists(theirs)) {
    ASSERT_LT(std::chrono::steady_clock::now() - t0, std::chrono::seconds(60))
        << "rank " << 1 - r << " never wrote its endpoint";
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  PeerEndpoint peer;
  std::ifstream(theirs, std::ios::binary).read(reinterpret_cast<char*>(&peer), sizeof peer);
  EXPECT_NE(peer.process, mine.process);
  me.connect(r == 0 ? std::vector<PeerEndpoint>{mine, peer}
                    : std::vector<PeerEndpoint>{peer, mine});
  test::Gen g(20261205);
  DeviceStream stream;
  for (size_t count : {size_t{37}, size_t{8192}, size_t{20000}}) {
    SCOPED_TRACE("rank " + std::to_string(r) + ", count " + std::to_string(count));
    const auto p = partials(g, 2, count);
    DeviceBuffer<float> data(p[static_cast<size_t>(r)]);
    me.all_reduce_sum(data.data(), count, stream.get());
    stream.synchronize();
    me.check();
    EXPECT_TRUE(test::same_bits(data.download(), host_tree(p), {0, true}));
  }
}

constexpr const char* kChildDirEnv = "SPARKDRAFT_PEER_CHILD_DIR";

TEST(PeerReduce, RanksInTwoProcessesReachEachOtherThroughIpc) {
  SD_REQUIRE_GPU();
  test::TempDir dir;
  // Rank 1: this binary again, running only the child test below.
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  const std::string filter = "--gtest_filter=PeerReduce.ChildRankOfAnotherProcess";
  std::vector<std::string> env_strings;
  for (char** e = environ; *e; ++e) env_strings.emplace_back(*e);
  env_strings.push_back(std::string(kChildDirEnv) + "=" + dir.path());
  std::vector<char*> envp,
      argv{const_cast<char*>(self.c_str()), const_cast<char*>(filter.c_str()), nullptr};
  for (auto& e : env_strings) envp.push_back(e.data());
  envp.push_back(nullptr);
  pid_t child = 0;
  ASSERT_EQ(posix_spawn(&child, self.c_str(), nullptr, nullptr, argv.data(), envp.data()), 0);
  run_rank_of_two_processes(0, dir.path());
  int status = 0;
  const auto t0 = std::chrono::steady_clock::now();
  while (waitpid(child, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - t0 > std::chrono::seconds(120)) {
      kill(child, SIGKILL);
      waitpid(child, &status, 0);
      FAIL() << "the child rank did not finish within 120 s";
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0)
      << "the child rank failed (its output is above), status " << status;
}

// Rank 1 of the test above; skips unless that test started it.
TEST(PeerReduce, ChildRankOfAnotherProcess) {
  const char* dir = std::getenv(kChildDirEnv);
  if (!dir) GTEST_SKIP() << "the second rank of PeerReduce.RanksInTwoProcesses...: runs only there";
  SD_REQUIRE_GPU();
  run_rank_of_two_processes(1, dir);
}

TEST(PeerReduce, BadSetupsAreRefused) {
  SD_REQUIRE_GPU();
  using test::error_of;
  using test::expect_mentions;
  expect_mentions(error_of<InvalidArgument>([] { PeerAllReduce(0, 9); }), {"9 ranks", "1 to 8"});
  expect_mentions(error_of<InvalidArgument>([] { PeerAllReduce(2, 2); }), {"rank 2 of 2"});
  PeerReduceOptions bad;
  bad.timeout_s = 0;
  expect_mentions(error_of<InvalidArgument>([&] { PeerAllReduce(0, 2, bad); }), {"timeout_s"});
  PeerReduceOptions o;
  o.max_count = 1000;
  o.max_slots = 4;
  PeerAllReduce a(0, 2, o), b(1, 2, o);
  DeviceBuffer<float> data(1000);
  expect_mentions(error_of<InvalidArgument>([&] { a.all_reduce_sum(data.data(), 10, nullptr); }),
                  {"not connected"});
  EXPECT_NE(a.refusal({a.endpoint()}).find("1 endpoints for 2 ranks"), std::string::npos);
  EXPECT_NE(a.refusal({b.endpoint(), a.endpoint()}).find("endpoint 0 is rank 1"),
            std::string::npos);
  PeerEndpoint foreign = b.endpoint();
  foreign.process ^= 1;
  EXPECT_EQ(a.refusal({a.endpoint(), foreign}), "");  // reached through its IPC handles
  foreign.ipc = false;
  EXPECT_NE(a.refusal({a.endpoint(), foreign}).find("another process and has no CUDA IPC"),
            std::string::npos);
  PeerReduceOptions other = o;
  other.max_count = 2000;
  PeerAllReduce c(1, 2, other);
  EXPECT_NE(a.refusal({a.endpoint(), c.endpoint()}).find("max_count"), std::string::npos);
  a.connect({a.endpoint(), b.endpoint()});
  expect_mentions(error_of<InvalidArgument>([&] { a.all_reduce_sum(data.data(), 1001, nullptr); }),
                  {"1001 floats", "built for 1000"});
}

}  // namespace
}  // namespace sparkdraft
