// CPU thread-group communicator: ranks are threads of one process sharing a
// rendezvous, one local rank per communicator, host memory. Collectives follow a
// fixed order (all_gather places rank k at block k; all_reduce_sum is the tree of
// core/reduce.h), so results never depend on thread timing (the CPU stand-in for
// NCCL that CI proves TP logic with).
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "sparkdraft/comm.h"
#include "sparkdraft/core/reduce.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

// Thrown on ranks that were waiting when another rank failed.
struct GroupAborted {};

class Rendezvous {
 public:
  explicit Rendezvous(int n) : n_(n), slots_(n) {}

  // Every rank publishes a pointer; once all have arrived, `use` runs on each
  // rank with every rank's pointer; a second barrier keeps the pointers alive
  // until all ranks have used them.
  template <class Use>
  void exchange(int rank, const void* mine, Use use) {
    slots_[rank] = mine;
    wait();
    use(slots_);
    wait();
  }

  void wait() {
    std::unique_lock lock(mu_);
    if (aborted_) throw GroupAborted{};
    const uint64_t gen = generation_;
    if (++arrived_ == n_) {
      arrived_ = 0;
      ++generation_;
      cv_.notify_all();
      return;
    }
    cv_.wait(lock, [&] { return generation_ != gen || aborted_; });
    if (aborted_) throw GroupAborted{};
  }

  void abort() {
    std::lock_guard lock(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  int n_;
  std::vector<const void*> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  int arrived_ = 0;
  uint64_t generation_ = 0;
  bool aborted_ = false;
};

class ThreadComm final : public Communicator {
 public:
  ThreadComm(Rendezvous& rv, int tp_rank, int tp_size)
      : rv_(rv), local_{tp_rank}, tp_size_(tp_size) {}
  int tp_size() const override { return tp_size_; }
  const std::vector<int>& local_ranks() const override { return local_; }
  CommMemory memory() const override { return CommMemory::host; }

  using Communicator::all_gather;
  using Communicator::all_reduce_sum;

  void all_gather(const void* const* send, void* recv, size_t bytes, void* stream) override {
    no_stream("all_gather", stream);
    rv_.exchange(tp_rank(), send[0], [&](const std::vector<const void*>& all) {
      auto* out = static_cast<unsigned char*>(recv);
      for (int r = 0; r < tp_size_; ++r) std::memcpy(out + r * bytes, all[r], bytes);
    });
  }

  // Every rank computes the whole tree over all ranks' partials (the same bits
  // on each), then overwrites its own buffer once every rank has read them.
  void all_reduce_sum(float* const* data, size_t count, void* stream) override {
    no_stream("all_reduce_sum", stream);
    std::vector<float> sum(count), p(static_cast<size_t>(tp_size_));
    rv_.exchange(tp_rank(), data[0], [&](const std::vector<const void*>& all) {
      for (size_t i = 0; i < count; ++i) {
        for (int r = 0; r < tp_size_; ++r) p[r] = static_cast<const float*>(all[r])[i];
        sum[i] = canonical_tree_sum(p.data(), tp_size_);
      }
    });
    std::memcpy(data[0], sum.data(), count * sizeof(float));
  }

  void barrier() override { rv_.wait(); }

 private:
  static void no_stream(const char* op, void* stream) {
    if (stream != nullptr)
      throw InvalidArgument(std::string("thread-group communicator ") + op +
                            ": host collectives take no stream");
  }

  Rendezvous& rv_;
  std::vector<int> local_;
  int tp_size_;
};

}  // namespace

void run_thread_group(int tp_size, const std::function<void(Communicator&)>& fn) {
  if (tp_size < 1)
    throw InvalidArgument("run_thread_group: ranks must be >= 1, got " + std::to_string(tp_size));
  Rendezvous rv(tp_size);
  std::vector<std::exception_ptr> errors(tp_size);
  std::vector<std::thread> threads;
  threads.reserve(tp_size);
  for (int r = 0; r < tp_size; ++r) {
    threads.emplace_back([&, r] {
      ThreadComm comm(rv, r, tp_size);
      try {
        fn(comm);
      } catch (const GroupAborted&) {
        // Another rank failed first; its error is reported.
      } catch (...) {
        // The message names the rank ("TP rank r of n: "), the type is kept.
        errors[r] = tp_size > 1 ? prefixed_error(std::current_exception(),
                                                 "TP rank " + std::to_string(r) + " of " +
                                                     std::to_string(tp_size) + ": ")
                                : std::current_exception();
        rv.abort();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace sparkdraft
