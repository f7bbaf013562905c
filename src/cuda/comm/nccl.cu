// The NCCL communicator (cuda/nccl_comm.h): one rank per object; all_gather is
// one ncclAllGather, all_reduce_sum an ncclAllGather of the fp32 partials into a
// scratch followed by one kernel that completes the tree of core/reduce.h per
// element. Every host wait polls ncclCommGetAsyncError (non-blocking
// communicators) with a timeout; run_nccl_group aborts the whole group when one
// rank fails, so no rank waits forever.
#if defined(SPARKDRAFT_HAVE_NCCL)

#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <condition_variable>
#include <cstdint>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "cuda/comm/gathered_tree.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/nccl_comm.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {

namespace {

using Clock = std::chrono::steady_clock;

// Thrown on a rank whose group was aborted because another rank failed (or
// straggled); run_nccl_group reports that rank's error instead.
struct NcclGroupAborted {};

// NVLink multicast must never be used (contract.md section 6): NCCL_NVLS_ENABLE unset
// becomes 0 (before NCCL reads it at its first initialization), 0 is kept,
// anything else is refused.
void require_nvls_off() {
  static std::mutex mu;
  std::lock_guard lock(mu);
  const char* value = std::getenv("NCCL_NVLS_ENABLE");
  if (value == nullptr) {
    if (::setenv("NCCL_NVLS_ENABLE", "0", 0) != 0)
      throw DeviceError("NCCL: cannot set NCCL_NVLS_ENABLE=0 in the environment");
    return;
  }
  if (std::string(value) == "0") return;
  throw InvalidArgument(std::string("NCCL_NVLS_ENABLE=") + value +
                        ": NVLink multicast (NVLS) must never be used on these machines; unset "
                        "NCCL_NVLS_ENABLE or set it to 0");
}

void check_timeout(double timeout_s, const char* who) {
  if (!(timeout_s > 0.0) || !std::isfinite(timeout_s))
    throw InvalidArgument(std::string(who) +
                          ": NcclOptions::timeout_s must be finite and > 0, got " +
                          std::to_string(timeout_s));
}

Clock::time_point deadline_after(double seconds) {
  return Clock::now() +
         std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// One poll step's pause: spin briefly (a queued collective settles in tens of
// microseconds), then sleep.
void pause(int spin) {
  if (spin < 64)
    std::this_thread::yield();
  else
    std::this_thread::sleep_for(std::chrono::microseconds(spin < 1024 ? 20 : 200));
}

// Makes `device` current for the scope; restores the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device) {
    SD_CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != device) SD_CUDA_CHECK(cudaSetDevice(device));
  }
  ~DeviceGuard() { cudaSetDevice(previous_); }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

}  // namespace

// ---- the group (run_nccl_group's ranks; a lone communicator has one of its own) ----

struct NcclGroup {
  explicit NcclGroup(int tp_size = 1) : finished(static_cast<size_t>(tp_size), 0) {}

  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> aborted{false};
  std::vector<NcclComm::Impl*> live;  // under mu: communicators that may be aborted
  // run_nccl_group's bookkeeping, under mu.
  std::vector<char> finished;
  int finished_count = 0;
  std::optional<Clock::time_point> first_return;
  int first_return_rank = -1;
  int root_rank = -1;  // the rank whose failure stopped the group
  std::string watchdog_error;

  // Registers a communicator (NcclGroupAborted when the group has already stopped).
  void join(NcclComm::Impl* impl) {
    std::lock_guard lock(mu);
    if (aborted) throw NcclGroupAborted{};
    live.push_back(impl);
  }
  void leave(NcclComm::Impl* impl) {
    std::lock_guard lock(mu);
    live.erase(std::remove(live.begin(), live.end(), impl), live.end());
  }
  // Stops the group: every live communicator is aborted (their ranks' waits end,
  // their kernels return). Returns whether this call stopped it.
  bool abort_all();
};

struct NcclComm::Impl {
  Impl(const NcclOptions& o, std::shared_ptr<NcclGroup> g) : options(o), group(std::move(g)) {}
  ~Impl() { teardown(); }

  NcclOptions options;
  std::shared_ptr<NcclGroup> group;
  ncclComm_t comm = nullptr;
  bool owns = false;
  int tp_rank = 0, tp_size = 1, device = 0;
  std::vector<int> local{0};
  // Serializes this rank's host NCCL calls on `comm` with an abort from another
  // thread (NcclGroup::abort_all).
  std::mutex mu;
  bool aborted = false;  // under mu: ncclCommAbort has run; the handle is gone
  bool broken = false;   // an NCCL error or a timeout: torn down by abort
  size_t capacity = 0;
  DeviceBuffer<float> scratch;  // tp_size x capacity
  DeviceBuffer<int> barrier_ints;
  std::optional<DeviceStream> barrier_stream;

  std::string where() const {
    return "rank " + std::to_string(tp_rank) + " of " + std::to_string(tp_size) + " (device " +
           std::to_string(device) + ")";
  }

  // Under mu.
  [[noreturn]] void fail_locked(const char* call, const char* file, int line, ncclResult_t r) {
    broken = true;
    std::string what = ncclGetErrorString(r);
    const char* last = comm != nullptr ? ncclGetLastError(comm) : nullptr;
    if (last != nullptr && *last != '\0') what += std::string(" (") + last + ")";
    throw_device_error("NCCL", call, file, line, what + " on " + where());
  }

  // Runs one NCCL call on the handle (under mu), then waits until it has been
  // queued: a non-blocking communicator answers ncclInProgress first.
  template <class Call>
  void queue(const char* call, const char* file, int line, Call nccl_call) {
    ncclResult_t r;
    {
      std::lock_guard lock(mu);
      if (aborted) throw NcclGroupAborted{};
      if (broken)
        throw DeviceError(std::string("NCCL: ") + call + " on " + where() +
                          ": the communicator failed earlier and cannot be used");
      r = nccl_call();
      if (r != ncclSuccess && r != ncclInProgress) {
        if (group->aborted) throw NcclGroupAborted{};
        fail_locked(call, file, line, r);
      }
    }
    if (r == ncclInProgress) poll(call, file, line, [] { return true; });
  }

  // Polls until the communicator's state is ncclSuccess and ready() holds; an
  // NCCL error, the group's abort or the timeout ends it.
  template <class Ready>
  void poll(const char* call, const char* file, int line, Ready ready) {
    const Clock::time_point deadline = deadline_after(options.timeout_s);
    for (int spin = 0;; ++spin) {
      {
        std::lock_guard lock(mu);
        if (aborted) throw NcclGroupAborted{};
        ncclResult_t state = ncclSuccess;
        const ncclResult_t r = ncclCommGetAsyncError(comm, &state);
        if (r != ncclSuccess) state = r;
        if (state != ncclSuccess && state != ncclInProgress) {
          if (group->aborted) throw NcclGroupAborted{};  // a consequence of another rank's failure
          fail_locked(call, file, line, state);
        }
        if (state == ncclSuccess && ready()) return;
      }
      if (group->aborted) throw NcclGroupAborted{};
      if (Clock::now() > deadline) {
        broken = true;
        std::ostringstream os;
        os << "NCCL: " << call << " did not complete within " << options.timeout_s << " s on "
           << where() << " (a peer that never joined it?) at " << file << ":" << line;
        throw DeviceError(os.str());
      }
      pause(spin);
    }
  }

  // Under mu: ncclCommAbort once (owned communicators only).
  void abort_locked() noexcept {
    if (comm == nullptr || aborted || !owns) return;
    ncclCommAbort(comm);
    comm = nullptr;
    aborted = true;
  }

  void require_device(const char* op) const {
    int current = -1;
    SD_CUDA_CHECK(cudaGetDevice(&current));
    if (current != device)
      throw InvalidArgument(std::string("NcclComm::") + op + " on " + where() + ": device " +
                            std::to_string(current) + " is current; make device " +
                            std::to_string(device) + " current (cudaSetDevice) on this thread");
  }

  // The scratch, the barrier's ints and stream, on the current device.
  void allocate(size_t max_reduce_count) {
    if (max_reduce_count > SIZE_MAX / sizeof(float) / static_cast<size_t>(tp_size))
      throw InvalidArgument("NcclComm: NcclOptions::max_reduce_count " +
                            std::to_string(max_reduce_count) + " is too large");
    scratch = DeviceBuffer<float>(max_reduce_count * static_cast<size_t>(tp_size));
    capacity = max_reduce_count;
    barrier_stream.emplace();
    barrier_ints = DeviceBuffer<int>(static_cast<size_t>(tp_size) + 1);
    barrier_ints.zero(barrier_stream->get());
    barrier_stream->synchronize();
  }

  // Finalizes (or, after a failure, aborts) an owned communicator, then frees
  // the buffers: a hung NCCL kernel is released before cudaFree waits for it.
  void teardown() noexcept {
    group->leave(this);
    {
      std::lock_guard lock(mu);
      if (comm != nullptr && !aborted && owns) {
        bool clean = !broken && !group->aborted && std::uncaught_exceptions() == 0;
        if (clean) {
          const ncclResult_t r = ncclCommFinalize(comm);
          clean = r == ncclSuccess || r == ncclInProgress;
          const Clock::time_point deadline = deadline_after(options.timeout_s);
          for (int spin = 0; clean; ++spin) {
            ncclResult_t state = ncclSuccess;
            if (ncclCommGetAsyncError(comm, &state) != ncclSuccess) state = ncclInternalError;
            if (state == ncclSuccess) break;
            if (state != ncclInProgress || group->aborted || Clock::now() > deadline) clean = false;
            pause(spin);
          }
        }
        if (clean) {
          ncclCommDestroy(comm);
          comm = nullptr;
        } else {
          abort_locked();
        }
      }
      comm = nullptr;
    }
    try {
      std::optional<DeviceGuard> guard;
      if (barrier_stream) guard.emplace(device);
      barrier_stream.reset();
      barrier_ints = DeviceBuffer<int>();
      scratch = DeviceBuffer<float>();
    } catch (...) {
      // A destructor does not throw; the CUDA error stays sticky for the next call.
    }
  }
};

bool NcclGroup::abort_all() {
  std::lock_guard lock(mu);
  const bool first = !aborted.exchange(true);
  for (NcclComm::Impl* impl : live) {
    std::lock_guard comm_lock(impl->mu);
    impl->abort_locked();
  }
  cv.notify_all();
  return first;
}

// ---- NcclComm ----

NcclComm::NcclComm(ncclComm_t comm, const NcclOptions& options)
    : impl_(std::make_unique<Impl>(options, std::make_shared<NcclGroup>())) {
  check_timeout(options.timeout_s, "NcclComm");
  require_nvls_off();
  if (comm == nullptr) throw InvalidArgument("NcclComm: the NCCL communicator is null");
  Impl& m = *impl_;
  m.comm = comm;
  m.owns = false;
  m.poll("the handed-over communicator's initialization", __FILE__, __LINE__, [] { return true; });
  SD_NCCL_CHECK(ncclCommCount(comm, &m.tp_size));
  SD_NCCL_CHECK(ncclCommUserRank(comm, &m.tp_rank));
  SD_NCCL_CHECK(ncclCommCuDevice(comm, &m.device));
  m.local = {m.tp_rank};
  DeviceGuard guard(m.device);
  m.allocate(options.max_reduce_count);
}

NcclComm::NcclComm(const ncclUniqueId& id, int tp_rank, int tp_size, int device,
                   const NcclOptions& options)
    : NcclComm(id, tp_rank, tp_size, device, options, std::make_shared<NcclGroup>()) {}

NcclComm::NcclComm(const ncclUniqueId& id, int tp_rank, int tp_size, int device,
                   const NcclOptions& options, std::shared_ptr<NcclGroup> group)
    : impl_(std::make_unique<Impl>(options, std::move(group))) {
  check_timeout(options.timeout_s, "NcclComm");
  if (tp_size < 1 || tp_rank < 0 || tp_rank >= tp_size)
    throw InvalidArgument("NcclComm: tp_rank " + std::to_string(tp_rank) + " of tp_size " +
                          std::to_string(tp_size) + ": need 0 <= tp_rank < tp_size");
  require_nvls_off();
  Impl& m = *impl_;
  m.tp_rank = tp_rank;
  m.tp_size = tp_size;
  m.device = device;
  m.local = {tp_rank};
  m.owns = true;
  SD_CUDA_CHECK(cudaSetDevice(device));
  ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
  config.blocking = 0;
  ncclComm_t comm = nullptr;
  ncclUniqueId unique_id = id;
  const ncclResult_t r = ncclCommInitRankConfig(&comm, tp_size, unique_id, tp_rank, &config);
  {
    std::lock_guard lock(m.mu);
    m.comm = comm;
    if (r != ncclSuccess && r != ncclInProgress)
      m.fail_locked("ncclCommInitRankConfig", __FILE__, __LINE__, r);
  }
  if (r == ncclInProgress)
    m.poll("ncclCommInitRankConfig", __FILE__, __LINE__, [] { return true; });
  m.allocate(options.max_reduce_count);
  m.group->join(&m);
}

NcclComm::~NcclComm() = default;

int NcclComm::tp_size() const { return impl_->tp_size; }
const std::vector<int>& NcclComm::local_ranks() const { return impl_->local; }
ncclComm_t NcclComm::handle() const { return impl_->comm; }
int NcclComm::device() const { return impl_->device; }
bool NcclComm::owned() const { return impl_->owns; }
size_t NcclComm::max_reduce_count() const { return impl_->capacity; }

void NcclComm::reserve_reduce(size_t count) {
  Impl& m = *impl_;
  if (count <= m.capacity) return;
  m.require_device("reserve_reduce");
  if (count > SIZE_MAX / sizeof(float) / static_cast<size_t>(m.tp_size))
    throw InvalidArgument("NcclComm::reserve_reduce: count " + std::to_string(count) +
                          " is too large");
  DeviceBuffer<float> grown(count * static_cast<size_t>(m.tp_size));
  SD_CUDA_CHECK(cudaDeviceSynchronize());  // the old scratch may still be read
  m.scratch = std::move(grown);
  m.capacity = count;
}

void NcclComm::enqueue(const char* what, const std::function<ncclResult_t()>& nccl_call) {
  Impl& m = *impl_;
  m.require_device("enqueue");
  m.queue(what, __FILE__, __LINE__, nccl_call);
}

void NcclComm::all_gather(const void* const* send, void* recv, size_t bytes, void* stream) {
  Impl& m = *impl_;
  m.require_device("all_gather");
  if (bytes == 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  m.queue("ncclAllGather", __FILE__, __LINE__,
          [&] { return ncclAllGather(send[0], recv, bytes, ncclUint8, m.comm, s); });
}

void NcclComm::all_reduce_sum(float* const* data, size_t count, void* stream) {
  Impl& m = *impl_;
  m.require_device("all_reduce_sum");
  if (count == 0) return;
  if (count > m.capacity)
    throw InvalidArgument("NcclComm::all_reduce_sum on " + m.where() + ": count " +
                          std::to_string(count) + " exceeds the capacity of " +
                          std::to_string(m.capacity) +
                          " floats per rank (NcclOptions::max_reduce_count, or reserve_reduce "
                          "outside capture)");
  if (m.tp_size > kMaxGatheredRanks)
    throw InvalidArgument("NcclComm::all_reduce_sum: " + std::to_string(m.tp_size) +
                          " ranks, at most " + std::to_string(kMaxGatheredRanks));
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  float* gathered = m.scratch.data();
  m.queue("ncclAllGather (all_reduce_sum's partials)", __FILE__, __LINE__,
          [&] { return ncclAllGather(data[0], gathered, count, ncclFloat32, m.comm, s); });
  gathered_tree_sum(gathered, data[0], m.tp_size, count, s);
}

void NcclComm::barrier() {
  Impl& m = *impl_;
  m.require_device("barrier");
  const cudaStream_t s = m.barrier_stream->get();
  int* ints = m.barrier_ints.data();
  m.queue("ncclAllGather (barrier)", __FILE__, __LINE__,
          [&] { return ncclAllGather(ints + m.tp_size, ints, 1, ncclInt32, m.comm, s); });
  m.poll("barrier (its ncclAllGather on the device)", __FILE__, __LINE__, [&] {
    const cudaError_t e = cudaStreamQuery(s);
    if (e == cudaErrorNotReady) return false;
    SD_CUDA_CHECK(e);
    return true;
  });
}

// ---- the version and the group runner ----

std::string nccl_version() {
  int code = 0;
  SD_NCCL_CHECK(ncclGetVersion(&code));
  // NCCL_VERSION(X, Y, Z): X*1000 + Y*100 + Z up to 2.8, X*10000 + Y*100 + Z after.
  const bool old_code = code < 20900;
  const int major = old_code ? code / 1000 : code / 10000;
  const int minor = old_code ? code / 100 % 10 : code / 100 % 100;
  const int patch = code % 100;
  return std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch);
}

void run_nccl_group(const std::vector<int>& devices, const std::function<void(NcclComm&)>& fn,
                    const NcclOptions& options) {
  require_nvls_off();
  const int n = static_cast<int>(devices.size());
  if (n < 1) throw InvalidArgument("run_nccl_group: no devices");
  check_timeout(options.timeout_s, "run_nccl_group");
  int device_count = 0;
  if (cudaGetDeviceCount(&device_count) != cudaSuccess) {
    (void)cudaGetLastError();
    device_count = 0;
  }
  for (int r = 0; r < n; ++r) {
    const int d = devices[static_cast<size_t>(r)];
    if (d < 0 || d >= device_count)
      throw InvalidArgument("run_nccl_group: device " + std::to_string(d) + " of rank " +
                            std::to_string(r) + " does not exist (" + std::to_string(device_count) +
                            " CUDA devices)");
    for (int k = 0; k < r; ++k)
      if (devices[static_cast<size_t>(k)] == d)
        throw InvalidArgument("run_nccl_group: device " + std::to_string(d) +
                              " is given to ranks " + std::to_string(k) + " and " +
                              std::to_string(r) + " (one GPU per rank)");
  }
  ncclUniqueId id;
  SD_NCCL_CHECK(ncclGetUniqueId(&id));

  auto group = std::make_shared<NcclGroup>(n);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(n));
  for (int r = 0; r < n; ++r) {
    threads.emplace_back([&, r] {
      std::unique_ptr<NcclComm> comm;
      try {
        SD_CUDA_CHECK(cudaSetDevice(devices[static_cast<size_t>(r)]));
        comm.reset(new NcclComm(id, r, n, devices[static_cast<size_t>(r)], options, group));
        fn(*comm);
        std::lock_guard lock(group->mu);
        if (!group->first_return) {
          group->first_return = Clock::now();
          group->first_return_rank = r;
        }
      } catch (const NcclGroupAborted&) {
        // Another rank failed first; its error is reported.
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
        {
          std::lock_guard lock(group->mu);
          if (group->root_rank < 0 && !group->aborted) group->root_rank = r;
        }
        group->abort_all();
      }
      comm.reset();  // finalized, or aborted when the group failed
      std::lock_guard lock(group->mu);
      group->finished[static_cast<size_t>(r)] = 1;
      ++group->finished_count;
      group->cv.notify_all();
    });
  }

  // The watchdog: a rank that has not returned options.timeout_s after another
  // returned waits on a collective the others never called.
  {
    std::unique_lock lock(group->mu);
    while (group->finished_count < n) {
      if (!group->aborted && group->first_return &&
          Clock::now() - *group->first_return > std::chrono::duration<double>(options.timeout_s)) {
        std::ostringstream os;
        os << "run_nccl_group: ranks still running " << options.timeout_s << " s after rank "
           << group->first_return_rank << " returned:";
        for (int r = 0; r < n; ++r)
          if (!group->finished[static_cast<size_t>(r)])
            os << " rank " << r << " (device " << devices[static_cast<size_t>(r)] << ")";
        os << " (waiting on a collective that not every rank called?); the group was aborted";
        group->watchdog_error = os.str();
        lock.unlock();
        group->abort_all();
        lock.lock();
        continue;
      }
      group->cv.wait_for(lock, std::chrono::milliseconds(20));
    }
  }
  for (auto& t : threads) t.join();

  auto prefix = [&](int r) {
    return "rank " + std::to_string(r) + " (device " +
           std::to_string(devices[static_cast<size_t>(r)]) + "): ";
  };
  // The error that stopped the group first (a rank's, else the watchdog's), then
  // any other by rank.
  if (group->root_rank >= 0 && errors[static_cast<size_t>(group->root_rank)])
    std::rethrow_exception(
        prefixed_error(errors[static_cast<size_t>(group->root_rank)], prefix(group->root_rank)));
  if (!group->watchdog_error.empty()) throw DeviceError(group->watchdog_error);
  for (int r = 0; r < n; ++r)
    if (errors[static_cast<size_t>(r)])
      std::rethrow_exception(prefixed_error(errors[static_cast<size_t>(r)], prefix(r)));
}

}  // namespace sparkdraft::cuda

#endif  // SPARKDRAFT_HAVE_NCCL
