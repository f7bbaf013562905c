// CPU thread-group communicator: ranks are threads of one process sharing a
// rendezvous, one local rank per communicator, host memory. Collectives follow a
// fixed order (all_gather places rank k at block k; all_reduce_sum is the tree of
// core/reduce.h), so results never depend on thread timing (the CPU stand-in for
// NCCL that CI proves TP logic with).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <mutex>
#include <sstream>
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

// Where every collective of the group meets. A rank that waits there is released
// when every rank has arrived; it fails instead (an Error naming the collective
// and the ranks that did not come) when a rank has returned from the group's
// function (it can never arrive: the others called a collective it did not) or
// when `timeout_s` passes first; it stops (GroupAborted) when another rank failed.
class Rendezvous {
 public:
  Rendezvous(int n, double timeout_s)
      : n_(n),
        timeout_s_(timeout_s),
        slots_(n),
        arrived_(n, 0),
        returned_(n, 0),
        collectives_(n, 0) {}

  // Every rank publishes a pointer; once all have arrived, `use` runs on each
  // rank with every rank's pointer; a second barrier keeps the pointers alive
  // until all ranks have used them.
  template <class Use>
  void exchange(int rank, const char* what, const void* mine, Use use) {
    slots_[rank] = mine;
    wait(rank, what);
    use(slots_);
    wait(rank, what, false);
  }

  // `starts`: this wait begins a collective (counted for the messages); the second
  // wait of an exchange does not.
  void wait(int rank, const char* what, bool starts = true) {
    std::unique_lock lock(mu_);
    if (aborted_) throw GroupAborted{};
    if (starts) ++collectives_[rank];
    if (returned_count_ > 0) fail(rank, what, "returned without calling it");
    const uint64_t gen = generation_;
    arrived_[rank] = 1;
    if (++arrived_count_ == n_) {
      arrived_count_ = 0;
      std::fill(arrived_.begin(), arrived_.end(), 0);
      ++generation_;
      cv_.notify_all();
      return;
    }
    const auto deadline = std::chrono::steady_clock::now() +
                          std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                              std::chrono::duration<double>(timeout_s_));
    const bool woken = cv_.wait_until(
        lock, deadline, [&] { return generation_ != gen || aborted_ || returned_count_ > 0; });
    if (generation_ != gen) return;
    if (aborted_) throw GroupAborted{};
    if (returned_count_ > 0) fail(rank, what, "returned without calling it");
    if (!woken) {
      std::ostringstream os;
      os << "did not come within " << timeout_s_ << " s";
      fail(rank, what, os.str());
    }
  }

  // Rank `rank` has left the group's function without an error.
  void returned(int rank) {
    std::lock_guard lock(mu_);
    returned_[rank] = 1;
    ++returned_count_;
    cv_.notify_all();
  }

  void abort() {
    std::lock_guard lock(mu_);
    aborted_ = true;
    cv_.notify_all();
  }

 private:
  // Under mu_: the waiting rank's error, naming its collective and the ranks that
  // have not arrived at it (those that returned, or all the missing ones).
  [[noreturn]] void fail(int rank, const char* what, const std::string& why) {
    std::ostringstream os;
    os << "collective " << collectives_[rank] << " (" << what << ") waits for";
    for (int r = 0; r < n_; ++r)
      if (!arrived_[r] && r != rank && (returned_count_ == 0 || returned_[r])) os << " rank " << r;
    os << ", which " << why << " (every rank must call the same collectives in the same order)";
    throw Error(os.str());
  }

  int n_;
  double timeout_s_;
  std::vector<const void*> slots_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<char> arrived_, returned_;
  std::vector<uint64_t> collectives_;  // per rank: collectives entered (for the messages)
  int arrived_count_ = 0, returned_count_ = 0;
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
    rv_.exchange(tp_rank(), "all_gather", send[0], [&](const std::vector<const void*>& all) {
      auto* out = static_cast<unsigned char*>(recv);
      for (int r = 0; r < tp_size_; ++r) std::memcpy(out + r * bytes, all[r], bytes);
    });
  }

  // Every rank computes the whole tree over all ranks' partials (the same bits
  // on each), then overwrites its own buffer once every rank has read them.
  void all_reduce_sum(float* const* data, size_t count, void* stream) override {
    no_stream("all_reduce_sum", stream);
    std::vector<float> sum(count), p(static_cast<size_t>(tp_size_));
    rv_.exchange(tp_rank(), "all_reduce_sum", data[0], [&](const std::vector<const void*>& all) {
      for (size_t i = 0; i < count; ++i) {
        for (int r = 0; r < tp_size_; ++r) p[r] = static_cast<const float*>(all[r])[i];
        sum[i] = canonical_tree_sum(p.data(), tp_size_);
      }
    });
    std::memcpy(data[0], sum.data(), count * sizeof(float));
  }

  void barrier() override { rv_.wait(tp_rank(), "barrier"); }

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

void run_thread_group(int tp_size, const std::function<void(Communicator&)>& fn, double timeout_s) {
  if (tp_size < 1)
    throw InvalidArgument("run_thread_group: ranks must be >= 1, got " + std::to_string(tp_size));
  if (!(timeout_s > 0.0) || !std::isfinite(timeout_s))
    throw InvalidArgument("run_thread_group: timeout_s must be finite and > 0, got " +
                          std::to_string(timeout_s));
  Rendezvous rv(tp_size, timeout_s);
  std::vector<std::exception_ptr> errors(tp_size);
  std::vector<std::thread> threads;
  threads.reserve(tp_size);
  for (int r = 0; r < tp_size; ++r) {
    threads.emplace_back([&, r] {
      ThreadComm comm(rv, r, tp_size);
      try {
        fn(comm);
        rv.returned(r);
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
