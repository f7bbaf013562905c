// The shared-device group communicator: TP ranks as host threads that share one
// GPU, each with its own stream (contract.md section 6 (c): where the ranks have no GPU each, the
// ranks' shards run on one device; unlike the loopback, each rank runs its own
// step in its own thread, as it would with NCCL). Built over a host communicator of
// the same ranks (run_thread_group's), which carries only pointers and events.
//
//   all_gather      the rank records an event after its send buffer is ready; the
//                   ranks exchange (send pointer, event) on the host; each queues,
//                   on its stream, a wait for every peer's event and one device
//                   copy per rank into its own recv; then a second exchange of a
//                   "done reading" event that every stream waits for, so no rank
//                   writes its send buffer again before every peer has copied it.
//   all_reduce_sum  that all-gather of the fp32 partials into a scratch of
//                   tp_size x count floats, then gathered_tree_sum (the kernel the
//                   NCCL communicator runs): every rank the same bits, in the fixed
//                   tree of core/reduce.h.
//   barrier         the host communicator's barrier.
//
// The device never waits on the host, but each collective waits on the host for
// the peers to arrive, so it cannot be captured in a CUDA graph
// (graph_capturable() is false): the backends run it eager. The scratch is sized at
// construction and grown by reserve_reduce (outside any capture); a larger count is
// refused (InvalidArgument). Faults are the host group's: a rank that throws stops
// every rank (comm.h run_thread_group), and a collective that a peer never reaches
// fails with the group's timeout.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <vector>

#include "sparkdraft/comm.h"
#include "sparkdraft/cuda/buffer.h"

namespace sparkdraft::cuda {

class SharedDeviceComm final : public Communicator {
 public:
  // `host` runs one rank (a thread of run_thread_group) and outlives this object;
  // `device` is made current on the calling thread. Throws InvalidArgument when host
  // runs several ranks or has device memory.
  SharedDeviceComm(Communicator& host, int device, size_t max_reduce_count = size_t{1} << 20);
  // Meets the other ranks (a host barrier; skipped in an aborted group) before it
  // destroys the events they may still be queueing waits on.
  ~SharedDeviceComm() override;
  SharedDeviceComm(const SharedDeviceComm&) = delete;
  SharedDeviceComm& operator=(const SharedDeviceComm&) = delete;

  int tp_size() const override { return host_.tp_size(); }
  const std::vector<int>& local_ranks() const override { return host_.local_ranks(); }
  CommMemory memory() const override { return CommMemory::device; }
  bool graph_capturable() const override { return false; }
  int device() const { return device_; }

  using Communicator::all_gather;
  using Communicator::all_reduce_sum;
  void all_gather(const void* const* send, void* recv, size_t bytes, void* stream) override;
  void all_reduce_sum(float* const* data, size_t count, void* stream) override;
  void barrier() override { host_.barrier(); }
  void reserve_reduce(size_t count) override;

 private:
  // Every stream waits for every peer's event, exchanged on the host.
  void wait_for_peers(cudaEvent_t mine, cudaStream_t stream);

  Communicator& host_;
  int device_;
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  DeviceBuffer<float> scratch_;  // [tp_size, max count]
  size_t max_count_ = 0;
};

}  // namespace sparkdraft::cuda
