// The CPU thread-group communicator behind the one interface (comm.h): collectives
// in rank order, the all-reduce in the fixed tree of contract.md section 6, errors surface.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/bits.h"
#include "common/errors.h"
#include "common/random.h"
#include "common/tree.h"
#include "sparkdraft/comm.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

// An array of typed buffers must not fall into the one-buffer overload.
template <class P>
concept GathersFrom = requires(Communicator& c, P p) {
  c.all_gather(p, nullptr, size_t{4}, nullptr);
};
static_assert(GathersFrom<const float*>);
static_assert(GathersFrom<const void* const*>);
static_assert(!GathersFrom<float**>);
static_assert(!GathersFrom<const float* const*>);

TEST(ThreadGroup, IsOneHostRankPerThread) {
  for (int n : {1, 2, 3, 4, 8}) {
    std::vector<int> rank_of(n, -1), size_of(n, -1), locals(n, -1);
    std::vector<CommMemory> memory(n, CommMemory::device);
    run_thread_group(n, [&](Communicator& comm) {
      const int r = comm.tp_rank();
      rank_of[r] = r;
      size_of[r] = comm.tp_size();
      locals[r] = static_cast<int>(comm.local_ranks().size());
      memory[r] = comm.memory();
    });
    for (int r = 0; r < n; ++r) {
      EXPECT_EQ(rank_of[r], r) << "n " << n;
      EXPECT_EQ(size_of[r], n) << "n " << n << " rank " << r;
      EXPECT_EQ(locals[r], 1) << "n " << n << " rank " << r;
      EXPECT_EQ(memory[r], CommMemory::host) << "n " << n << " rank " << r;
    }
  }
}

TEST(ThreadGroup, AllGatherPlacesEachRankInOrder) {
  for (int n : {1, 2, 3, 4, 8}) {
    std::vector<std::vector<int>> got(n), got_array(n);
    run_thread_group(n, [&](Communicator& comm) {
      const int r = comm.tp_rank();
      int mine[2] = {r * 10, r * 10 + 1};
      std::vector<int> all(2 * comm.tp_size());
      for (int rep = 0; rep < 3; ++rep) comm.all_gather(mine, all.data(), sizeof(mine));
      got[r] = all;
      // The array form with this rank's one buffer.
      const void* send[1] = {mine};
      std::vector<int> all2(2 * comm.tp_size(), -1);
      comm.all_gather(send, all2.data(), sizeof(mine), nullptr);
      got_array[r] = all2;
    });
    for (int r = 0; r < n; ++r)
      for (int k = 0; k < n; ++k) {
        EXPECT_EQ(got[r][2 * k], k * 10) << "n " << n << " rank " << r;
        EXPECT_EQ(got[r][2 * k + 1], k * 10 + 1) << "n " << n << " rank " << r;
        EXPECT_EQ(got_array[r], got[r]) << "n " << n << " rank " << r;
      }
  }
}

TEST(ThreadGroup, AllReduceIsTheFixedTreeOverRanks) {
  // 1e8 + 1 == 1e8 in fp32 (the ulp at 1e8 is 8), so the tree
  // (1e8 + 1) + (-1e8 + 1) = 0 and rank order ((1e8 + 1) - 1e8) + 1 = 1 differ.
  {
    const float vals[4] = {1e8f, 1.0f, -1e8f, 1.0f};
    std::vector<float> out(4, -1.0f);
    run_thread_group(4, [&](Communicator& comm) {
      float x = vals[comm.tp_rank()];
      comm.all_reduce_sum(&x, 1);
      out[comm.tp_rank()] = x;
    });
    for (int r = 0; r < 4; ++r) EXPECT_EQ(f32_bits(out[r]), f32_bits(0.0f)) << "rank " << r;
    ASSERT_EQ(((vals[0] + vals[1]) + vals[2]) + vals[3], 1.0f) << "the guard of this test";
  }
  // Seeded partials of mixed magnitude; every rank must get the tree's bits, and
  // the inputs are such that rank order or reversed order would be caught.
  for (int n : {1, 2, 3, 4, 8}) {
    const uint64_t seed = 700 + n;
    test::Gen gen(seed);
    const size_t count = 257;
    std::vector<std::vector<float>> partials = test::tree_partials(gen, n, count);
    partials[0][3] = std::numeric_limits<float>::infinity();  // inf and NaN pass through the tree
    if (n > 1) partials[1][3] = -std::numeric_limits<float>::infinity();
    partials[n - 1][5] = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> expected(count);
    int rank_order_differs = 0, reversed_differs = 0;
    for (size_t i = 0; i < count; ++i) {
      std::vector<float> p(n);
      for (int r = 0; r < n; ++r) p[r] = partials[r][i];
      expected[i] = test::documented_tree(p);
      float ltr = p[0], rev = p[n - 1];
      for (int k = 1; k < n; ++k) ltr = ltr + p[k];
      for (int k = n - 2; k >= 0; --k) rev = rev + p[k];
      if (f32_bits(ltr) != f32_bits(expected[i]) && !std::isnan(expected[i])) ++rank_order_differs;
      if (f32_bits(rev) != f32_bits(expected[i]) && !std::isnan(expected[i])) ++reversed_differs;
    }
    if (n >= 4) {
      ASSERT_GT(rank_order_differs, 10) << "n " << n << ": the inputs do not pin the order";
      ASSERT_GT(reversed_differs, 10) << "n " << n << ": the inputs do not pin the order";
    }
    std::vector<std::vector<float>> got = partials;
    run_thread_group(n, [&](Communicator& comm) {
      for (int rep = 0; rep < 2; ++rep) {
        std::vector<float> mine = partials[comm.tp_rank()];
        float* data[1] = {mine.data()};
        if (rep == 0)
          comm.all_reduce_sum(data, count, nullptr);
        else
          comm.all_reduce_sum(mine.data(), count);
        got[comm.tp_rank()] = mine;
      }
    });
    for (int r = 0; r < n; ++r)
      EXPECT_TRUE(test::same_bits(got[r], expected, {0, true}))
          << "seed " << seed << " tp_size " << n << " rank " << r;
  }
}

TEST(ThreadGroup, HostCollectivesRefuseAStream) {
  int stream_stand_in = 0;
  EXPECT_THROW(run_thread_group(2,
                                [&](Communicator& comm) {
                                  float x = 1.0f;
                                  comm.all_reduce_sum(&x, 1, &stream_stand_in);
                                }),
               InvalidArgument);
  EXPECT_THROW(run_thread_group(1,
                                [&](Communicator& comm) {
                                  int x = 1, y = 0;
                                  comm.all_gather(&x, &y, sizeof x, &stream_stand_in);
                                }),
               InvalidArgument);
}

TEST(ThreadGroup, AnErrorOnOneRankIsRethrownAndNobodyHangs) {
  EXPECT_THROW(run_thread_group(4,
                                [&](Communicator& comm) {
                                  if (comm.tp_rank() == 2) throw InvalidArgument("rank 2 failed");
                                  comm.barrier();
                                  comm.barrier();
                                }),
               InvalidArgument);
  EXPECT_THROW(run_thread_group(0, [](Communicator&) {}), InvalidArgument);
}

// The rethrown error names the rank that failed and keeps its type, also when the
// others were waiting inside an all-reduce; one rank alone is not renamed.
TEST(ThreadGroup, TheErrorNamesTheRankThatFailed) {
  const std::string msg = test::error_of<ConfigError>([] {
    run_thread_group(4, [](Communicator& comm) {
      if (comm.tp_rank() == 3) throw ConfigError("bad shard");
      float x = 1.0f;
      comm.all_reduce_sum(&x, 1);
    });
  });
  EXPECT_EQ(msg, "TP rank 3 of 4: bad shard");
  const std::string other = test::error_of<Error>([] {
    run_thread_group(2, [](Communicator& comm) {
      if (comm.tp_rank() == 1) throw std::runtime_error("not ours");
      comm.barrier();
    });
  });
  EXPECT_EQ(other, "TP rank 1 of 2: not ours");
  EXPECT_EQ(test::error_of<InvalidArgument>(
                [] { run_thread_group(1, [](Communicator&) { throw InvalidArgument("alone"); }); }),
            "alone");
}

// Waits on peers never hang: ranks waiting in a collective that another rank never
// calls fail as soon as that rank returns; a rank stuck elsewhere is reported
// after the timeout. Either error names the collective and the missing rank.
TEST(ThreadGroup, ARankThatSkipsACollectiveFailsTheOthersAtOnce) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = test::error_of<Error>([] {
    run_thread_group(4, [](Communicator& comm) {
      float x = 1.0f;
      comm.all_reduce_sum(&x, 1);
      if (comm.tp_rank() != 1) comm.barrier();  // rank 1 returns without it
    });
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  // Whichever waiting rank fails first stops the others; its error is the one rethrown.
  test::expect_mentions(msg, {" of 4: collective 2 (barrier)", "waits for", " rank 1,",
                              "returned without calling it"});
  EXPECT_EQ(msg.find("TP rank 1 "), std::string::npos) << msg;
  EXPECT_LT(s, 5.0) << "the waiting ranks must not wait for the timeout";
}

TEST(ThreadGroup, AStuckRankIsReportedAfterTheTimeout) {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string msg = test::error_of<Error>([] {
    run_thread_group(
        4,
        [](Communicator& comm) {
          if (comm.tp_rank() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(1000));
          float x = 1.0f;
          comm.all_reduce_sum(&x, 1);
        },
        0.2);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  test::expect_mentions(msg, {" of 4: collective 1 (all_reduce_sum)", "waits for", " rank 1,",
                              "did not come within 0.2 s"});
  EXPECT_EQ(msg.find("TP rank 1 "), std::string::npos) << msg;
  EXPECT_GE(s, 0.2);
  EXPECT_LT(s, 10.0);
  for (double bad : {0.0, -1.0, std::numeric_limits<double>::infinity(),
                     std::numeric_limits<double>::quiet_NaN()})
    EXPECT_THROW(run_thread_group(
                     2, [](Communicator&) {}, bad),
                 InvalidArgument)
        << bad;
}

}  // namespace
}  // namespace sparkdraft
