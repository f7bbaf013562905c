// The CPU thread-group communicator: collectives in rank order, errors surface.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "sparkdraft/comm.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

TEST(ThreadGroup, AllGatherPlacesEachRankInOrder) {
  for (int n : {1, 2, 3, 4, 8}) {
    std::vector<std::vector<int>> got(n);
    run_thread_group(n, [&](Communicator& comm) {
      int mine[2] = {comm.rank() * 10, comm.rank() * 10 + 1};
      std::vector<int> all(2 * comm.size());
      for (int rep = 0; rep < 3; ++rep) comm.all_gather(mine, all.data(), sizeof(mine));
      got[comm.rank()] = all;
    });
    for (int r = 0; r < n; ++r)
      for (int k = 0; k < n; ++k) {
        EXPECT_EQ(got[r][2 * k], k * 10) << "n " << n << " rank " << r;
        EXPECT_EQ(got[r][2 * k + 1], k * 10 + 1) << "n " << n << " rank " << r;
      }
  }
}

TEST(ThreadGroup, AllReduceSumsInRankOrder) {
  // 1e8 + 1 - 1e8 in rank order is 0 in fp32; any other order of these three
  // values may give 1 or 0 differently, so the fixed order is observable.
  const float vals[3] = {1e8f, 1.0f, -1e8f};
  std::vector<float> out(3);
  run_thread_group(3, [&](Communicator& comm) {
    float x = vals[comm.rank()];
    comm.all_reduce_sum(&x, 1);
    out[comm.rank()] = x;
  });
  const float expected = (vals[0] + vals[1]) + vals[2];
  for (int r = 0; r < 3; ++r) EXPECT_EQ(out[r], expected) << "rank " << r;
}

TEST(ThreadGroup, AnErrorOnOneRankIsRethrownAndNobodyHangs) {
  EXPECT_THROW(run_thread_group(4,
                                [&](Communicator& comm) {
                                  if (comm.rank() == 2) throw InvalidArgument("rank 2 failed");
                                  comm.barrier();
                                  comm.barrier();
                                }),
               InvalidArgument);
  EXPECT_THROW(run_thread_group(0, [](Communicator&) {}), InvalidArgument);
}

}  // namespace
}  // namespace sparkdraft
