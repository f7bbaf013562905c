// The fused all-reduce's device pieces (cuda/comm/peer_reduce.h): the push, the epoch
// flags, the waits and the tree, shared by the plain sum kernel (peer_reduce.cu) and
// the boundary's branch policy (src/cuda/common/residual_boundary.cuh). The boundary
// kernels compile in two translation units of their own, one a residual dtype
// (peer_reduce_boundary_f32.cu, peer_reduce_boundary_bf16.cu), so that a parallel
// build compiles them side by side.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "cuda/comm/peer_reduce.h"
#include "cuda/common/ptx.cuh"
#include "cuda/common/residual_boundary.cuh"
#include "sparkdraft/core/reduce.h"

namespace sparkdraft::cuda::peer_detail {

inline constexpr int kMaxRanks = PeerAllReduce::kMaxRanks;
inline constexpr int kSumThreads = 256;
inline constexpr int64_t kSumSlotFloats = 8 * kSumThreads * 4;  // a plain sum's block: 8192 floats

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
  pdl_enter();
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

// kRanks is fixed (1, 2, 4, 8) for rows of at most kFixedRanksMaxChunks chunks a
// thread (hidden <= 8192): every (kRanks, kChunks) pair is a kernel of its own, and
// those of 4 and 8 chunks take the compiler tens of seconds each. Wider rows run
// the kernel that reads the rank count at run time (kRanks = 0): the same tree and
// the same bits.
inline constexpr int kFixedRanksMaxChunks = 2;

template <class S>
void launch_peer_boundary(const ops::BoundaryParams& p, const PeerArgs& a, const float* partial,
                          bool vec, S* residual, bf16* next, cudaStream_t stream) {
  if (detail::boundary_launch(p.hidden).per_thread > kFixedRanksMaxChunks) {
    detail::launch_boundary<S>(p, BranchPeerTree<0>{a, partial, vec}, residual, next, vec, stream);
    return;
  }
  with_ranks(a.tp, [&](auto k) {
    using B = BranchPeerTree<decltype(k)::value>;
    detail::launch_boundary<S, B, kFixedRanksMaxChunks>(p, B{a, partial, vec}, residual, next, vec,
                                                        stream);
  });
}

template <class S>
int64_t peer_boundary_resident_rows(int hidden, int tp) {
  if (detail::boundary_launch(hidden).per_thread > kFixedRanksMaxChunks)
    return detail::boundary_resident_rows<S, BranchPeerTree<0>>(hidden);
  int64_t rows = 0;
  with_ranks(tp, [&](auto k) {
    rows =
        detail::boundary_resident_rows<S, BranchPeerTree<decltype(k)::value>, kFixedRanksMaxChunks>(
            hidden);
  });
  return rows;
}

// One instantiation a residual dtype, each in its own translation unit.
void launch_peer_boundary_f32(const ops::BoundaryParams& p, const PeerArgs& a, const float* partial,
                              bool vec, float* residual, bf16* next, cudaStream_t stream);
void launch_peer_boundary_bf16(const ops::BoundaryParams& p, const PeerArgs& a,
                               const float* partial, bool vec, bf16* residual, bf16* next,
                               cudaStream_t stream);
int64_t peer_boundary_resident_rows_f32(int hidden, int tp);
int64_t peer_boundary_resident_rows_bf16(int hidden, int tp);

}  // namespace sparkdraft::cuda::peer_detail
