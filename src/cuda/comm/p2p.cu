// The peer-to-peer communicator (cuda/p2p_comm.h): one kernel per collective that
// pushes the rank's data into every peer's mailbox, raises epoch flags and
// completes the gather or the tree from its own mailbox.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "sparkdraft/core/reduce.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/p2p_comm.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {
namespace {

constexpr int kThreads = 256;
constexpr int kMaxBlocks = 32;

struct Peers {
  unsigned char* mailbox[P2pComm::kMaxRanks];
  uint32_t* flags[P2pComm::kMaxRanks];
};

struct Args {
  Peers peers;
  int tp, me;
  const unsigned char* send;
  size_t bytes;
  unsigned char* out;
  bool reduce;
  size_t capacity;
  uint32_t* state;  // [0] last epoch done, [1] blocks arrived
  unsigned long long timeout_ns;
};

__device__ __forceinline__ uint32_t load_acquire(const uint32_t* p) {
  uint32_t v;
  asm volatile("ld.acquire.sys.global.u32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
  return v;
}

__device__ __forceinline__ void store_release(uint32_t* p, uint32_t v) {
  asm volatile("st.release.sys.global.u32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}

__device__ __forceinline__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;\n" : "=l"(t));
  return t;
}

// Bytes [b0, b1) of `src` to `dst`: 16-byte words where both are aligned, else bytes.
__device__ __forceinline__ void copy_range(unsigned char* dst, const unsigned char* src, size_t b0,
                                           size_t b1) {
  const bool vec = ((reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src)) & 15) == 0;
  size_t i = b0 + 16 * threadIdx.x;
  if (vec) {
    for (; i + 16 <= b1; i += 16 * blockDim.x)
      *reinterpret_cast<uint4*>(dst + i) = *reinterpret_cast<const uint4*>(src + i);
    // The tail (fewer than 16 bytes): thread 0.
    if (threadIdx.x == 0)
      for (size_t j = b0 + (b1 - b0) / 16 * 16; j < b1; ++j) dst[j] = src[j];
  } else {
    for (size_t j = b0 + threadIdx.x; j < b1; j += blockDim.x) dst[j] = src[j];
  }
}

// grid = the communicator's blocks, block kThreads. Block b owns bytes [b0, b1) of
// the data (16-byte aligned chunks; for a reduce, whole floats).
__global__ void __launch_bounds__(kThreads) p2p_kernel(Args a) {
  const uint32_t epoch = *reinterpret_cast<volatile uint32_t*>(a.state) + 1;
  const int parity = static_cast<int>(epoch & 1);
  const size_t chunk = (a.bytes + gridDim.x * 16 - 1) / (gridDim.x * 16) * 16;
  const size_t b0 = min(a.bytes, blockIdx.x * chunk), b1 = min(a.bytes, b0 + chunk);
  const size_t slot_bytes = a.capacity;
  // 1. Push this rank's chunk into slot (parity, me) of every rank, then its flags.
  for (int p = 0; p < a.tp; ++p)
    copy_range(a.peers.mailbox[p] + (static_cast<size_t>(parity) * a.tp + a.me) * slot_bytes,
               a.send, b0, b1);
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence_system();
    for (int p = 0; p < a.tp; ++p)
      store_release(a.peers.flags[p] + (parity * a.tp + a.me) * gridDim.x + blockIdx.x, epoch);
  }
  // 2. Wait for every rank's chunk in this rank's mailbox.
  if (static_cast<int>(threadIdx.x) < a.tp) {
    const uint32_t* f =
        a.peers.flags[a.me] + (parity * a.tp + static_cast<int>(threadIdx.x)) * gridDim.x +
        blockIdx.x;
    const unsigned long long t0 = global_ns();
    while (load_acquire(f) != epoch)
      if (global_ns() - t0 > a.timeout_ns) __trap();  // a peer never came
  }
  __syncthreads();
  // 3. Gather the slots in rank order, or add them in the canonical tree.
  const unsigned char* mine =
      a.peers.mailbox[a.me] + static_cast<size_t>(parity) * a.tp * slot_bytes;
  if (!a.reduce) {
    for (int s = 0; s < a.tp; ++s) copy_range(a.out + s * a.bytes, mine + s * slot_bytes, b0, b1);
  } else {
    float* out = reinterpret_cast<float*>(a.out);
    for (size_t i = b0 / 4 + threadIdx.x; i < b1 / 4; i += blockDim.x) {
      float p[P2pComm::kMaxRanks];
      for (int s = 0; s < a.tp; ++s)
        p[s] = reinterpret_cast<const float*>(mine + s * slot_bytes)[i];
      out[i] = canonical_tree_sum(p, a.tp);
    }
  }
  // The epoch is done when every block is: the last one records it.
  __syncthreads();
  if (threadIdx.x == 0) {
    __threadfence();
    if (atomicAdd(&a.state[1], 1u) == gridDim.x - 1) {
      a.state[1] = 0;
      __threadfence();
      atomicExch(&a.state[0], epoch);
    }
  }
}

// Whether CUDA loads kernels lazily (on their first launch) in this process: the
// driver's cuModuleGetLoadingMode, through the runtime (nothing links libcuda).
bool lazy_loading() {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult q{};
  if (cudaGetDriverEntryPointByVersion("cuModuleGetLoadingMode", &fn, 12000, cudaEnableDefault,
                                       &q) != cudaSuccess ||
      q != cudaDriverEntryPointSuccess || fn == nullptr) {
    (void)cudaGetLastError();
    throw DeviceError("P2pComm: the driver has no cuModuleGetLoadingMode");
  }
  CUmoduleLoadingMode mode{};
  if (reinterpret_cast<PFN_cuModuleGetLoadingMode_v11070>(fn)(&mode) != CUDA_SUCCESS)
    throw DeviceError("P2pComm: cuModuleGetLoadingMode failed");
  return mode == CU_MODULE_LAZY_LOADING;
}

// What a rank publishes at setup.
struct Published {
  unsigned char* mailbox;
  uint32_t* flags;
  int device;
};

}  // namespace

P2pComm::P2pComm(Communicator& bootstrap, int device, const P2pOptions& options)
    : bootstrap_(bootstrap), options_(options), device_(device) {
  if (bootstrap.local_ranks().size() != 1 || bootstrap.memory() != CommMemory::host)
    throw InvalidArgument(
        "P2pComm: the bootstrap must be a host communicator of one rank (a run_thread_group "
        "thread)");
  tp_size_ = bootstrap.tp_size();
  local_ = {bootstrap.tp_rank()};
  if (tp_size_ > kMaxRanks)
    throw InvalidArgument("P2pComm: " + std::to_string(tp_size_) + " ranks, at most " +
                          std::to_string(kMaxRanks));
  if (options.capacity_bytes == 0 || options.capacity_bytes % 16 != 0)
    throw InvalidArgument("P2pComm: capacity_bytes must be a positive multiple of 16, got " +
                          std::to_string(options.capacity_bytes));
  if (!(options.timeout_s > 0.0) || !std::isfinite(options.timeout_s))
    throw InvalidArgument("P2pComm: timeout_s must be finite and > 0");
  SD_CUDA_CHECK(cudaSetDevice(device));
  if (lazy_loading())
    throw InvalidArgument(
        "P2pComm: CUDA loads kernels lazily in this process (CUDA_MODULE_LOADING=LAZY, the "
        "default), and a kernel one rank loads while a peer's collective waits for it can "
        "deadlock; start the process with CUDA_MODULE_LOADING=EAGER");
  const size_t tp = static_cast<size_t>(tp_size_);
  mailbox_ = DeviceBuffer<unsigned char>(2 * tp * options.capacity_bytes);
  flags_ = DeviceBuffer<uint32_t>(2 * tp * kMaxBlocks);
  state_ = DeviceBuffer<uint32_t>(2);
  SD_CUDA_CHECK(cudaMemset(flags_.data(), 0, flags_.bytes()));
  SD_CUDA_CHECK(cudaMemset(state_.data(), 0, state_.bytes()));
  SD_CUDA_CHECK(cudaDeviceSynchronize());  // zeroed before any peer can write
  const Published mine{mailbox_.data(), flags_.data(), device};
  std::vector<Published> all(tp);
  bootstrap.all_gather(static_cast<const void*>(&mine), all.data(), sizeof(Published));
  bool shared = true;
  for (const Published& p : all) {
    peer_mailbox_.push_back(p.mailbox);
    peer_flags_.push_back(p.flags);
    if (p.device == device) continue;
    shared = false;
    int can = 0;
    SD_CUDA_CHECK(cudaDeviceCanAccessPeer(&can, device, p.device));
    if (!can)
      throw DeviceError("P2pComm: device " + std::to_string(device) +
                        " has no peer access to device " + std::to_string(p.device));
    const cudaError_t e = cudaDeviceEnablePeerAccess(p.device, 0);
    if (e == cudaErrorPeerAccessAlreadyEnabled)
      (void)cudaGetLastError();
    else
      SD_CUDA_CHECK(e);
  }
  blocks_ = shared ? std::max(1, kMaxBlocks / tp_size_) : kMaxBlocks;
  bootstrap.barrier();  // no rank writes a peer's mailbox before the peer has zeroed it
}

void P2pComm::reserve_reduce(size_t count) {
  if (count * sizeof(float) > options_.capacity_bytes)
    throw InvalidArgument("P2pComm: an all-reduce of " + std::to_string(count) +
                          " floats needs " + std::to_string(count * sizeof(float)) +
                          " bytes a slot; the mailbox was built with capacity_bytes " +
                          std::to_string(options_.capacity_bytes));
}

void P2pComm::launch(const void* send, size_t bytes, void* out, bool reduce, void* stream) {
  if (bytes > options_.capacity_bytes)
    throw InvalidArgument("P2pComm: " + std::string(reduce ? "all_reduce_sum" : "all_gather") +
                          " of " + std::to_string(bytes) + " bytes; capacity_bytes is " +
                          std::to_string(options_.capacity_bytes));
  if (bytes == 0) return;
  Args a{};
  for (int r = 0; r < tp_size_; ++r) {
    a.peers.mailbox[r] = peer_mailbox_[static_cast<size_t>(r)];
    a.peers.flags[r] = peer_flags_[static_cast<size_t>(r)];
  }
  a.tp = tp_size_;
  a.me = tp_rank();
  a.send = static_cast<const unsigned char*>(send);
  a.bytes = bytes;
  a.out = static_cast<unsigned char*>(out);
  a.reduce = reduce;
  a.capacity = options_.capacity_bytes;
  a.state = state_.data();
  a.timeout_ns = static_cast<unsigned long long>(options_.timeout_s * 1e9);
  p2p_kernel<<<blocks_, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(a);
  SD_CHECK_LAUNCH();
}

void P2pComm::all_gather(const void* const* send, void* recv, size_t bytes, void* stream) {
  launch(send[0], bytes, recv, false, stream);
}

void P2pComm::all_reduce_sum(float* const* data, size_t count, void* stream) {
  launch(data[0], count * sizeof(float), data[0], true, stream);
}

}  // namespace sparkdraft::cuda
