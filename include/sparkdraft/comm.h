// The one communicator of tensor parallelism (contract.md section 6).
//
// An object runs one or more TP ranks of a group of tp_size() ranks, the ones in
// local_ranks() (increasing): one rank per object for NCCL (a process or a thread
// per rank) and for the CPU thread group; every rank 0..tp_size()-1 for the
// single-GPU loopback, which runs the ranks' shards one after another on one
// stream. Its buffers live in memory() (host or device). Every collective takes
// one buffer per local rank, in local_ranks() order; the plain-pointer overloads
// are for an object that runs one rank.
//
// Implementations: the CPU thread group (host memory, ranks as threads; what CI
// proves TP logic with, run_thread_group below), the single-GPU loopback
// (device memory, cuda/comm/loopback.h; built with CUDA only), NCCL (device memory,
// one GPU per rank, cuda/nccl_comm.h with its group runner run_nccl_group; built
// with CUDA and NCCL only).
//
// Collectives are called by every rank in the same order. On a host communicator
// they are blocking and `stream` must be null; on a device communicator they are
// queued on `stream` (a cudaStream_t; null = the legacy default stream), never
// synchronize the host and allocate nothing, so they can be captured in a CUDA
// graph. The Markov loop's packets exchanged through all_gather have one format,
// core/packet.h.
#pragma once

#include <cstddef>
#include <functional>
#include <vector>

namespace sparkdraft {

// Where a communicator's buffers live.
enum class CommMemory { host, device };

class Communicator {
 public:
  virtual ~Communicator() = default;

  // How many TP ranks the group has.
  virtual int tp_size() const = 0;
  // The TP ranks this object runs, increasing, at least one.
  virtual const std::vector<int>& local_ranks() const = 0;
  // The first (for NCCL and a thread rank, the only) rank this object runs.
  int tp_rank() const { return local_ranks().front(); }
  virtual CommMemory memory() const = 0;

  // recv holds tp_size() blocks of `bytes`, block k from rank k; send[i] is the
  // block of local_ranks()[i]. With several local ranks, recv is the same for all
  // of them and written once.
  virtual void all_gather(const void* const* send, void* recv, size_t bytes, void* stream) = 0;

  // Element-wise fp32 sum of the ranks' partials, in place: data[i] holds
  // local_ranks()[i]'s `count` partials on entry and the sums on return (every
  // local rank gets the same bits). The order is the fixed tree of contract.md section 6,
  // core/reduce.h canonical_tree_sum over ranks 0..tp_size()-1:
  // ((p0+p1)+(p2+p3))+((p4+p5)+(p6+p7)) at TP 8, never a timing- or size-
  // dependent order.
  virtual void all_reduce_sum(float* const* data, size_t count, void* stream) = 0;

  // Returns once every rank has reached it (host order; a loopback has nothing to
  // wait for).
  virtual void barrier() = 0;

  // Whether the collectives can be captured in a CUDA graph: a device communicator
  // whose collectives never wait on the host (NCCL, the loopback), not one whose
  // ranks meet on the host inside each collective (cuda/shared_device_comm.h).
  virtual bool graph_capturable() const { return memory() == CommMemory::device; }
  // Makes all_reduce_sum take `count` floats per local rank where it needs a
  // scratch (NCCL, the shared-device group): allocates and synchronizes, so never
  // inside a capture. Smaller counts, and communicators without a scratch, do
  // nothing.
  virtual void reserve_reduce(size_t count) { (void)count; }

  // One local rank (throws InvalidArgument when this object runs several).
  void all_gather(const void* send, void* recv, size_t bytes, void* stream = nullptr);
  void all_reduce_sum(float* data, size_t count, void* stream = nullptr);
  // An array of typed buffers would silently match the one-rank overload above:
  // pass `const void* const*` for several buffers.
  template <class T>
  void all_gather(T* const* send, void* recv, size_t bytes, void* stream = nullptr) = delete;
};

// Runs fn(comm) on `tp_size` threads, one host communicator each (rank k on
// thread k), and joins them. An exception on any rank is rethrown (the first by
// rank) after all ranks stop; a rank that throws aborts the group so no other
// rank waits forever (a rank waiting in a collective, or reaching one later,
// stops there). With tp_size > 1 the rethrown error names the rank: its message
// starts "TP rank r of n: " and it keeps its type (error.h; any other
// std::exception is rethrown as an Error).
//
// Waits on peers never hang: a rank waiting in a collective fails with an Error
// naming the collective and the ranks that did not come when a rank has returned
// from fn without calling it (the ranks called different collectives), or when
// timeout_s passes first (a rank stuck elsewhere); the group then stops as for any
// error.
inline constexpr double kThreadGroupTimeoutS = 600.0;
void run_thread_group(int tp_size, const std::function<void(Communicator&)>& fn,
                      double timeout_s = kThreadGroupTimeoutS);

}  // namespace sparkdraft
