// The peer-to-peer communicator (SPEC section 6): TP ranks of one process, one
// thread each, whose collectives are single kernels that push data straight into
// the peers' mailboxes and wait on epoch flags, so that they never touch the host
// and can be captured in each rank's CUDA graph. The ranks share one GPU or sit on
// GPUs with peer access to each other (NVLink; never multicast).
//
// Memory of each rank (its device): a mailbox of 2 x tp_size slots of
// capacity_bytes() (double-buffered by epoch parity) and 2 x tp_size x blocks
// epoch flags. A collective of epoch e (a device counter each collective kernel
// advances when its last block finishes; the host never sets it, so graph replays
// advance it too):
//   1. every block copies its chunk of the rank's data into slot (e & 1, me) of
//      every rank's mailbox (its own included), then sets flag (e & 1, me, block)
//      of every rank to e (release, system scope);
//   2. waits until flag (e & 1, src, block) of its own mailbox is e for every src
//      (acquire);
//   3. reads its chunk of every slot: all_gather copies them to recv in rank
//      order; all_reduce_sum adds them in the fixed tree of core/reduce.h
//      (canonical_tree_sum over ranks 0..tp-1) and writes the sums in place.
// No buffer is ever cleared and no barrier runs between collectives: a rank can
// start epoch e+2 (the slot parity of e) only after its epoch e+1 collective has
// seen every peer's e+1 data, which each peer sends after finishing epoch e.
// Every rank's kernels of one communicator run on one stream (the caller's, in
// call order), and every rank calls the same collectives in the same order.
//
// Blocks: 32 a rank on its own GPU; where ranks share a GPU, max(1, 32 / tp) each,
// so that waiting blocks never hold the SMs the peers' kernels need.
//
// Faults: a block that waits longer than timeout_s (a peer failed or never called
// the collective) traps: the device's context is lost and the error reaches the
// host as a DeviceError from the next CUDA call, never a hang.
//
// Allocation: where ranks share a GPU, cudaFree (and anything else that waits for
// the whole device) on one rank's thread while a peer's collective waits for a rank
// that has not launched its own can deadlock the same way: allocate before the
// ranks' collectives and free after they are done (CudaDraft allocates at
// construction; make_cuda_backend's jobs end on every rank before the next starts).
//
// Module loading: a rank whose next kernel CUDA loads lazily (on its first launch)
// can wait for the running kernels, a peer's waiting collective among them, to
// finish: a deadlock. The process must load eagerly (CUDA_MODULE_LOADING=EAGER set
// before its first CUDA call; the CLI and the GPU tests set it); the constructor
// refuses lazy loading (InvalidArgument).
//
// Setup: the constructor exchanges the mailbox addresses through `bootstrap` (a
// host communicator of the same ranks: run_thread_group's; a collective call on
// every rank) and enables peer access between distinct devices (DeviceError where
// there is none).
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "sparkdraft/comm.h"
#include "sparkdraft/cuda/buffer.h"

namespace sparkdraft::cuda {

struct P2pOptions {
  // Largest all_gather block / all_reduce_sum buffer in bytes (the mailbox holds 2 x
  // tp_size of them).
  size_t capacity_bytes = size_t{16} << 20;
  double timeout_s = 60.0;
};

class P2pComm final : public Communicator {
 public:
  static constexpr int kMaxRanks = 16;

  // bootstrap: a host communicator running one rank; it outlives this object
  // (barrier is its barrier). device: this rank's GPU, made current. InvalidArgument for a
  // bootstrap of several local ranks or device memory, more than kMaxRanks ranks, a
  // capacity that is not a positive multiple of 16, a timeout that is not > 0.
  P2pComm(Communicator& bootstrap, int device, const P2pOptions& options = {});
  ~P2pComm() override = default;
  P2pComm(const P2pComm&) = delete;
  P2pComm& operator=(const P2pComm&) = delete;

  int tp_size() const override { return tp_size_; }
  const std::vector<int>& local_ranks() const override { return local_; }
  CommMemory memory() const override { return CommMemory::device; }
  int device() const { return device_; }
  size_t capacity_bytes() const { return options_.capacity_bytes; }
  int blocks() const { return blocks_; }

  using Communicator::all_gather;
  using Communicator::all_reduce_sum;
  // bytes <= capacity_bytes() (InvalidArgument otherwise).
  void all_gather(const void* const* send, void* recv, size_t bytes, void* stream) override;
  // count * 4 <= capacity_bytes(); data is read and then overwritten by the kernel.
  void all_reduce_sum(float* const* data, size_t count, void* stream) override;
  // The bootstrap's host barrier.
  void barrier() override { bootstrap_.barrier(); }
  // Refuses (InvalidArgument) counts past the capacity fixed at construction.
  void reserve_reduce(size_t count) override;

 private:
  void launch(const void* send, size_t bytes, void* out, bool reduce, void* stream);

  Communicator& bootstrap_;
  P2pOptions options_;
  int device_ = 0, tp_size_ = 1, blocks_ = 32;
  std::vector<int> local_;
  DeviceBuffer<unsigned char> mailbox_;  // [2, tp, capacity]
  DeviceBuffer<uint32_t> flags_;         // [2, tp, blocks]
  DeviceBuffer<uint32_t> state_;         // [0] the last epoch done, [1] blocks arrived
  std::vector<unsigned char*> peer_mailbox_;
  std::vector<uint32_t*> peer_flags_;
};

}  // namespace sparkdraft::cuda
