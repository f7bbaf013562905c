// A general host thread pool, below every room that runs host work in parallel (the
// CPU reference ops, the checkpoint loader's scans).
//
// Splits [0, n) into `threads` contiguous, nearly equal ranges and runs
// fn(begin, end) on each; with threads <= 1 (or n <= 1) fn(0, n) runs inline.
// The ops give every index the same arithmetic whatever range it falls in, so
// results never depend on the thread count. An exception thrown by fn is
// rethrown here after every range has finished (the lowest range's first).
//
// The ranges run on one process-wide pool of worker threads, started once on
// first use and sized to the machine (hardware concurrency - 1 workers; the
// caller is the last thread): no thread is created per call, so a large
// `threads` only makes more, smaller ranges, never more threads. The caller
// runs the first range itself and then, while its other ranges are still
// queued, takes queued ranges (its own or another caller's) rather than
// sleeping, so nested and concurrent calls (the Markov loop's thread ranks)
// cannot deadlock the pool.
#pragma once

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace sparkdraft {

class ThreadPool {
 public:
  // The process-wide pool (started on first use).
  static ThreadPool& instance() {
    static ThreadPool pool(static_cast<int>(std::max(2u, std::thread::hardware_concurrency())) - 1);
    return pool;
  }

  explicit ThreadPool(int workers) {
    workers_.reserve(static_cast<size_t>(workers));
    for (int i = 0; i < workers; ++i) workers_.emplace_back([this] { work(); });
  }
  ~ThreadPool() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    for (auto& w : workers_) w.join();
  }
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int workers() const { return static_cast<int>(workers_.size()); }

  // Runs task(0) .. task(count - 1), task(0) on the calling thread, and
  // returns when all have finished. task must not throw (parallel_for wraps).
  void run(int64_t count, const std::function<void(int64_t)>& task) {
    if (count <= 0) return;
    Job job{&task, count - 1};
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (int64_t i = 1; i < count; ++i) queue_.push_back({&job, i});
    }
    if (count > 1) {
      cv_.notify_all();
      done_cv_.notify_all();  // helpers waiting in other calls may take these
    }
    task(0);
    // Help while our ranges are pending: run queued items (ours or others').
    std::unique_lock<std::mutex> lock(mu_);
    while (job.pending > 0) {
      if (!queue_.empty()) {
        Item item = queue_.front();
        queue_.pop_front();
        lock.unlock();
        execute(item);
        lock.lock();
      } else {
        done_cv_.wait(lock, [&] { return job.pending == 0 || !queue_.empty(); });
      }
    }
  }

 private:
  struct Job {
    const std::function<void(int64_t)>* task;
    int64_t pending;  // guarded by mu_
  };
  struct Item {
    Job* job;
    int64_t index;
  };

  void execute(const Item& item) {
    (*item.job->task)(item.index);
    {
      std::lock_guard<std::mutex> lock(mu_);
      --item.job->pending;
    }
    done_cv_.notify_all();
  }

  void work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stop_ and nothing left
      Item item = queue_.front();
      queue_.pop_front();
      lock.unlock();
      execute(item);
      lock.lock();
    }
  }

  std::mutex mu_;
  std::condition_variable cv_;       // workers: work queued or stop
  std::condition_variable done_cv_;  // callers: an item finished or work queued
  std::deque<Item> queue_;
  bool stop_ = false;
  std::vector<std::thread> workers_;
};

template <class Fn>
void parallel_for(int64_t n, int threads, Fn&& fn) {
  if (n <= 0) return;
  const int64_t parts = std::min<int64_t>(std::max(threads, 1), n);
  if (parts == 1) {
    fn(int64_t{0}, n);
    return;
  }
  std::vector<std::exception_ptr> errors(static_cast<size_t>(parts));
  const std::function<void(int64_t)> task = [&](int64_t part) {
    try {
      fn(n * part / parts, n * (part + 1) / parts);
    } catch (...) {
      errors[static_cast<size_t>(part)] = std::current_exception();
    }
  };
  ThreadPool::instance().run(parts, task);
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace sparkdraft
