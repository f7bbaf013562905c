// CPU thread-group communicator: ranks are threads of one process sharing a
// rendezvous. Collectives follow a fixed rank order, so results never depend on
// thread timing (the CPU stand-in for NCCL that CI proves TP logic with).
#include <algorithm>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <thread>

#include "sparkdraft/comm.h"
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
  ThreadComm(Rendezvous& rv, int rank, int size) : rv_(rv), rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void all_gather(const void* send, void* recv, size_t bytes) override {
    rv_.exchange(rank_, send, [&](const std::vector<const void*>& all) {
      auto* out = static_cast<unsigned char*>(recv);
      for (int r = 0; r < size_; ++r) std::memcpy(out + r * bytes, all[r], bytes);
    });
  }

  void all_reduce_sum(float* data, size_t count) override {
    std::vector<float> sum(count);
    rv_.exchange(rank_, data, [&](const std::vector<const void*>& all) {
      for (size_t i = 0; i < count; ++i) {
        float acc = static_cast<const float*>(all[0])[i];
        for (int r = 1; r < size_; ++r) acc = acc + static_cast<const float*>(all[r])[i];
        sum[i] = acc;
      }
    });
    std::memcpy(data, sum.data(), count * sizeof(float));
  }

  void barrier() override { rv_.wait(); }

 private:
  Rendezvous& rv_;
  int rank_, size_;
};

}  // namespace

void run_thread_group(int ranks, const std::function<void(Communicator&)>& fn) {
  if (ranks < 1)
    throw InvalidArgument("run_thread_group: ranks must be >= 1, got " + std::to_string(ranks));
  Rendezvous rv(ranks);
  std::vector<std::exception_ptr> errors(ranks);
  std::vector<std::thread> threads;
  threads.reserve(ranks);
  for (int r = 0; r < ranks; ++r) {
    threads.emplace_back([&, r] {
      ThreadComm comm(rv, r, ranks);
      try {
        fn(comm);
      } catch (const GroupAborted&) {
        // Another rank failed first; its error is reported.
      } catch (...) {
        errors[r] = std::current_exception();
        rv.abort();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace sparkdraft
