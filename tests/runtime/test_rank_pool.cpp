// RankPool (runtime/rank_pool.h), the persistent TP rank threads of the GPU backend,
// over CPU thread ranks: every job runs once on every rank with working collectives,
// job after job; a job that throws on one rank stops every rank (one waiting in a
// collective, one that finished the job) and run() rethrows the error named by the
// rank, of its type, now and on every later call, within the group's timeout, never
// a hang; the pool joins cleanly with or without jobs.
#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "common/errors.h"
#include "runtime/rank_pool.h"
#include "sparkdraft/comm.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

using Clock = std::chrono::steady_clock;

RankPool::Group thread_group(int tp, double timeout_s = 30.0) {
  return [tp, timeout_s](const RankPool::Serve& serve) { run_thread_group(tp, serve, timeout_s); };
}

TEST(RankPool, EveryJobRunsOnEveryRankWithItsCollectives) {
  for (int tp : {1, 2, 3, 8}) {
    RankPool pool(tp, thread_group(tp));
    EXPECT_EQ(pool.size(), tp);
    for (int job = 0; job < 20; ++job) {
      std::vector<float> sums(static_cast<size_t>(tp), -1.0f);
      std::vector<int> seen(static_cast<size_t>(tp), 0);
      pool.run([&](int r, Communicator& comm) {
        EXPECT_EQ(comm.tp_rank(), r);
        ++seen[static_cast<size_t>(r)];
        float v = static_cast<float>(r + job);
        comm.all_reduce_sum(&v, 1);
        sums[static_cast<size_t>(r)] = v;
      });
      const float want = static_cast<float>(tp * job + tp * (tp - 1) / 2);
      for (int r = 0; r < tp; ++r) {
        EXPECT_EQ(seen[static_cast<size_t>(r)], 1)
            << "tp " << tp << " job " << job << " rank " << r;
        EXPECT_EQ(sums[static_cast<size_t>(r)], want) << "tp " << tp << " job " << job;
      }
    }
  }
}

// Rank 1 throws while rank 0 waits for it in a collective (and ranks 2, 3 finish the
// job without one): every rank stops and the error names rank 1, now and later.
TEST(RankPool, ARankThatThrowsStopsEveryRankAndNamesIt) {
  RankPool pool(4, thread_group(4));
  pool.run([](int, Communicator&) {});  // a job that works first
  const auto t0 = Clock::now();
  const std::string first = test::error_of<InvalidArgument>([&] {
    pool.run([](int r, Communicator& comm) {
      if (r == 1) throw InvalidArgument("bad input on this rank");
      if (r == 0) {
        float v = 1.0f;
        comm.all_reduce_sum(&v, 1);
      }
    });
  });
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10.0)
      << "the ranks should stop at once, not at the group's timeout";
  test::expect_mentions(first, {"TP rank 1 of 4: ", "bad input on this rank"});
  const std::string again =
      test::error_of<InvalidArgument>([&] { pool.run([](int, Communicator&) {}); });
  EXPECT_EQ(again, first) << "a stopped pool refuses every later job with the same error";
}

// A rank busy outside any collective (2 s) while its peer waits in one: the group's
// timeout (0.5 s) ends the wait with an error naming the rank and the collective,
// and the pool stops once the busy rank is done, never a hang.
TEST(RankPool, APeerThatNeverComesTimesOut) {
  RankPool pool(2, thread_group(2, 0.5));
  const std::string message = test::error_of<Error>([&] {
    pool.run([&](int r, Communicator& comm) {
      if (r == 1) {
        std::this_thread::sleep_for(std::chrono::seconds(2));
        return;
      }
      float v = 1.0f;
      comm.all_reduce_sum(&v, 1);
    });
  });
  test::expect_mentions(message, {"TP rank 0 of 2: ", "all_reduce_sum"});
}

TEST(RankPool, JoinsWithoutJobsAndRefusesNoRanks) {
  { RankPool pool(3, thread_group(3)); }
  test::expect_mentions(test::error_of<InvalidArgument>([] { RankPool pool(0, thread_group(1)); }),
                        {"tp_size must be >= 1"});
}

}  // namespace
}  // namespace sparkdraft
