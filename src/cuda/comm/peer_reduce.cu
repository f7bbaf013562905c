// The fused all-reduce (cuda/peer_reduce.h): the push, the epoch flags, the waits
// and the tree, as device pieces shared by the plain sum kernel and the boundary's
// branch policy (src/cuda/eager/residual_boundary.cuh).
#include "sparkdraft/cuda/peer_reduce.h"

#include <cuda.h>
#include <cudaTypedefs.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <type_traits>

#include "cuda/eager/residual_boundary.cuh"
#include "sparkdraft/core/reduce.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {
namespace {

constexpr int kMaxRanks = PeerAllReduce::kMaxRanks;
constexpr int kSumThreads = 256;
constexpr int64_t kSumSlotFloats = 8 * kSumThreads * 4;  // a plain sum's block: 8192 floats

// state_ words: the last completed epoch, blocks done in this call, abandoned.
enum State { kEpochDone = 0, kBlocksDone = 1, kAbandoned = 2, kStateWords = 3 };

struct PeerArgs {
  float* mailbox[kMaxRanks];             // rank r's mailbox (on its device)
  unsigned long long* flags[kMaxRanks];  // rank r's flags [tp][max_slots]
  int tp, me, max_slots;
  int64_t cap;                // floats a (parity, source) region holds
  unsigned long long* state;  // this rank's State words
  int* timeout;               // host-mapped: [0] 1 + the peer waited for, [1] the epoch
  unsigned long long timeout_ns;
};

__device__ __forceinline__ unsigned long long load_acquire(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.sys.global.u64 %0, [%1];\n" : "=l"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_release(unsigned long long* p, unsigned long long v) {
  asm volatile("st.release.sys.global.u64 [%0], %1;\n" ::"l"(p), "l"(v) : "memory");
}

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

// 8 fp32 values a peer wrote into this rank's mailbox: through L2 only (ld.cg), so
// no line of an earlier call can come from L1.
__device__ __forceinline__ void load_mail_f32x8(const float* p, int n, bool vec, float (&v)[8]) {
  if (vec && n == 8) {
    const float4 a = __ldcg(reinterpret_cast<const float4*>(p)),
                 b = __ldcg(reinterpret_cast<const float4*>(p) + 1);
    v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    return;
  }
#pragma unroll
  for (int j = 0; j < 8; ++j) v[j] = j < n ? __ldcg(p + j) : 0.0f;
}

// This call's epoch: one past the last completed (the state is this rank's own).
__device__ __forceinline__ unsigned long long call_epoch(const PeerArgs& a) {
  return *reinterpret_cast<volatile const unsigned long long*>(a.state + kEpochDone) + 1;
}

// Where source rank `src` writes parity `parity` into a mailbox.
__device__ __forceinline__ int64_t region(const PeerArgs& a, uint32_t parity, int src) {
  return (static_cast<int64_t>(parity) * a.tp + src) * a.cap;
}

// After this block's pushes: every thread's stores fenced at system scope, then
// thread 0 raises flag [me][slot] of every peer to e.
__device__ __forceinline__ void raise_flags(const PeerArgs& a, int slot, unsigned long long e) {
  __threadfence_system();
  __syncthreads();
  if (threadIdx.x == 0)
    for (int p = 0; p < a.tp; ++p)
      if (p != a.me) store_release(a.flags[p] + static_cast<int64_t>(a.me) * a.max_slots + slot, e);
}

// Thread s < tp waits for peer s's flag [s][slot] >= e (wrap-safe), at most
// timeout_ns; a block that gives up marks the call abandoned (the other blocks stop
// waiting at once) and tells the host which peer and epoch. Then the block syncs.
__device__ __forceinline__ void wait_flags(const PeerArgs& a, int slot, unsigned long long e) {
  const int s = static_cast<int>(threadIdx.x);
  if (s < a.tp && s != a.me) {
    const unsigned long long* f = a.flags[a.me] + static_cast<int64_t>(s) * a.max_slots + slot;
    volatile const unsigned long long* abandoned = a.state + kAbandoned;
    const unsigned long long t0 = global_ns();
    while (static_cast<long long>(load_acquire(f) - e) < 0) {
      if (*abandoned) break;
      if (global_ns() - t0 > a.timeout_ns) {
        if (atomicExch(a.state + kAbandoned, 1ull) == 0ull) {
          volatile int* t = a.timeout;
          t[1] = static_cast<int>(e);
          t[0] = 1 + s;
          __threadfence_system();
        }
        break;
      }
    }
  }
  __syncthreads();
}

// The block is done with this call; the last block records e as completed.
__device__ __forceinline__ void finish_call(const PeerArgs& a, unsigned long long e) {
  if (threadIdx.x != 0) return;
  __threadfence();
  if (atomicAdd(a.state + kBlocksDone, 1ull) == gridDim.x - 1ull) {
    a.state[kBlocksDone] = 0;
    __threadfence();
    atomicExch(a.state + kEpochDone, e);
  }
}

// The tree of the ranks' 8 values at element i0 of this slot: the rank's own from
// `mine`, every peer's from this rank's mailbox. kRanks > 0 fixes the count.
template <int kRanks>
__device__ __forceinline__ void tree_f32x8(const PeerArgs& a, uint32_t parity, const float* mine,
                                           int64_t offset, int n, bool vec, float (&out)[8]) {
  constexpr int kSlots = kRanks > 0 ? kRanks : kMaxRanks;
  const int tp = kRanks > 0 ? kRanks : a.tp;
  float v[kSlots][8];
#pragma unroll
  for (int s = 0; s < kSlots; ++s) {
    if (s >= tp) continue;
    if (s == a.me)
      load_f32x8(mine + offset, n, vec, v[s]);
    else
      load_mail_f32x8(a.mailbox[a.me] + region(a, parity, s) + offset, n, vec, v[s]);
  }
#pragma unroll
  for (int k = 0; k < 8; ++k) {
    float t[kSlots];
#pragma unroll
    for (int s = 0; s < kSlots; ++s) t[s] = s < tp ? v[s][k] : 0.0f;
    out[k] = canonical_tree_sum(t, tp);
  }
}

// Pushes this rank's 8 values at `offset` into every peer's mailbox.
__device__ __forceinline__ void push_f32x8(const PeerArgs& a, uint32_t parity, const float* mine,
                                           int64_t offset, int n, bool vec) {
  float v[8];
  load_f32x8(mine + offset, n, vec, v);
  for (int p = 0; p < a.tp; ++p)
    if (p != a.me) store_f32x8(a.mailbox[p] + region(a, parity, a.me) + offset, v, n, vec);
}

// The plain sum: block b (slot b) owns elements [b * chunk, (b + 1) * chunk).
template <int kRanks>
__global__ void __launch_bounds__(kSumThreads)
    peer_sum_kernel(PeerArgs a, float* data, int64_t count, int64_t chunk, bool vec) {
  const unsigned long long e = call_epoch(a);
  const uint32_t parity = static_cast<uint32_t>(e & 1u);
  const int slot = static_cast<int>(blockIdx.x);
  const int64_t b0 = slot * chunk, b1 = min(count, b0 + chunk);
  for (int64_t i = b0 + 8 * threadIdx.x; i < b1; i += 8 * kSumThreads)
    push_f32x8(a, parity, data, i, static_cast<int>(b1 - i < 8 ? b1 - i : 8), vec);
  raise_flags(a, slot, e);
  wait_flags(a, slot, e);
  for (int64_t i = b0 + 8 * threadIdx.x; i < b1; i += 8 * kSumThreads) {
    const int n = static_cast<int>(b1 - i < 8 ? b1 - i : 8);
    float sum[8];
    tree_f32x8<kRanks>(a, parity, data, i, n, vec, sum);
    store_f32x8(data + i, sum, n, vec);
  }
  finish_call(a, e);
}

// The boundary's branch (residual_boundary.cuh's policy): row r's partial pushed,
// the peers' awaited, each chunk the tree of the ranks' values rounded to bf16.
template <int kRanks>
struct BranchPeerTree {
  PeerArgs a;
  const float* partial;  // this rank's [rows, H]
  bool vec;
  unsigned long long e = 0;
  uint32_t parity = 0;

  template <int kChunks>
  __device__ __forceinline__ void begin(int64_t row, int h, const int (&i0)[kChunks]) {
    e = call_epoch(a);
    parity = static_cast<uint32_t>(e & 1u);
#pragma unroll
    for (int j = 0; j < kChunks; ++j)
      if (i0[j] >= 0) push_f32x8(a, parity, partial, row * h + i0[j], min(8, h - i0[j]), vec);
    raise_flags(a, static_cast<int>(row), e);
    wait_flags(a, static_cast<int>(row), e);
  }
  __device__ __forceinline__ void load(int64_t row, int h, int i0, int n, bool, float (&b)[8]) {
    float sum[8];
    tree_f32x8<kRanks>(a, parity, partial, row * h + i0, n, vec, sum);
#pragma unroll
    for (int k = 0; k < 8; ++k) b[k] = round_bf16(sum[k]);
  }
  __device__ __forceinline__ void end() { finish_call(a, e); }
};

// Calls f(std::integral_constant<int, kRanks>) for tp (1, 2, 4, 8 fixed; else 0).
template <class F>
void with_ranks(int tp, F&& f) {
  switch (tp) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, 2>{});
    case 4: return f(std::integral_constant<int, 4>{});
    case 8: return f(std::integral_constant<int, 8>{});
    default: return f(std::integral_constant<int, 0>{});
  }
}

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
    peer_sum_kernel<decltype(k)::value><<<grid, kSumThreads, 0, stream>>>(a, data, n, chunk, vec);
  });
  SD_CHECK_LAUNCH();
}

int64_t PeerAllReduce::resident_boundary_rows(int hidden, StreamDType residual_dtype) const {
  int64_t rows = 0;
  with_ranks(tp_, [&](auto k) {
    using B = BranchPeerTree<decltype(k)::value>;
    rows = residual_dtype == StreamDType::f32 ? detail::boundary_resident_rows<float, B>(hidden)
                                              : detail::boundary_resident_rows<bf16, B>(hidden);
  });
  return rows;
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
  with_ranks(tp_, [&](auto k) {
    detail::launch_boundary(p, BranchPeerTree<decltype(k)::value>{a, partial, vec}, residual, next,
                            vec, stream);
  });
}

}  // namespace sparkdraft::cuda
