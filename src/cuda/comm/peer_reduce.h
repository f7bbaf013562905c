// The fused all-reduce boundary of contract.md section 6: TP ranks whose GPUs reach each
// other's memory (NVLink peers, or ranks sharing one GPU; threads of one process or
// processes of their own) complete
// the fixed tree of their fp32 partials in one kernel, without NCCL and without the
// host, and the draft runs the residual boundary that follows o_proj and down in
// that same kernel.
//
// Each rank owns a mailbox [2][tp_size][max_count] fp32 (two parities), a flag
// array [tp_size][max_slots] and its epoch state, all in its own device memory.
// One call, on every rank in the same order:
//   1. its epoch e = the last completed epoch + 1 (device state: no host value, so
//      a captured graph replays correctly), its parity e % 2;
//   2. each block (a "slot": one row of the boundary, one range of a plain sum)
//      stores its part of the rank's partial into mailbox[parity][rank] of every
//      peer, fences at system scope and raises the peer's flag [rank][slot] to e
//      (st.release.sys);
//   3. waits until flag [s][slot] of its own array is >= e for every peer s
//      (ld.acquire.sys; bounded by the timeout), then reads the peers' parts from
//      its own mailbox and adds the tp_size values of each element in
//      canonical_tree_sum's order (core/reduce.h), the rank's own from its partial;
//   4. the plain sum writes them in place; the boundary rounds them to bf16 (the
//      branch the eager path would narrow) and runs the residual boundary of
//      cuda/kernels.h on them (src/cuda/common/residual_boundary.cuh: the same
//      kernel body): the bits of all_reduce_sum + narrow + residual_boundary;
//   5. the last block to finish records e as completed.
// No buffer is ever cleared and the ranks never meet between calls: the flags only
// grow (64-bit epochs, so a slot unused for billions of calls never looks current), and two
// parities suffice because a rank starts call e + 2 only after every peer's call e + 1 has raised
// its flags, which each peer does only after its call e (stream order) has read its mailbox.
//
// Waits: a rank whose peer has not raised its flag within timeout_s stops waiting,
// records which peer it waited for in host-mapped memory, and finishes the call
// with garbage; check() (the host, after the stream has synchronized) then throws
// DeviceError naming the rank, the peer and the epoch, and every later call is
// refused: the ranks are out of step. Every rank's kernels of a call must be able
// to run at the same time: separate GPUs, or (ranks sharing one GPU) few enough
// rows that every rank's blocks fit on the device together, with no device-wide
// CUDA call (a lazy module load, a cudaMalloc that synchronizes) on any rank's
// thread while a peer waits.
//
// Connecting: every rank constructs its PeerAllReduce on its device, then connect()
// with every rank's endpoint() in rank order (the caller exchanges them: a thread
// group shares memory, exchange() all-gathers them through a communicator, an
// engine may send the bytes its own way: a PeerEndpoint is plain bytes). A peer in
// this process is reached through its pointers (peer access enabled between
// distinct devices); a peer in another process through the CUDA IPC handles of its
// mailbox and flags (cudaIpcOpenMemHandle, peer access enabled lazily; closed by
// the destructor). Ranks in different processes that share one GPU are time-sliced
// by the driver (no MPS): correct, but each wait lasts a time slice. Block scheduling: a rank's
// blocks wait only for the same slot on its peers, so with more rows than fit on a GPU at once the
// ranks rely on each GPU starting its blocks in increasing order (what the hardware does).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "sparkdraft/comm.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/ops/boundary.h"

namespace sparkdraft::cuda {

struct PeerReduceOptions {
  size_t max_count = size_t{1} << 20;  // floats a call takes ([rows, H] of the boundary)
  int max_slots = 1024;                // blocks a call runs: the boundary's rows
  double timeout_s = 10.0;             // how long a block waits for a peer's flag
};

// What a rank publishes for its peers.
struct PeerEndpoint {
  float* mailbox = nullptr;  // valid in its own process
  uint64_t* flags = nullptr;
  cudaIpcMemHandle_t mailbox_ipc{}, flags_ipc{};  // for other processes
  bool ipc = false;                               // the handles are valid
  int device = -1;                                // the ordinal in its own process
  unsigned char device_uuid[16] = {};             // the GPU, in every process
  int tp_rank = -1;
  uint64_t process = 0;  // its process's token (pid and a random word)
  size_t max_count = 0;
  int max_slots = 0;
};

// Whether CUDA loads kernels lazily in this process (CUDA_MODULE_LOADING, LAZY by
// default): ranks sharing one GPU can then deadlock in the fused boundary (a kernel
// loaded on one rank's thread waits for a peer's waiting kernel). DeviceError when
// the driver cannot say.
bool module_loading_is_lazy();

class PeerAllReduce {
 public:
  static constexpr int kMaxRanks = 8;

  // Rank tp_rank of tp_size (1..kMaxRanks) on the current device: allocates and
  // zeroes its mailbox, flags and state (synchronizes the device). InvalidArgument
  // for a bad rank, size or option.
  PeerAllReduce(int tp_rank, int tp_size, const PeerReduceOptions& options = {});
  ~PeerAllReduce();
  PeerAllReduce(const PeerAllReduce&) = delete;
  PeerAllReduce& operator=(const PeerAllReduce&) = delete;

  PeerEndpoint endpoint() const;
  // Every rank's endpoint in rank order, all-gathered through comm (device memory,
  // one local rank: this object's rank and size); a collective of comm's ranks.
  std::vector<PeerEndpoint> exchange(Communicator& comm) const;
  // Why connect(peers) would refuse, empty when it would not: a wrong count, a rank
  // out of place, a mismatched capacity, a peer of another process without IPC
  // handles, a device of this process without peer access to this one.
  std::string refusal(const std::vector<PeerEndpoint>& peers) const;
  // Every rank's endpoint in rank order (this rank's included): enables peer access
  // to the other devices of this process, opens the IPC handles of peers in other
  // processes. InvalidArgument with the refusal above; DeviceError when CUDA cannot
  // open a peer's memory (the error names the peer).
  void connect(const std::vector<PeerEndpoint>& peers);
  // Whether the GPU of endpoint `e` is this rank's (in any process).
  bool same_gpu(const PeerEndpoint& e) const;
  // A collective of comm's ranks: exchange(), then refusal() and `also` (the
  // caller's own reasons given every endpoint; empty = none), then connect(), then
  // every rank learns whether every rank connected (an all-gather of one int).
  // Returns why not, empty when every rank is connected; when not empty this rank is
  // left unusable for calls (the caller drops the object).
  std::string connect_group(
      Communicator& comm,
      const std::function<std::string(const std::vector<PeerEndpoint>&)>& also = {});
  bool connected() const { return connected_; }

  int tp_rank() const { return rank_; }
  int tp_size() const { return tp_; }
  const PeerReduceOptions& options() const { return options_; }

  // The fp32 sums of the ranks' `count` partials, in place (the bits of
  // Communicator::all_reduce_sum); queued on `stream`, capturable.
  void all_reduce_sum(float* data, size_t count, cudaStream_t stream);
  // residual_boundary(p, narrow(tree of the ranks' partials), residual, next):
  // partial is this rank's [p.rows, p.hidden] fp32 (not modified); queued on
  // `stream`, capturable. p.rows <= max_slots, p.rows * p.hidden <= max_count.
  void residual_boundary(const ops::BoundaryParams& p, const float* partial, void* residual,
                         bf16* next, cudaStream_t stream);

  // How many rows of residual_boundary (one block each) over rows of `hidden` this
  // GPU runs at once: ranks sharing one GPU need every rank's rows resident together.
  int64_t resident_boundary_rows(int hidden, StreamDType residual_dtype) const;

  // Throws DeviceError when a call of this rank timed out waiting for a peer (read
  // after the stream that ran it has synchronized); once it has, every call throws.
  void check() const;

 private:
  void require_ready(const char* op, size_t count, int slots) const;

  int rank_ = 0, tp_ = 1, device_ = 0;
  PeerReduceOptions options_;
  DeviceBuffer<float> mailbox_;
  DeviceBuffer<uint64_t> flags_, state_;  // 64-bit epochs: they never wrap
  int* timeout_host_ = nullptr;           // host-mapped: 0, or 1 + the peer waited for
  int* timeout_dev_ = nullptr;
  unsigned char uuid_[16] = {};
  cudaIpcMemHandle_t mailbox_ipc_{}, flags_ipc_{};
  bool ipc_ = false;
  std::vector<float*> peer_mailbox_;  // in this process's address space
  std::vector<uint64_t*> peer_flags_;
  std::vector<void*> opened_;  // IPC mappings to close
  bool connected_ = false;
};

}  // namespace sparkdraft::cuda
