// The NCCL communicator behind the one communicator interface (comm.h,
// cuda/nccl_comm.h): one rank per GPU. With one GPU a one-rank communicator gives
// the loopback's bits (eager and in a CUDA graph), through both constructors, and
// the gathered tree (the second half of all_reduce_sum) is checked at every rank
// count; with n >= 2 GPUs, ranks 0..n-1: the all-gather is the concatenation, the
// all-reduce the fixed tree of contract.md section 6 (written out here, with inputs on
// which rank order would differ), eager and in a graph; a rank that throws stops
// the group with its error (naming it) instead of hanging, a collective that not
// every rank calls times out, and a count above the capacity is refused.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <iostream>
#include <limits>
#include <mutex>
#include <regex>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "common/bits.h"
#include "common/errors.h"
#include "common/random.h"
#include "common/tree.h"
#include "cuda/comm/gathered_tree.h"
#include "cuda/comm/loopback.h"
#include "cuda/common/graph.h"
#include "cuda/gpu_test_util.h"
#include "sparkdraft/comm.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/reduce.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/error.h"

#if defined(SPARKDRAFT_HAVE_NCCL)
#include "sparkdraft/cuda/nccl_comm.h"
#endif

namespace sparkdraft {
namespace {

using cuda::DeviceBuffer;
using cuda::DeviceStream;

// The tree of contract.md section 6 over n partials, as the tests write it: by hand up
// to 8 ranks (common/tree.h), canonical_tree_sum beyond.
float host_tree(std::vector<float> p) {
  if (p.size() <= 8) return test::documented_tree(p);
  return canonical_tree_sum(p.data(), static_cast<int>(p.size()));
}

// Per element: the tree over ranks, and how many elements rank order (((p0 + p1) +
// p2) + ...) would get wrong (NaN results aside).
struct TreeExpectation {
  std::vector<float> sums;
  int rank_order_differs = 0;
};

TreeExpectation expected_tree(const std::vector<std::vector<float>>& partials) {
  const int n = static_cast<int>(partials.size());
  const size_t count = partials[0].size();
  TreeExpectation e;
  e.sums.resize(count);
  std::vector<float> p(static_cast<size_t>(n));
  for (size_t i = 0; i < count; ++i) {
    for (int r = 0; r < n; ++r) p[r] = partials[r][i];
    e.sums[i] = host_tree(p);
    float ltr = p[0];
    for (int k = 1; k < n; ++k) ltr = ltr + p[k];
    if (f32_bits(ltr) != f32_bits(e.sums[i]) && !std::isnan(e.sums[i])) ++e.rank_order_differs;
  }
  return e;
}

// Seeded partials (common/tree.h) with an infinity and a NaN, and, from 4 ranks,
// one element pinned by hand: tree 0, rank order 1.
std::vector<std::vector<float>> seeded_partials(uint64_t seed, int n, size_t count) {
  test::Gen gen(seed);
  std::cout << "[ seed     ] " << seed << " (" << n << " ranks x " << count << " partials)\n";
  std::vector<std::vector<float>> partials = test::tree_partials(gen, n, count);
  partials[0][3] = std::numeric_limits<float>::infinity();
  partials[n - 1][5] = std::numeric_limits<float>::quiet_NaN();
  if (n >= 4) {
    partials[0][7] = 1e8f;
    partials[1][7] = 1.0f;
    partials[2][7] = -1e8f;
    partials[3][7] = 1.0f;
    for (int r = 4; r < n; ++r) partials[r][7] = 0.0f;
  }
  return partials;
}

// ---- the gathered tree: every rank count on one GPU ----

TEST(NcclComm, GatheredTreeIsTheFixedTreeAtEveryRankCount) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  for (int n : {1, 2, 3, 4, 5, 6, 7, 8, 12, 16}) {
    const uint64_t seed = 4100 + n;
    const size_t count = 70001;
    const std::vector<std::vector<float>> partials = seeded_partials(seed, n, count);
    const TreeExpectation e = expected_tree(partials);
    // At 1 to 3 ranks the tree is the rank order ((p0 + p1) + p2): nothing to pin.
    if (n >= 4) ASSERT_GT(e.rank_order_differs, 100) << "the inputs do not pin the order, n " << n;
    if (n >= 4) ASSERT_EQ(f32_bits(e.sums[7]), f32_bits(0.0f));
    std::vector<float> gathered;
    for (const auto& p : partials) gathered.insert(gathered.end(), p.begin(), p.end());
    DeviceBuffer<float> d_gathered(gathered, stream.get()), out(count);
    out.zero(stream.get());
    cuda::gathered_tree_sum(d_gathered.data(), out.data(), n, count, stream.get());
    EXPECT_TRUE(test::same_bits(out.download(stream.get()), e.sums, {0, true}))
        << "seed " << seed << " ranks " << n;
  }
  DeviceBuffer<float> one(1);
  EXPECT_THROW(cuda::gathered_tree_sum(one.data(), one.data(), 0, 1, nullptr), InvalidArgument);
  EXPECT_THROW(
      cuda::gathered_tree_sum(one.data(), one.data(), cuda::kMaxGatheredRanks + 1, 1, nullptr),
      InvalidArgument);
}

#if defined(SPARKDRAFT_HAVE_NCCL)

using cuda::NcclComm;
using cuda::NcclOptions;
using cuda::run_nccl_group;

std::vector<int> first_devices(int n) {
  std::vector<int> d(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) d[static_cast<size_t>(r)] = r;
  return d;
}

// One rank's queued collective, eagerly or as a captured graph replayed once
// (the eager call comes first either way: NCCL connects on first use).
template <class Queue>
void run_queued(const DeviceStream& stream, bool graph, Queue queue) {
  if (graph) {
    const cuda::GraphExec exec(stream.get(), [&](cudaStream_t s) { queue(s); });
    exec.launch(stream.get());
    stream.synchronize();  // before the graph is destroyed
  } else {
    queue(stream.get());
    stream.synchronize();
  }
}

// ---- no GPU needed ----

TEST(NcclComm, ReportsTheRuntimeVersion) {
  const std::string v = cuda::nccl_version();
  EXPECT_TRUE(std::regex_match(v, std::regex(R"(\d+\.\d+\.\d+)"))) << v;
  EXPECT_EQ(v.substr(0, v.find('.')), std::to_string(NCCL_MAJOR)) << v;
}

TEST(NcclComm, NvlinkMulticastIsNeverUsed) {
  const char* before = std::getenv("NCCL_NVLS_ENABLE");
  const std::string saved = before != nullptr ? before : "";
  ASSERT_EQ(::setenv("NCCL_NVLS_ENABLE", "1", 1), 0);
  test::expect_mentions(
      test::error_of<InvalidArgument>([] { run_nccl_group({0}, [](NcclComm&) {}); }),
      {"NCCL_NVLS_ENABLE=1", "NVLink multicast"});
  // Unset, the runner sets it to 0 (before anything else is checked).
  ASSERT_EQ(::unsetenv("NCCL_NVLS_ENABLE"), 0);
  EXPECT_THROW(run_nccl_group({}, [](NcclComm&) {}), InvalidArgument);
  ASSERT_NE(std::getenv("NCCL_NVLS_ENABLE"), nullptr);
  EXPECT_EQ(std::string(std::getenv("NCCL_NVLS_ENABLE")), "0");
  if (!saved.empty()) ::setenv("NCCL_NVLS_ENABLE", saved.c_str(), 1);
  EXPECT_TRUE(saved.empty() || saved == "0") << "this process ran with NCCL_NVLS_ENABLE=" << saved;
}

TEST(NcclComm, RefusesABadGroup) {
  test::expect_mentions(
      test::error_of<InvalidArgument>([] { run_nccl_group({}, [](NcclComm&) {}); }),
      {"no devices"});
  test::expect_mentions(
      test::error_of<InvalidArgument>([] { run_nccl_group({-1}, [](NcclComm&) {}); }),
      {"device -1", "does not exist"});
  NcclOptions o;
  o.timeout_s = 0;
  test::expect_mentions(test::error_of<InvalidArgument>([&] {
                          run_nccl_group(
                              {0}, [](NcclComm&) {}, o);
                        }),
                        {"timeout_s"});
  if (test::gpu_count() >= 1)
    test::expect_mentions(test::error_of<InvalidArgument>([] {
                            run_nccl_group({0, 0}, [](NcclComm&) {});
                          }),
                          {"device 0", "one GPU per rank"});
  EXPECT_THROW(NcclComm(nullptr), InvalidArgument);
}

// ---- one GPU: a one-rank communicator is the loopback, bit for bit ----

// all_gather and all_reduce_sum of one rank on `comm` against LoopbackComm(1),
// eager and in a graph.
void expect_one_rank_is_the_loopback(NcclComm& comm, uint64_t seed) {
  SCOPED_TRACE("seed " + std::to_string(seed));
  ASSERT_EQ(comm.tp_size(), 1);
  ASSERT_EQ(comm.tp_rank(), 0);
  EXPECT_EQ(comm.memory(), CommMemory::device);
  cuda::LoopbackComm loop(1);
  DeviceStream stream;
  test::Gen gen(seed);
  for (bool graph : {false, true}) {
    const size_t bytes = 1003;
    std::vector<uint8_t> h(bytes);
    for (auto& b : h) b = static_cast<uint8_t>(gen.integer(0, 255));
    DeviceBuffer<uint8_t> send(h, stream.get()), recv_nccl(bytes), recv_loop(bytes);
    recv_nccl.zero(stream.get());
    recv_loop.zero(stream.get());
    if (graph)  // warm up eagerly first
      run_queued(stream, false,
                 [&](cudaStream_t s) { comm.all_gather(send.data(), recv_nccl.data(), bytes, s); });
    run_queued(stream, graph,
               [&](cudaStream_t s) { comm.all_gather(send.data(), recv_nccl.data(), bytes, s); });
    loop.all_gather(send.data(), recv_loop.data(), bytes, stream.get());
    EXPECT_TRUE(test::same_bits(recv_nccl.download(stream.get()), recv_loop.download(stream.get())))
        << "all_gather" << (graph ? " in a graph" : "");

    const size_t count = 20001;
    std::vector<float> partials = test::tree_partials(gen, 1, count)[0];
    partials[3] = std::numeric_limits<float>::infinity();
    partials[5] = std::numeric_limits<float>::quiet_NaN();
    partials[6] = -0.0f;
    DeviceBuffer<float> nccl_data(partials, stream.get()), loop_data(partials, stream.get());
    if (graph)
      run_queued(stream, false,
                 [&](cudaStream_t s) { comm.all_reduce_sum(nccl_data.data(), count, s); });
    run_queued(stream, graph,
               [&](cudaStream_t s) { comm.all_reduce_sum(nccl_data.data(), count, s); });
    loop.all_reduce_sum(loop_data.data(), count, stream.get());
    if (graph) loop.all_reduce_sum(loop_data.data(), count, stream.get());
    EXPECT_TRUE(test::same_bits(nccl_data.download(stream.get()), loop_data.download(stream.get())))
        << "all_reduce_sum" << (graph ? " in a graph" : "");
  }
  comm.barrier();
}

TEST(NcclComm, OneRankGivesTheLoopbacksBits) {
  SD_REQUIRE_GPUS(1);
  int calls = 0;
  run_nccl_group({0}, [&](NcclComm& comm) {
    ++calls;
    EXPECT_TRUE(comm.owned());
    EXPECT_EQ(comm.device(), 0);
    expect_one_rank_is_the_loopback(comm, 5101);
  });
  EXPECT_EQ(calls, 1);
}

TEST(NcclComm, WrapsAnEnginesCommunicator) {
  SD_REQUIRE_GPUS(1);
  const int n = test::gpu_count();
  const std::vector<int> devices = first_devices(n);
  ASSERT_EQ(::setenv("NCCL_NVLS_ENABLE", "0", 0), 0);
  std::vector<ncclComm_t> handles(static_cast<size_t>(n), nullptr);
  SD_NCCL_CHECK(ncclCommInitAll(handles.data(), n, devices.data()));
  // n threads, one rank each (the engine's blocking communicators, wrapped).
  const uint64_t seed = 5201;
  const size_t count = 4099;
  const std::vector<std::vector<float>> partials = seeded_partials(seed, n, count);
  const TreeExpectation e = expected_tree(partials);
  std::vector<std::vector<float>> got(static_cast<size_t>(n)), got_graph(got);
  std::vector<std::string> failures(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      try {
        SD_CUDA_CHECK(cudaSetDevice(r));
        NcclComm comm(handles[static_cast<size_t>(r)]);
        if (comm.owned() || comm.tp_rank() != r || comm.tp_size() != n || comm.device() != r)
          throw Error("wrapped rank " + std::to_string(comm.tp_rank()) + " of " +
                      std::to_string(comm.tp_size()) + " on device " +
                      std::to_string(comm.device()));
        if (n == 1) expect_one_rank_is_the_loopback(comm, seed);
        DeviceStream stream;
        DeviceBuffer<float> data(partials[static_cast<size_t>(r)], stream.get());
        auto queue = [&](cudaStream_t s) { comm.all_reduce_sum(data.data(), count, s); };
        run_queued(stream, false, queue);
        got[static_cast<size_t>(r)] = data.download(stream.get());
        // In a graph too (a blocking communicator: its calls queue before they return).
        data.upload(partials[static_cast<size_t>(r)], stream.get());
        run_queued(stream, true, queue);
        got_graph[static_cast<size_t>(r)] = data.download(stream.get());
        comm.barrier();
      } catch (const std::exception& x) {
        failures[static_cast<size_t>(r)] = x.what();
      }
    });
  for (auto& t : threads) t.join();
  for (ncclComm_t h : handles) SD_NCCL_CHECK(ncclCommDestroy(h));
  for (int r = 0; r < n; ++r) {
    ASSERT_EQ(failures[r], "") << "rank " << r;
    EXPECT_TRUE(test::same_bits(got[r], e.sums, {0, true})) << "seed " << seed << " rank " << r;
    EXPECT_TRUE(test::same_bits(got_graph[r], e.sums, {0, true}))
        << "seed " << seed << " rank " << r << " in a graph";
  }
}

TEST(NcclComm, RefusesACountAboveTheCapacity) {
  SD_REQUIRE_GPUS(1);
  const int n = test::gpu_count();
  NcclOptions o;
  o.max_reduce_count = 1000;
  std::vector<std::string> refusal(static_cast<size_t>(n));
  std::vector<std::vector<float>> got(static_cast<size_t>(n));
  run_nccl_group(
      first_devices(n),
      [&](NcclComm& comm) {
        EXPECT_EQ(comm.max_reduce_count(), 1000u);
        DeviceStream stream;
        std::vector<float> ones(1001, 1.0f);
        DeviceBuffer<float> data(ones, stream.get());
        try {
          comm.all_reduce_sum(data.data(), 1001, stream.get());
        } catch (const InvalidArgument& e) {
          refusal[comm.tp_rank()] = e.what();
        }
        // Within the capacity it runs; grown outside capture, 1001 runs too.
        comm.all_reduce_sum(data.data(), 1000, stream.get());
        comm.reserve_reduce(1001);
        EXPECT_EQ(comm.max_reduce_count(), 1001u);
        comm.all_reduce_sum(data.data(), 1001, stream.get());
        got[comm.tp_rank()] = data.download(stream.get());
      },
      o);
  for (int r = 0; r < n; ++r) {
    test::expect_mentions(refusal[r],
                          {"count 1001", "capacity of 1000", "rank " + std::to_string(r)});
    ASSERT_EQ(got[r].size(), 1001u);
    // 1 summed twice over n ranks (exact), the last element once.
    EXPECT_EQ(got[r][0], static_cast<float>(n * n)) << "rank " << r;
    EXPECT_EQ(got[r][1000], static_cast<float>(n)) << "rank " << r;
  }
}

// ---- n >= 2 GPUs: ranks 0..n-1, one per GPU ----

TEST(NcclComm, AllGatherIsTheConcatenationOfTheRanks) {
  SD_REQUIRE_GPUS(2);
  const int n = test::gpu_count();
  const size_t bytes = 1000 + n;  // per rank: not a multiple of 16
  std::vector<uint8_t> expected;
  std::vector<std::vector<uint8_t>> blocks(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    test::Gen gen(6100 + r);
    blocks[r].resize(bytes);
    for (auto& b : blocks[r]) b = static_cast<uint8_t>(gen.integer(0, 255));
    expected.insert(expected.end(), blocks[r].begin(), blocks[r].end());
  }
  for (bool graph : {false, true}) {
    std::vector<std::vector<uint8_t>> got(static_cast<size_t>(n));
    run_nccl_group(first_devices(n), [&](NcclComm& comm) {
      const int r = comm.tp_rank();
      DeviceStream stream;
      DeviceBuffer<uint8_t> send(blocks[r], stream.get()), recv(bytes * n);
      recv.zero(stream.get());
      auto queue = [&](cudaStream_t s) { comm.all_gather(send.data(), recv.data(), bytes, s); };
      if (graph) run_queued(stream, false, queue);
      recv.zero(stream.get());
      run_queued(stream, graph, queue);
      got[r] = recv.download(stream.get());
    });
    for (int r = 0; r < n; ++r)
      EXPECT_TRUE(test::same_bits(got[r], expected, {static_cast<int64_t>(bytes)}))
          << "tp_size " << n << " rank " << r << (graph ? " in a graph" : "") << " (row = rank)";
  }
}

TEST(NcclComm, AllReduceIsTheFixedTreeOverRanks) {
  SD_REQUIRE_GPUS(2);
  const int n = test::gpu_count();
  const uint64_t seed = 6200 + n;
  const size_t count = 70001;
  const std::vector<std::vector<float>> partials = seeded_partials(seed, n, count);
  const TreeExpectation e = expected_tree(partials);
  if (n >= 4)
    ASSERT_GT(e.rank_order_differs, 100) << "the inputs do not pin the order";
  else
    std::cout << "[ note     ] at 2 and 3 ranks the tree is the rank order ((p0 + p1) + p2); "
                 "the order itself is checked at every rank count by "
                 "GatheredTreeIsTheFixedTreeAtEveryRankCount\n";
  if (n >= 4) ASSERT_EQ(f32_bits(e.sums[7]), f32_bits(0.0f));
  for (bool graph : {false, true}) {
    std::vector<std::vector<float>> got(static_cast<size_t>(n));
    run_nccl_group(first_devices(n), [&](NcclComm& comm) {
      const int r = comm.tp_rank();
      DeviceStream stream;
      DeviceBuffer<float> data(partials[r], stream.get());
      auto queue = [&](cudaStream_t s) { comm.all_reduce_sum(data.data(), count, s); };
      if (graph) {
        run_queued(stream, false, queue);  // warm-up, then the graph on fresh partials
        data.upload(partials[r], stream.get());
      }
      run_queued(stream, graph, queue);
      got[r] = data.download(stream.get());
      comm.barrier();
    });
    for (int r = 0; r < n; ++r)
      EXPECT_TRUE(test::same_bits(got[r], e.sums, {0, true}))
          << "seed " << seed << " tp_size " << n << " rank " << r << (graph ? " in a graph" : "");
  }
}

TEST(NcclComm, ARankThatThrowsStopsTheGroup) {
  SD_REQUIRE_GPUS(2);
  const int n = test::gpu_count();
  NcclOptions o;
  o.timeout_s = 20;
  const auto t0 = std::chrono::steady_clock::now();
  const std::string message = test::error_of<Error>([&] {
    run_nccl_group(
        first_devices(n),
        [&](NcclComm& comm) {
          DeviceStream stream;
          DeviceBuffer<float> data(std::vector<float>(4096, 1.0f), stream.get());
          comm.all_reduce_sum(data.data(), 4096, stream.get());
          stream.synchronize();
          if (comm.tp_rank() == n - 1) throw std::runtime_error("failed on purpose");
          // The others queue a collective the failed rank never joins, wait on its
          // stream (released by the abort), then reach a barrier.
          comm.all_reduce_sum(data.data(), 4096, stream.get());
          stream.synchronize();
          comm.barrier();
        },
        o);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  test::expect_mentions(
      message,
      {"rank " + std::to_string(n - 1) + " (device " + std::to_string(n - 1), "failed on purpose"});
  EXPECT_LT(s, o.timeout_s) << "the group took " << s << " s to stop";
  // The process can run a group again.
  int ran = 0;
  std::mutex mu;
  run_nccl_group(first_devices(n), [&](NcclComm& comm) {
    comm.barrier();
    std::lock_guard lock(mu);
    ++ran;
  });
  EXPECT_EQ(ran, n);
}

TEST(NcclComm, ACollectiveNotEveryRankCallsTimesOut) {
  SD_REQUIRE_GPUS(2);
  const int n = test::gpu_count();
  NcclOptions o;
  o.timeout_s = 10;  // also the limit of the group's initialization
  const auto t0 = std::chrono::steady_clock::now();
  const std::string message = test::error_of<DeviceError>([&] {
    run_nccl_group(
        first_devices(n),
        [&](NcclComm& comm) {
          comm.barrier();
          if (comm.tp_rank() == 0) comm.barrier();  // nobody else comes
        },
        o);
  });
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  test::expect_mentions(message, {"rank 0"});
  EXPECT_LT(s, 4 * o.timeout_s) << "the group took " << s << " s to stop: " << message;
}

#endif  // SPARKDRAFT_HAVE_NCCL

}  // namespace
}  // namespace sparkdraft
