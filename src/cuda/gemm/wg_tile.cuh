// The wg variant of cuda::gemm (gemm.cu): the chains of ops/gemm.h on Hopper's
// warpgroup instruction wgmma.mma_async.m64n64k16.f32.bf16.bf16, which the device
// probe (tests/cuda/test_wgmma.cu) and cuda::wgmma_self_test show gives the bits
// of the mma.sync.m16n8k16 chain, k16 step by k16 step (SPEC section 3).
//
// Operands swapped (weights = A, tokens = B): a CTA is WGS warpgroups of 128
// threads; warpgroup g owns weight rows n0 + 64 g .. n0 + 64 g + 63 against the
// CTA's 64 * NB tokens, NB wgmmas of 64 tokens per k16 step, every chain in
// increasing k from +0 (k16 steps past the slice end are not run: an extra step of
// zero products would turn a -0 into +0). With kSwiGLU (WGS = 2) warpgroup 0 runs
// the gate rows n0 .. n0 + 63 and warpgroup 1 the matching up rows N + n0 .. of
// the [2N, K] weight; warpgroup 1 hands its fp32 results to warpgroup 0 through
// shared memory, which writes ops/mlp.h's SwiGLU of the pair.
//
// Ring: every thread of the CTA fills `stages` stages of 64 k of every row (weight
// rows, then tokens) with 16-byte cp.async (zero-filled past the slice end, past
// N and past M), in wgmma's no-swizzle K-major layout (common/wgmma.cuh
// wgmma_core_offset: 8-row x 16-byte core matrices of 128 contiguous bytes);
// thread i of a stage's copy round writes bytes 16 i .. 16 i + 15 (no bank
// conflicts). Two stages are in flight ahead of the one computed and one
// wgmma group behind it, so a slot is refilled only after the wgmmas that read it
// are done: cp.async wait, fence.proxy.async (the copies become visible to wgmma),
// one CTA barrier per stage.
//
// K slices (k_slices = S > 1, each a whole number of stages) run one after the
// other; after slice s the fp32 results are folded into core/reduce.h's
// canonical_tree_sum as a binary counter (after slice s, add the stored partial
// of each level whose bit of s is set; store at the first clear bit), the three
// levels in shared memory past the ring, each thread reading back only what it
// wrote. Needs K % 8 == 0, x_stride % 8 == 0 and 16-byte aligned w and x.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/gemm/tile.cuh"

namespace sparkdraft::cuda::gemm_detail {

inline constexpr int kWgMaxStages = 8;

template <int WGS, int NB>
struct WgTile {
  static constexpr int kThreads = 128 * WGS;
  static constexpr int kWRows = 64 * WGS;                 // weight rows per CTA
  static constexpr int kTokens = 64 * NB;                 // tokens per CTA
  static constexpr int kRows = kWRows + kTokens;          // rows of a stage
  static constexpr int kStageBytes = kRows * kRowBytes;   // 64 k of every row
  static constexpr int kCopies = kRows * 8 / kThreads;    // 16-byte copies per thread per stage
  static constexpr int kAcc = 32 * NB;                    // fp32 accumulators per thread
  static constexpr int kLevelBytes = kThreads * kAcc * 4; // one level of the slice tree
  static_assert(kRows * 8 % kThreads == 0, "a stage is whole copies per thread");
};

// grid (ceil(M / (64 NB)), ceil(N / rows)), rows = 64 (kSwiGLU) or 64 WGS; block
// 128 * WGS; dynamic shared memory stages * kStageBytes (+ 3 kLevelBytes with
// kSlices: a.seq_slices > 1 K slices; without, one chain over K).
template <int WGS, int NB, bool kSwiGLU, bool kSlices>
__global__ void __launch_bounds__(128 * WGS) gemm_wg_kernel(Args a) {
  using T = WgTile<WGS, NB>;
  static_assert(!kSwiGLU || WGS == 2, "SwiGLU: a gate and an up warpgroup");
  static_assert(!(kSwiGLU && kSlices), "SwiGLU: one chain over K");
  constexpr int kOutRows = kSwiGLU ? 64 : T::kWRows;
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, wg = tid / 128;
  const int m0 = blockIdx.x * T::kTokens, n0 = blockIdx.y * kOutRows;
  const int S = kSlices ? a.seq_slices : 1;
  const int slice_len = a.K / S;
  const int slice_chunks = (slice_len + kStageK - 1) / kStageK;
  const int slice_steps = (slice_len + 15) / 16;
  const int chunks = S * slice_chunks;
  unsigned char* const ring = smem;
  const uint32_t ring_u32 = smem_u32(smem);

  // Stage `chunk`: k = slice * slice_len + 64 * (chunk % slice_chunks) + 8 c.
  auto issue = [&](int chunk) {
    unsigned char* st = ring + (chunk % a.stages) * T::kStageBytes;
    const int slice = chunk / slice_chunks;
    const int k_end = (slice + 1) * slice_len;
    const int kc = slice * slice_len + (chunk % slice_chunks) * kStageK;
#pragma unroll
    for (int i = 0; i < T::kCopies; ++i) {
      const int idx = i * T::kThreads + tid;
      const int r = ((idx >> 6) << 3) | (idx & 7), c = (idx >> 3) & 7, k = kc + 8 * c;
      const bf16* src;
      bool ok;
      if (r < T::kWRows) {
        const int n = n0 + (kSwiGLU ? r % 64 : r);
        ok = k < k_end && n < a.N;
        const int64_t row = kSwiGLU && r >= 64 ? static_cast<int64_t>(a.N) + n : n;
        src = ok ? a.w + row * a.K + k : a.w;
      } else {
        const int m = m0 + r - T::kWRows;
        ok = k < k_end && m < a.M;
        src = ok ? a.x + static_cast<int64_t>(m) * a.x_stride + k : a.x;
      }
      cp_async_16(st + 16 * idx, src, ok ? 16 : 0);  // 16 idx = wgmma_core_offset(r, c)
    }
  };

  float acc[T::kAcc];
#pragma unroll
  for (int e = 0; e < T::kAcc; ++e) acc[e] = 0.0f;

  // Level l, element e of thread tid at [(l * kAcc + e) * kThreads + tid].
  float* const levels =
      reinterpret_cast<float*>(smem + static_cast<size_t>(a.stages) * T::kStageBytes) + tid;
  auto fold = [&](int s) {
    bool stored = false;
#pragma unroll
    for (int l = 0; l < 3; ++l) {
      if (stored) continue;
      float* const lv = levels + l * T::kAcc * T::kThreads;
      if ((s >> l) & 1) {
#pragma unroll
        for (int e = 0; e < T::kAcc; ++e) acc[e] = __fadd_rn(lv[e * T::kThreads], acc[e]);
      } else {
        if (s + 1 < S) {
#pragma unroll
          for (int e = 0; e < T::kAcc; ++e) {
            lv[e * T::kThreads] = acc[e];
            acc[e] = 0.0f;  // the next slice's chain starts from +0
          }
        }
        stored = true;
      }
    }
  };

  const int ahead = a.stages - 2;  // stages in flight ahead of the one computed
  for (int p = 0; p < ahead; ++p) {
    if (p < chunks) issue(p);
    cp_async_commit();
  }
  const uint32_t a_base = wgmma_core_offset(64 * wg, 0);  // rows 64 wg ..
  const uint32_t b_base = wgmma_core_offset(T::kWRows, 0);  // the tokens
  for (int chunk = 0; chunk < chunks; ++chunk) {
    cp_async_wait_n(ahead - 1);  // this thread's copies of `chunk` have landed
    fence_proxy_async();         // ... visible to wgmma
    __syncthreads();             // ... every thread's; the wgmmas of chunk - 2 are done
    if (chunk + ahead < chunks) issue(chunk + ahead);
    cp_async_commit();
    const uint32_t st = ring_u32 + static_cast<uint32_t>(chunk % a.stages) * T::kStageBytes;
    const int step0 = (chunk % slice_chunks) * 4;
    wgmma_fence_operands(acc);
    wgmma_fence();
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      if (step0 + h >= slice_steps) break;  // uniform over the CTA
      const uint64_t da = wgmma_desc(st + a_base + 256 * h, kWgmmaLbo, kWgmmaSbo);
#pragma unroll
      for (int nb = 0; nb < NB; ++nb)
        wgmma_m64n64k16_ss(acc + 32 * nb,
                           da, wgmma_desc(st + b_base + nb * 8 * kWgmmaSbo + 256 * h, kWgmmaLbo, kWgmmaSbo));
    }
    wgmma_commit();
    wgmma_fence_operands(acc);
    wgmma_wait<1>();
    if (kSlices && (chunk + 1) % slice_chunks == 0) {
      wgmma_wait<0>();
      fold(chunk / slice_chunks);
    }
  }
  wgmma_wait<0>();
  cp_async_wait_n(0);  // the trailing (empty) groups

  // Thread (warp w of its warpgroup, lane 4 g + t): acc[32 nb + 4 j + i] is weight
  // row 16 w + g + 8 (i / 2) of the warpgroup and token 64 nb + 8 j + 2 t + i % 2.
  const int w = (tid / 32) % 4, lane = tid % 32, g = lane / 4, t = lane % 4;
  if constexpr (kSwiGLU) {
    __syncthreads();  // every warpgroup is past its last wgmma: the ring is free
    float* up = reinterpret_cast<float*>(smem);
    if (wg == 1)
#pragma unroll
      for (int e = 0; e < T::kAcc; ++e) up[e * 128 + tid - 128] = acc[e];
    __syncthreads();
    if (wg == 1) return;
#pragma unroll
    for (int e = 0; e < T::kAcc; ++e) {
      const int i = e % 4, j = (e / 4) % 8, nb = e / 32;
      const int n = n0 + 16 * w + g + 8 * (i >> 1);
      const int m = m0 + 64 * nb + 8 * j + 2 * t + (i & 1);
      if (n < a.N && m < a.M)
        a.y[static_cast<int64_t>(m) * a.y_stride + n] = swiglu(acc[e], up[e * 128 + tid]);
    }
  } else {
#pragma unroll
    for (int e = 0; e < T::kAcc; ++e) {
      const int i = e % 4, j = (e / 4) % 8, nb = e / 32;
      const int n = n0 + 64 * wg + 16 * w + g + 8 * (i >> 1);
      const int m = m0 + 64 * nb + 8 * j + 2 * t + (i & 1);
      if (n < a.N && m < a.M) a.y[static_cast<int64_t>(m) * a.y_stride + n] = to_bf16(acc[e]);
    }
  }
}

}  // namespace sparkdraft::cuda::gemm_detail
