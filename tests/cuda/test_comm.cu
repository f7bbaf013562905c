// The single-GPU loopback behind the one communicator interface (comm.h,
// cuda/comm/loopback.h): every rank local, device buffers, collectives on the stream;
// the all-gather places rank k at block k, the all-reduce is the fixed tree of
// contract.md section 6 (written out here), bit for bit, also inside a CUDA graph.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "common/bits.h"
#include "common/random.h"
#include "common/tree.h"
#include "cuda/comm/loopback.h"
#include "cuda/gpu_test_util.h"
#include "cuda/markov/markov.h"
#include "sparkdraft/comm.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

using cuda::DeviceBuffer;
using cuda::DeviceStream;
using cuda::LoopbackComm;

// No device is touched: these run everywhere.
TEST(LoopbackComm, RunsEveryRankLocallyOnDeviceMemory) {
  for (int n : {1, 2, 3, 8}) {
    LoopbackComm comm(n);
    Communicator& c = comm;
    EXPECT_EQ(c.tp_size(), n);
    EXPECT_EQ(c.tp_rank(), 0);
    EXPECT_EQ(c.memory(), CommMemory::device);
    ASSERT_EQ(c.local_ranks().size(), static_cast<size_t>(n));
    for (int r = 0; r < n; ++r) EXPECT_EQ(c.local_ranks()[r], r) << "tp_size " << n;
  }
  EXPECT_THROW(LoopbackComm(0), InvalidArgument);
  // The one-buffer helpers are for one local rank.
  LoopbackComm two(2);
  int x = 0;
  float f = 0.0f;
  EXPECT_THROW(two.all_gather(&x, &x, sizeof x), InvalidArgument);
  EXPECT_THROW(two.all_reduce_sum(&f, 1), InvalidArgument);
}

TEST(LoopbackComm, TheGpuLoopRefusesAHostCommunicator) {
  cuda::MarkovHead head;
  head.vocab = 1024;
  head.markov_rank = 64;
  run_thread_group(1, [&](Communicator& host) {
    try {
      cuda::VocabParallelMarkov loop(head, host, 4, 7);
      ADD_FAILURE() << "a host communicator was accepted";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("host memory"), std::string::npos) << e.what();
    }
  });
}

TEST(LoopbackComm, AllGatherPlacesEachRankInOrder) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  for (int n : {1, 2, 3, 4, 8}) {
    const size_t count = 1000 + n;  // bytes per rank: not a multiple of 16
    std::vector<DeviceBuffer<uint8_t>> sends;
    std::vector<const void*> ptrs;
    std::vector<uint8_t> expected;
    for (int r = 0; r < n; ++r) {
      std::vector<uint8_t> h(count);
      for (size_t i = 0; i < count; ++i) h[i] = static_cast<uint8_t>(r * 37 + i * 11);
      expected.insert(expected.end(), h.begin(), h.end());
      sends.emplace_back(h, stream.get());
      ptrs.push_back(sends.back().data());
    }
    DeviceBuffer<uint8_t> recv(count * n);
    recv.zero(stream.get());
    LoopbackComm comm(n);
    comm.all_gather(ptrs.data(), recv.data(), count, stream.get());
    EXPECT_TRUE(
        test::same_bits(recv.download(stream.get()), expected, {static_cast<int64_t>(count)}))
        << "tp_size " << n << " (row = rank)";
  }
}

TEST(LoopbackComm, AllReduceIsTheFixedTreeOverRanks) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  for (int n : {1, 2, 4, 8}) {
    for (bool graph : {false, true}) {
      const uint64_t seed = 900 + n;
      test::Gen gen(seed);
      const size_t count = 70001;
      std::vector<std::vector<float>> partials = test::tree_partials(gen, n, count);
      partials[0][3] = std::numeric_limits<float>::infinity();
      partials[n - 1][5] = std::numeric_limits<float>::quiet_NaN();
      partials[0][7] = 1e8f;  // order pinned by hand: tree 0, rank order 1 (n = 4)
      if (n == 4) {
        partials[1][7] = 1.0f;
        partials[2][7] = -1e8f;
        partials[3][7] = 1.0f;
      }
      std::vector<float> expected(count);
      int rank_order_differs = 0;
      for (size_t i = 0; i < count; ++i) {
        std::vector<float> p(n);
        for (int r = 0; r < n; ++r) p[r] = partials[r][i];
        expected[i] = test::documented_tree(p);
        float ltr = p[0];
        for (int k = 1; k < n; ++k) ltr = ltr + p[k];
        if (f32_bits(ltr) != f32_bits(expected[i]) && !std::isnan(expected[i]))
          ++rank_order_differs;
      }
      if (n >= 4) ASSERT_GT(rank_order_differs, 100) << "the inputs do not pin the order";
      if (n == 4) ASSERT_EQ(f32_bits(expected[7]), f32_bits(0.0f));

      std::vector<DeviceBuffer<float>> bufs;
      std::vector<float*> ptrs;
      for (int r = 0; r < n; ++r) {
        bufs.emplace_back(partials[r], stream.get());
        ptrs.push_back(bufs.back().data());
      }
      LoopbackComm comm(n);
      if (graph) {
        cudaGraph_t g = nullptr;
        cudaGraphExec_t exec = nullptr;
        SD_CUDA_CHECK(cudaStreamBeginCapture(stream.get(), cudaStreamCaptureModeThreadLocal));
        comm.all_reduce_sum(ptrs.data(), count, stream.get());
        SD_CUDA_CHECK(cudaStreamEndCapture(stream.get(), &g));
        SD_CUDA_CHECK(cudaGraphInstantiate(&exec, g, 0));
        SD_CUDA_CHECK(cudaGraphLaunch(exec, stream.get()));
        stream.synchronize();
        SD_CUDA_CHECK(cudaGraphExecDestroy(exec));
        SD_CUDA_CHECK(cudaGraphDestroy(g));
      } else {
        comm.all_reduce_sum(ptrs.data(), count, stream.get());
      }
      for (int r = 0; r < n; ++r)
        EXPECT_TRUE(test::same_bits(bufs[r].download(stream.get()), expected, {0, true}))
            << "seed " << seed << " tp_size " << n << " rank " << r << (graph ? " in a graph" : "");
    }
  }
}

}  // namespace
}  // namespace sparkdraft
