// The communicator interface of tensor parallelism (SPEC section 6).
//
// One implementation today: a CPU thread group (ranks as threads, fixed rank
// order; what CI proves TP logic with, run_thread_group below). There is no GPU
// communicator yet: NCCL is not implemented, and the GPU Markov loop's single-GPU
// loopback is its own exchange (cuda::MarkovExchange / LoopbackExchange in
// cuda/markov.h), not a Communicator; both carry the one packet format of
// core/packet.h. Collectives are blocking and called by every rank in the same order.
#pragma once

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

namespace sparkdraft {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // recv holds size() blocks of `bytes`, block k from rank k.
  virtual void all_gather(const void* send, void* recv, size_t bytes) = 0;
  // Element-wise fp32 sum over ranks in rank order (0 + 1 + ... + n-1, left to right).
  virtual void all_reduce_sum(float* data, size_t count) = 0;
  virtual void barrier() = 0;
};

// Runs fn(comm) on `ranks` threads, one communicator each, and joins them. An
// exception on any rank is rethrown (the first by rank) after all ranks stop;
// a rank that throws aborts the group so no other rank waits forever.
void run_thread_group(int ranks, const std::function<void(Communicator&)>& fn);

}  // namespace sparkdraft
