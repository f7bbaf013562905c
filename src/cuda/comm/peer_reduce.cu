// The fused all-reduce (cuda/comm/peer_reduce.h): the host side and the plain sum; the
// device pieces are in peer_reduce_device.cuh, the boundary's kernels in
// peer_reduce_boundary_f32.cu and peer_reduce_boundary_bf16.cu.
#include "cuda/comm/peer_reduce.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>

#include "cuda/comm/peer_reduce_device.cuh"
#include "cuda/common/launch.h"
#include "sparkdraft/core/reduce.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {
using namespace peer_detail;
namespace {

// This process's token: the pid and a random word drawn once.
uint64_t process_token() {
  static const uint64_t token = [] {
    std::random_device rd;
    return (static_cast<uint64_t>(getpid()) << 32) ^ rd();
  }();
  return token;
}

}  // namespace

bool module_loading_is_lazy() {
  // The driver's cuModuleGetLoadingMode through the runtime (nothing links libcuda).
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion("cuModuleGetLoadingMode", &fn, 12000, cudaEnableDefault,
                                       &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || fn == nullptr) {
    (void)cudaGetLastError();
    throw DeviceError("module_loading_is_lazy: the driver has no cuModuleGetLoadingMode");
  }
  CUmoduleLoadingMode mode{};
  if (reinterpret_cast<PFN_cuModuleGetLoadingMode_v11070>(fn)(&mode) != CUDA_SUCCESS)
    throw DeviceError("module_loading_is_lazy: cuModuleGetLoadingMode failed");
  return mode == CU_MODULE_LAZY_LOADING;
}

PeerAllReduce::PeerAllReduce(int tp_rank, int tp_size, const PeerReduceOptions& options)
    : rank_(tp_rank), tp_(tp_size), options_(options) {
  if (tp_size < 1 || tp_size > kMaxRanks)
    throw InvalidArgument("PeerAllReduce: " + std::to_string(tp_size) + " ranks, need 1 to " +
                          std::to_string(kMaxRanks));
  if (tp_rank < 0 || tp_rank >= tp_size)
    throw InvalidArgument("PeerAllReduce: rank " + std::to_string(tp_rank) + " of " +
                          std::to_string(tp_size));
  if (options.max_count == 0 || options.max_slots < 1)
    throw InvalidArgument("PeerAllReduce: max_count and max_slots must be >= 1");
  if (!(options.timeout_s > 0.0) || !std::isfinite(options.timeout_s))
    throw InvalidArgument("PeerAllReduce: timeout_s must be finite and > 0");
  options_.max_count = (options.max_count + 7) / 8 * 8;  // 16-byte aligned regions
  SD_CUDA_CHECK(cudaGetDevice(&device_));
  const size_t tp = static_cast<size_t>(tp_size);
  mailbox_ = DeviceBuffer<float>(2 * tp * options_.max_count);
  flags_ = DeviceBuffer<uint64_t>(tp * static_cast<size_t>(options_.max_slots));
  state_ = DeviceBuffer<uint64_t>(kStateWords);
  SD_CUDA_CHECK(cudaMemset(flags_.data(), 0, flags_.bytes()));
  SD_CUDA_CHECK(cudaMemset(state_.data(), 0, state_.bytes()));
  SD_CUDA_CHECK(cudaHostAlloc(&timeout_host_, 2 * sizeof(int), cudaHostAllocMapped));
  timeout_host_[0] = timeout_host_[1] = 0;
  SD_CUDA_CHECK(
      cudaHostGetDevicePointer(reinterpret_cast<void**>(&timeout_dev_), timeout_host_, 0));
  cudaDeviceProp prop{};
  SD_CUDA_CHECK(cudaGetDeviceProperties(&prop, device_));
  std::memcpy(uuid_, prop.uuid.bytes, sizeof uuid_);
  // The handles for peers in other processes; a platform without CUDA IPC keeps
  // ipc_ false, and such peers are refused by name.
  ipc_ = cudaIpcGetMemHandle(&mailbox_ipc_, mailbox_.data()) == cudaSuccess &&
         cudaIpcGetMemHandle(&flags_ipc_, flags_.data()) == cudaSuccess;
  if (!ipc_) (void)cudaGetLastError();
  SD_CUDA_CHECK(cudaDeviceSynchronize());  // zeroed before any peer can see the endpoint
}

PeerAllReduce::~PeerAllReduce() {
  for (void* p : opened_) cudaIpcCloseMemHandle(p);
  if (timeout_host_) cudaFreeHost(timeout_host_);
}

PeerEndpoint PeerAllReduce::endpoint() const {
  PeerEndpoint e;
  // Peers write these: the buffers are this object's, handed out for that.
  e.mailbox = const_cast<float*>(mailbox_.data());
  e.flags = const_cast<uint64_t*>(flags_.data());
  e.mailbox_ipc = mailbox_ipc_;
  e.flags_ipc = flags_ipc_;
  e.ipc = ipc_;
  e.device = device_;
  std::memcpy(e.device_uuid, uuid_, sizeof uuid_);
  e.tp_rank = rank_;
  e.process = process_token();
  e.max_count = options_.max_count;
  e.max_slots = options_.max_slots;
  return e;
}

bool PeerAllReduce::same_gpu(const PeerEndpoint& e) const {
  return std::memcmp(e.device_uuid, uuid_, sizeof uuid_) == 0;
}

std::string PeerAllReduce::refusal(const std::vector<PeerEndpoint>& peers) const {
  if (static_cast<int>(peers.size()) != tp_)
    return std::to_string(peers.size()) + " endpoints for " + std::to_string(tp_) + " ranks";
  for (int r = 0; r < tp_; ++r) {
    const PeerEndpoint& p = peers[static_cast<size_t>(r)];
    const std::string who = "endpoint " + std::to_string(r);
    if (p.tp_rank != r) return who + " is rank " + std::to_string(p.tp_rank);
    if (p.max_count != options_.max_count || p.max_slots != options_.max_slots)
      return who + " was built with max_count " + std::to_string(p.max_count) + " and max_slots " +
             std::to_string(p.max_slots) + ", this rank with " +
             std::to_string(options_.max_count) + " and " + std::to_string(options_.max_slots);
    if (!p.mailbox || !p.flags) return who + " has no buffers";
    if (p.process != process_token()) {
      if (!p.ipc) return who + " is in another process and has no CUDA IPC handles";
      continue;  // its device ordinal is its own process's: cudaIpcOpenMemHandle decides
    }
    if (p.device == device_) continue;
    int can = 0;
    SD_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device_, p.device));
    if (!can)
      return "device " + std::to_string(device_) + " (rank " + std::to_string(rank_) +
             ") has no peer access to device " + std::to_string(p.device) + " (rank " +
             std::to_string(r) + ")";
  }
  return "";
}

void PeerAllReduce::connect(const std::vector<PeerEndpoint>& peers) {
  if (connected_) throw InvalidArgument("PeerAllReduce::connect: already connected");
  const std::string why = refusal(peers);
  if (!why.empty()) throw InvalidArgument("PeerAllReduce::connect: " + why);
  std::vector<float*> mail;
  std::vector<uint64_t*> flags;
  std::vector<void*> opened;
  // Opens one IPC handle of rank r (another process) into `opened`.
  auto open = [&](const cudaIpcMemHandle_t& h, int r) {
    void* p = nullptr;
    const cudaError_t e = cudaIpcOpenMemHandle(&p, h, cudaIpcMemLazyEnablePeerAccess);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      throw DeviceError("PeerAllReduce::connect: rank " + std::to_string(rank_) +
                        " cannot open the memory of rank " + std::to_string(r) +
                        " (another process): " + cudaGetErrorString(e));
    }
    opened.push_back(p);
    return p;
  };
  try {
    for (const PeerEndpoint& p : peers) {
      if (p.process != process_token()) {
        mail.push_back(static_cast<float*>(open(p.mailbox_ipc, p.tp_rank)));
        flags.push_back(static_cast<uint64_t*>(open(p.flags_ipc, p.tp_rank)));
        continue;
      }
      mail.push_back(p.mailbox);
      flags.push_back(p.flags);
      if (p.device == device_) continue;
      const cudaError_t e = cudaDeviceEnablePeerAccess(p.device, 0);
      if (e == cudaErrorPeerAccessAlreadyEnabled)
        (void)cudaGetLastError();
      else
        SD_CUDA_CHECK(e);
    }
  } catch (...) {
    for (void* p : opened) cudaIpcCloseMemHandle(p);
    throw;
  }
  peer_mailbox_ = std::move(mail);
  peer_flags_ = std::move(flags);
  opened_ = std::move(opened);
  connected_ = true;
}

std::vector<PeerEndpoint> PeerAllReduce::exchange(Communicator& comm) const {
  if (comm.memory() != CommMemory::device || comm.local_ranks().size() != 1 ||
      comm.tp_rank() != rank_ || comm.tp_size() != tp_)
    throw InvalidArgument(
        "PeerAllReduce::exchange: the communicator must be a device "
        "communicator of this rank (" +
        std::to_string(rank_) + " of " + std::to_string(tp_) + ")");
  const PeerEndpoint mine = endpoint();
  DeviceBuffer<unsigned char> send(sizeof(PeerEndpoint)), recv(sizeof(PeerEndpoint) * tp_);
  send.upload(reinterpret_cast<const unsigned char*>(&mine), sizeof(PeerEndpoint));
  SD_CUDA_CHECK(cudaDeviceSynchronize());
  comm.all_gather(static_cast<const void*>(send.data()), recv.data(), sizeof(PeerEndpoint),
                  nullptr);
  SD_CUDA_CHECK(cudaDeviceSynchronize());
  std::vector<unsigned char> bytes(recv.size());
  recv.download(bytes.data(), bytes.size());
  std::vector<PeerEndpoint> all(static_cast<size_t>(tp_));
  std::memcpy(all.data(), bytes.data(), bytes.size());
  return all;
}

std::string PeerAllReduce::connect_group(
    Communicator& comm, const std::function<std::string(const std::vector<PeerEndpoint>&)>& also) {
  const std::vector<PeerEndpoint> all = exchange(comm);
  std::string why = refusal(all);
  if (why.empty() && also) why = also(all);
  if (why.empty()) {
    try {
      connect(all);  // peer access, or the IPC handles of other processes
    } catch (const DeviceError& e) {
      why = e.what();
    }
  }
  // Every rank learns whether every rank connected.
  const int mine = why.empty() ? 1 : 0;
  DeviceBuffer<int> send(1), recv(static_cast<size_t>(tp_));
  send.upload(&mine, 1);
  SD_CUDA_CHECK(cudaDeviceSynchronize());
  comm.all_gather(static_cast<const void*>(send.data()), recv.data(), sizeof(int), nullptr);
  SD_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<int> votes = recv.download();
  for (int r = 0; r < tp_ && why.empty(); ++r)
    if (votes[static_cast<size_t>(r)] != 1) why = "rank " + std::to_string(r) + " cannot run it";
  return why;
}

void PeerAllReduce::check() const {
  const volatile int* t = timeout_host_;
  if (t[0] == 0) return;
  throw DeviceError("fused all-reduce, TP rank " + std::to_string(rank_) + " of " +
                    std::to_string(tp_) + ": rank " + std::to_string(t[0] - 1) +
                    "'s partial did not arrive within " + std::to_string(options_.timeout_s) +
                    " s (call " + std::to_string(t[1]) +
                    "); the ranks are out of step and this group takes no more calls");
}

void PeerAllReduce::require_ready(const char* op, size_t count, int slots) const {
  check();
  if (!connected_) throw InvalidArgument(std::string("PeerAllReduce::") + op + ": not connected");
  if (count > options_.max_count || slots > options_.max_slots)
    throw InvalidArgument(
        std::string("PeerAllReduce::") + op + ": " + std::to_string(count) + " floats in " +
        std::to_string(slots) + " blocks; this group was built for " +
        std::to_string(options_.max_count) + " and " + std::to_string(options_.max_slots));
}

namespace {

PeerArgs peer_args(const std::vector<float*>& mailbox, const std::vector<uint64_t*>& flags, int me,
                   int max_slots, size_t cap, uint64_t* state, int* timeout, double timeout_s) {
  PeerArgs a{};
  for (size_t r = 0; r < mailbox.size(); ++r) {
    a.mailbox[r] = mailbox[r];
    a.flags[r] = reinterpret_cast<unsigned long long*>(flags[r]);
  }
  a.tp = static_cast<int>(mailbox.size());
  a.me = me;
  a.max_slots = max_slots;
  a.cap = static_cast<int64_t>(cap);
  a.state = reinterpret_cast<unsigned long long*>(state);
  a.timeout = timeout;
  a.timeout_ns = static_cast<unsigned long long>(timeout_s * 1e9);
  return a;
}

}  // namespace

void PeerAllReduce::all_reduce_sum(float* data, size_t count, cudaStream_t stream) {
  if (count == 0) return;
  if (!data) throw InvalidArgument("PeerAllReduce::all_reduce_sum: data must not be null");
  const int64_t n = static_cast<int64_t>(count);
  const int slots = static_cast<int>(
      std::min<int64_t>(options_.max_slots, (n + kSumSlotFloats - 1) / kSumSlotFloats));
  require_ready("all_reduce_sum", count, slots);
  int64_t chunk = (n + slots - 1) / slots;
  chunk = (chunk + 7) / 8 * 8;
  const int grid = static_cast<int>((n + chunk - 1) / chunk);
  const PeerArgs a = peer_args(peer_mailbox_, peer_flags_, rank_, options_.max_slots,
                               options_.max_count, state_.data(), timeout_dev_, options_.timeout_s);
  const bool vec = detail::aligned16(data);
  with_ranks(tp_, [&](auto k) {
    launch_kernel("peer_sum_kernel", peer_sum_kernel<decltype(k)::value>,
                  LaunchShape{dim3(grid), dim3(kSumThreads), 0, stream}, a, data, n, chunk, vec);
  });
}

int64_t PeerAllReduce::resident_boundary_rows(int hidden, StreamDType residual_dtype) const {
  return residual_dtype == StreamDType::f32 ? peer_boundary_resident_rows_f32(hidden, tp_)
                                            : peer_boundary_resident_rows_bf16(hidden, tp_);
}

void PeerAllReduce::residual_boundary(const ops::BoundaryParams& p, const float* partial,
                                      void* residual, bf16* next, cudaStream_t stream) {
  p.check();
  if (p.rows == 0) return;
  detail::require(partial != nullptr && residual != nullptr && next != nullptr,
                  "PeerAllReduce::residual_boundary",
                  "partial, residual and next must not be null");
  detail::check_boundary_hidden(p.hidden, "PeerAllReduce::residual_boundary");
  require_ready("residual_boundary", static_cast<size_t>(p.rows) * p.hidden, p.rows);
  const PeerArgs a = peer_args(peer_mailbox_, peer_flags_, rank_, options_.max_slots,
                               options_.max_count, state_.data(), timeout_dev_, options_.timeout_s);
  const bool vec = detail::boundary_vec(p, detail::aligned16(partial), residual, next);
  if (p.residual_dtype == StreamDType::f32)
    launch_peer_boundary_f32(p, a, partial, vec, static_cast<float*>(residual), next, stream);
  else
    launch_peer_boundary_bf16(p, a, partial, vec, static_cast<bf16*>(residual), next, stream);
}

}  // namespace sparkdraft::cuda
