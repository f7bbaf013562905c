// The NCCL communicator (contract.md section 6 (a)): one object runs one TP rank on one
// GPU (a thread or a process per rank). Device memory; the collectives are queued
// on the caller's stream, never synchronize the host with the device and allocate
// nothing, so they can be captured in a CUDA graph.
//
//   all_gather      one ncclAllGather.
//   all_reduce_sum  never ncclAllReduce (its order changes with the size and the
//                   channel count): an ncclAllGather of every rank's fp32 partials
//                   into a scratch of tp_size x count floats on this device, then
//                   one kernel that adds them per element in the fixed tree of
//                   core/reduce.h (canonical_tree_sum over ranks 0..tp_size-1) and
//                   writes the sums in place: every rank computes the same bits.
//                   The scratch holds max_reduce_count() floats per rank, set at
//                   construction (NcclOptions) or grown by reserve_reduce outside
//                   capture; a larger count is refused (InvalidArgument).
//   barrier         a one-int all-gather on the communicator's own stream, then a
//                   host wait for it (host-blocking, like the CPU thread group).
//
// Waits: a communicator made here is non-blocking (ncclConfig_t blocking = 0):
// every NCCL call may return ncclInProgress, and the host then polls
// ncclCommGetAsyncError until the call has been queued, with a timeout
// (NcclOptions::timeout_s) wherever it waits (init, each collective, barrier,
// finalize): an error or a timeout throws DeviceError naming the call, the rank
// and the device, never hangs. A communicator handed over by an engine may be
// blocking or not; the same polling covers both.
//
// Threads and devices: the object's collectives are called from one thread at a
// time, with the communicator's device current (refused otherwise), in the same
// order on every rank. Its all_reduce_sum calls share one scratch, so they must be
// ordered on the device (one stream, or streams ordered by events).
//
// Graph capture: NCCL connects its peers on the first use of each kind of
// collective, so run each collective once eagerly before capturing it.
//
// NVLink multicast (NVLS) is never used: the communicators made here and by
// run_nccl_group require NCCL_NVLS_ENABLE to be unset (it is then set to 0 before
// NCCL initializes) or 0, and refuse any other value; an engine that hands over
// its own communicator must create it with NCCL_NVLS_ENABLE=0.
//
// Built with NCCL only (SPARKDRAFT_HAVE_NCCL).
#pragma once

#if defined(SPARKDRAFT_HAVE_NCCL)

#include <nccl.h>

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sparkdraft/comm.h"

namespace sparkdraft::cuda {

struct NcclOptions {
  // all_reduce_sum's capacity: floats per rank (the scratch is tp_size times this).
  size_t max_reduce_count = size_t{1} << 20;
  // Every host wait (init, queueing a collective, barrier, finalize) gives up
  // after this many seconds with DeviceError; run_nccl_group also aborts the
  // group when a rank has not returned this long after another returned.
  double timeout_s = 60.0;
};

class NcclComm;
struct NcclGroup;  // the ranks of one run_nccl_group (nccl.cu)

// Makes one communicator per device (rank k on devices[k], one thread each with
// cudaSetDevice(devices[k]); devices distinct), runs fn(comm) on every thread and
// joins them. An exception on any rank is rethrown after every rank has stopped:
// the one that stopped the group (the first rank to fail, else the watchdog's
// below, else the first by rank), sparkdraft's error types kept (others become
// Error), its message prefixed "rank K (device D): ". When one rank fails, every
// communicator of the group is aborted (ncclCommAbort), so ranks waiting in a
// collective, in barrier() or on a stream that holds an NCCL kernel are
// released; a rank that has not returned options.timeout_s after another
// returned is aborted too (a collective that not every rank called: DeviceError
// naming it). Checks NCCL_NVLS_ENABLE first (set to 0 when unset, any other value
// than 0 refused with InvalidArgument). Throws InvalidArgument for no devices, a
// repeated or missing device, a timeout that is not > 0.
void run_nccl_group(const std::vector<int>& devices, const std::function<void(NcclComm&)>& fn,
                    const NcclOptions& options = {});

// The NCCL library this process runs, "MAJOR.MINOR.PATCH" (ncclGetVersion).
std::string nccl_version();

class NcclComm final : public Communicator {
 public:
  // Wraps an engine's initialized communicator (not owned: the engine destroys it
  // after this object). Rank, size and device come from it; the scratch and the
  // barrier's stream are made on its device.
  explicit NcclComm(ncclComm_t comm, const NcclOptions& options = {});
  // Creates (and owns) rank tp_rank of tp_size over `id` on `device`, which it
  // makes current on the calling thread (ncclCommInitRankConfig, non-blocking);
  // every rank of the group must construct concurrently (one thread or process
  // each). The destructor finalizes it (ncclCommAbort after an error, a timeout,
  // or when destroyed during stack unwinding).
  NcclComm(const ncclUniqueId& id, int tp_rank, int tp_size, int device,
           const NcclOptions& options = {});
  ~NcclComm() override;
  NcclComm(const NcclComm&) = delete;
  NcclComm& operator=(const NcclComm&) = delete;

  int tp_size() const override;
  // {tp_rank}.
  const std::vector<int>& local_ranks() const override;
  CommMemory memory() const override { return CommMemory::device; }

  using Communicator::all_gather;
  using Communicator::all_reduce_sum;
  void all_gather(const void* const* send, void* recv, size_t bytes, void* stream) override;
  void all_reduce_sum(float* const* data, size_t count, void* stream) override;
  void barrier() override;

  // The NCCL handle (for an engine's own NCCL calls and the benchmark).
  ncclComm_t handle() const;
  int device() const;
  bool owned() const;
  size_t max_reduce_count() const;
  // Runs one NCCL call of the caller's on handle() (an engine's own collective,
  // the benchmark's ncclAllReduce) and waits, as the collectives here do, until
  // it is queued: a non-blocking communicator answers ncclInProgress first. An
  // NCCL error or the timeout throws DeviceError naming `what` and the rank.
  void enqueue(const char* what, const std::function<ncclResult_t()>& nccl_call);
  // Grows the all_reduce_sum scratch to `count` floats per rank (allocates and
  // synchronizes this device: never inside a capture). Smaller counts do nothing.
  void reserve_reduce(size_t count) override;

  struct Impl;

 private:
  friend void run_nccl_group(const std::vector<int>&, const std::function<void(NcclComm&)>&,
                             const NcclOptions&);
  NcclComm(const ncclUniqueId& id, int tp_rank, int tp_size, int device, const NcclOptions& options,
           std::shared_ptr<NcclGroup> group);

  std::unique_ptr<Impl> impl_;
};

}  // namespace sparkdraft::cuda

#endif  // SPARKDRAFT_HAVE_NCCL
