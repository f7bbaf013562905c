// Persistent TP rank threads (the GPU backend's make_cuda_backend runs on them): a
// group runner starts one thread per rank and runs a serve loop on each for as long
// as the pool lives; run(job) hands the same job to every rank and waits for all.
//
// The group runner is run_thread_group (comm.h) or run_nccl_group
// (cuda/nccl_comm.h), wrapped as the caller needs (a device communicator over the
// thread group's host one, the device made current): it calls serve(comm) once on
// each rank's thread and returns when every serve has returned, rethrowing the error
// that stopped the group, named by its rank.
//
// Faults: a job that throws on one rank ends that rank's serve loop with the error;
// the group runner then stops every rank (a rank waiting in a collective is
// released, a rank that finished the job stops instead of waiting for the next).
// run() rethrows the first error a job threw, its message prefixed "TP rank r of n: "
// and its type kept (not what it set off on the other ranks), or else the group
// runner's own error; so does every later run(): the pool does not restart.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>

#include "sparkdraft/comm.h"

namespace sparkdraft {

class RankPool {
 public:
  using Job = std::function<void(int tp_rank, Communicator& comm)>;
  using Serve = std::function<void(Communicator& comm)>;
  using Group = std::function<void(const Serve& serve)>;

  // Starts `group` on a thread of its own; tp_size is the group's rank count.
  RankPool(int tp_size, Group group);
  // Stops the serve loops and joins the group (after the job in flight, if any).
  ~RankPool();
  RankPool(const RankPool&) = delete;
  RankPool& operator=(const RankPool&) = delete;

  // job(tp_rank, comm) on every rank; returns when all are done. Rethrows the
  // group's error when a rank failed (now or in an earlier call).
  void run(const Job& job);
  int size() const { return tp_size_; }

 private:
  void serve(Communicator& comm);
  void rethrow_locked();

  int tp_size_;
  std::mutex mu_;
  std::condition_variable cv_;
  const Job* job_ = nullptr;
  long job_id_ = 0;
  int done_ = 0;
  bool stop_ = false, failed_ = false, finished_ = false;
  std::exception_ptr first_error_;  // the first job error, named by its rank
  std::exception_ptr error_;        // what the group runner threw
  std::thread runner_;
};

}  // namespace sparkdraft
