// common/parallel.h: the ranges cover [0, n) exactly once for any thread count,
// the caller's range runs inline, and a worker's exception reaches the caller.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <stdexcept>
#include <thread>
#include <vector>

#include "common/parallel.h"

namespace sparkdraft {
namespace {

TEST(CpuParallel, RangesCoverEveryIndexOnce) {
  for (int64_t n : {0, 1, 2, 5, 7, 100, 1001})
    for (int threads : {-1, 0, 1, 2, 3, 8}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> calls{0};
      parallel_for(n, threads, [&](int64_t begin, int64_t end) {
        EXPECT_LT(begin, end);
        ++calls;
        for (int64_t i = begin; i < end; ++i) ++hits[static_cast<size_t>(i)];
      });
      for (int64_t i = 0; i < n; ++i)
        ASSERT_EQ(hits[static_cast<size_t>(i)].load(), 1)
            << "n " << n << " threads " << threads << " index " << i;
      const int64_t want_calls = n == 0 ? 0 : std::min<int64_t>(std::max(threads, 1), n);
      EXPECT_EQ(calls.load(), want_calls) << "n " << n << " threads " << threads;
    }
}

TEST(CpuParallel, OneThreadRunsInline) {
  const auto caller = std::this_thread::get_id();
  parallel_for(10, 1, [&](int64_t begin, int64_t end) {
    EXPECT_EQ(std::this_thread::get_id(), caller);
    EXPECT_EQ(begin, 0);
    EXPECT_EQ(end, 10);
  });
}

TEST(CpuParallel, WorkerExceptionIsRethrown) {
  EXPECT_THROW(parallel_for(9, 3,
                            [](int64_t begin, int64_t) {
                              if (begin > 0) throw std::runtime_error("worker failed");
                            }),
               std::runtime_error);
}

}  // namespace
}  // namespace sparkdraft
