// The single-GPU loopback communicator (contract.md section 6 (c)): one object runs every
// TP rank 0..tp_size-1 of the group on the current device, one after another on
// one stream, so the TP logic runs where no kernel waits on another rank. Device
// memory; the collectives are device copies and one kernel queued on the caller's
// stream (no host synchronization, no allocation: capturable in a CUDA graph).
#pragma once

#include <vector>

#include "sparkdraft/comm.h"

namespace sparkdraft::cuda {

class LoopbackComm final : public Communicator {
 public:
  // Throws InvalidArgument unless tp_size >= 1.
  explicit LoopbackComm(int tp_size);
  int tp_size() const override { return static_cast<int>(local_.size()); }
  // 0..tp_size-1.
  const std::vector<int>& local_ranks() const override { return local_; }
  CommMemory memory() const override { return CommMemory::device; }

  using Communicator::all_gather;
  using Communicator::all_reduce_sum;
  // One device-to-device copy per rank into block k of recv.
  void all_gather(const void* const* send, void* recv, size_t bytes, void* stream) override;
  // One kernel: per element, the tree of core/reduce.h over the ranks' buffers,
  // written back to each of them. At most kMaxRanks ranks.
  void all_reduce_sum(float* const* data, size_t count, void* stream) override;
  // Nothing to wait for: every rank runs in this thread, in stream order.
  void barrier() override {}

  static constexpr int kMaxRanks = 64;

 private:
  std::vector<int> local_;
};

}  // namespace sparkdraft::cuda
