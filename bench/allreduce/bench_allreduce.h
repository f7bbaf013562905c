// The TP all-reduce benchmark (contract.md section 6), as a library function the CLI's
// `bench allreduce` calls: for each TP size (ranks 0..tp-1 on GPUs 0..tp-1, one
// thread each, run_nccl_group) and each rows x hidden, our eager all_reduce_sum
// (ncclAllGather of the fp32 partials + the fixed tree, cuda/nccl_comm.h) and our
// fused one (cuda/comm/peer_reduce.h: the partials pushed into the peers' mailboxes over
// NVLink, the tree in the same kernel) against ncclAllReduce on the same buffer. Seeded partials of
// mixed magnitude; before anything is timed, our sums are checked bit for bit against the tree
// computed on the host (canonical_tree_sum; both of ours), and the elements where ncclAllReduce's
// bits differ from the tree are counted (reported, not an error: it is why we do not use it). Each
// collective is captured in a CUDA graph; each timed repeat starts after a host barrier of the
// group, cudaEvents around one graph launch; the median of repeats per rank, the slowest rank
// reported.
#pragma once

#include <cstdint>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "common/harness.h"

namespace sparkdraft::cuda {

struct AllReduceBenchOptions {
  std::vector<int> tp_sizes{2};  // each in [2, #GPUs]
  // The draft reduces requests x block-size rows: 16, 128, 512 at 1, 8, 32 requests.
  std::vector<int> rows{1, 2, 4, 8, 16, 32, 128, 512};
  std::vector<int> hidden{4096, 8192};
  int repeats = 50;
  int warmup = 10;
  uint64_t seed = 20240601;
  double timeout_s = 60.0;  // NcclOptions::timeout_s of the group
};

struct AllReduceBenchResult {
  int tp = 0, rows = 0, hidden = 0;
  double our_us = 0;             // all-gather + tree, one graph launch (slowest rank's median)
  double fused_us = 0;           // the fused peer all-reduce, the same (0: not run, see below)
  double nccl_us = 0;            // ncclAllReduce, one graph launch (slowest rank's median)
  int64_t nccl_bits_differ = 0;  // elements where ncclAllReduce's sum is not the tree's bits
  GpuInfo gpu;                   // rank 0's GPU
};

struct AllReduceBenchReport {
  std::vector<AllReduceBenchResult> results;
  std::string nccl_version;
  // Why the fused all-reduce did not run (its GPUs cannot reach each other); empty
  // when it did.
  std::string fused_why;
  // Not empty when our all_reduce_sum differed from the host tree (nothing more
  // was timed): which case, rank, element and bits, and the seed.
  std::string difference;
  bool ok() const { return difference.empty(); }
};

// Runs the benchmark, printing one line per case to `out`. Throws
// InvalidArgument for a TP size outside [2, #GPUs] or an empty list, and what
// run_nccl_group throws.
AllReduceBenchReport bench_allreduce(const AllReduceBenchOptions& options, std::ostream& out);

nlohmann::json allreduce_bench_json(const AllReduceBenchResult& r,
                                    const AllReduceBenchOptions& options,
                                    const std::string& nccl_version);

}  // namespace sparkdraft::cuda
