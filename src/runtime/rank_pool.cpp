// RankPool (rank_pool.h): the serve loops and the hand-over of jobs.
#include "runtime/rank_pool.h"

#include <string>
#include <utility>

#include "sparkdraft/error.h"

namespace sparkdraft {

RankPool::RankPool(int tp_size, Group group) : tp_size_(tp_size) {
  if (tp_size < 1)
    throw InvalidArgument("RankPool: tp_size must be >= 1, got " + std::to_string(tp_size));
  runner_ = std::thread([this, group = std::move(group)] {
    try {
      group([this](Communicator& comm) { serve(comm); });
    } catch (...) {
      std::lock_guard lock(mu_);
      error_ = std::current_exception();
    }
    std::lock_guard lock(mu_);
    finished_ = true;
    cv_.notify_all();
  });
}

RankPool::~RankPool() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
    cv_.notify_all();
  }
  runner_.join();
}

void RankPool::run(const Job& job) {
  std::unique_lock lock(mu_);
  if (finished_) rethrow_locked();
  job_ = &job;
  ++job_id_;
  done_ = 0;
  cv_.notify_all();
  cv_.wait(lock, [&] { return done_ == tp_size_ || finished_; });
  job_ = nullptr;
  if (done_ != tp_size_ || finished_) {
    cv_.wait(lock, [&] { return finished_; });
    rethrow_locked();
  }
}

void RankPool::rethrow_locked() {
  if (first_error_) std::rethrow_exception(first_error_);
  if (error_) std::rethrow_exception(error_);
  throw Error("RankPool: the TP ranks have stopped");
}

void RankPool::serve(Communicator& comm) {
  const int tp_rank = comm.tp_rank();
  long seen = 0;
  for (;;) {
    const Job* job = nullptr;
    {
      std::unique_lock lock(mu_);
      cv_.wait(lock, [&] { return stop_ || failed_ || job_id_ != seen; });
      if (stop_ || failed_) return;
      seen = job_id_;
      job = job_;
    }
    try {
      (*job)(tp_rank, comm);
    } catch (...) {
      std::lock_guard lock(mu_);
      // The first error is the cause; what it sets off on the other ranks (a
      // collective released by the abort, a peer that left the group) is not.
      if (!first_error_)
        first_error_ = tp_size_ > 1 ? prefixed_error(std::current_exception(),
                                                     "TP rank " + std::to_string(tp_rank) + " of " +
                                                         std::to_string(tp_size_) + ": ")
                                    : std::current_exception();
      failed_ = true;  // the ranks that finish this job stop instead of waiting for the next
      cv_.notify_all();
      throw;
    }
    std::lock_guard lock(mu_);
    ++done_;
    cv_.notify_all();
  }
}

}  // namespace sparkdraft
