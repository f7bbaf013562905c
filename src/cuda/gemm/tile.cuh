// The tensor-core GEMM of ops/gemm.h on the device: the tiles, the per-warp
// shared-memory ring and the two kernels (ring and general) that cuda::gemm
// (gemm.cu) launches. See cuda/kernels.h for the design in one paragraph.
//
// Operands swapped (weights = A, tokens = B): a CTA owns 16*MT weight rows and
// 8*NT*WT tokens. It is `slices` slice groups of WT warps: group s runs slice s
// (k in [s*K/S, (s+1)*K/S)), warp w of a group the group's weight rows against
// its own 8*NT tokens (MT x NT tiles of mma.sync.m16n8k16.row.col.f32.bf16.bf16.f32),
// every chain over the whole slice in increasing k from +0. With slices > 1 the
// groups leave their fp32 partials in shared memory and the CTA adds them by
// core/reduce.h canonical_tree_sum before the bf16 rounding (no workspace).
//
// Ring kernel: each group streams its weight rows AND its tokens through its own
// ring of `stages` stages in shared memory, one stage = 64 k of every row (128
// bytes a row, 16-byte chunks swizzled by chunk ^ (row & 7) so that ldmatrix reads
// are conflict-free), filled by the group's threads with 16-byte cp.async
// (zero-filled past the slice end, past N and past M) and read by ldmatrix.x4 for
// the A fragments (16 rows x 16 k) and the B fragments (8 tokens x 32 k: two
// steps). One CTA barrier per stage. Needs K % 8 == 0, x_stride % 8 == 0 and
// 16-byte aligned w and x.
//
// General kernel (anything else: odd K, odd strides, misaligned pointers): WT = 1,
// MT = 1, the same chains and epilogue with every fragment element loaded from
// global memory (bounds-checked, zero past the ends). Both give the same bits:
// only the 16-k groups and their order matter (ops/gemm.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/mma.cuh"
#include "cuda/common/ptx.cuh"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/reduce.h"

namespace sparkdraft::cuda::gemm_detail {

inline constexpr int kStageK = 64;             // k per ring stage: 4 mma steps
inline constexpr int kRowBytes = 2 * kStageK;  // one row of a stage: 8 chunks of 16 bytes
inline constexpr int kMaxStages = 16;
inline constexpr int kMaxSlices = 8;

// A slice group: WT warps over the same 16*MT weight rows and one K slice, warp
// w taking tokens [8*NT*w, 8*NT*(w+1)) of the group's 8*NT*WT.
template <int MT, int NT, int WT>
struct Tile {
  static constexpr int kWarps = WT;           // warps per slice group
  static constexpr int kWRows = 16 * MT;      // weight rows per CTA
  static constexpr int kWarpTokens = 8 * NT;  // tokens per warp
  static constexpr int kXRows = 8 * NT * WT;  // tokens per CTA
  static constexpr int kRows = kWRows + kXRows;
  static constexpr int kStageBytes = kRows * kRowBytes;
  static constexpr int kCopies = kRows * 8 / (32 * WT);  // 16-byte cp.async per thread per stage
  static constexpr int kPartialBytes = kWRows * kXRows * 4;
  static_assert(kRows * 8 % (32 * WT) == 0, "a stage is whole copies per thread");
  static_assert(kPartialBytes <= 2 * kStageBytes, "the partials fit in a 2-stage ring");
};

struct Args {
  const bf16* x;
  int64_t x_stride;
  const bf16* w;
  int M, N, K;
  bf16* y;
  int64_t y_stride;
  int slices;       // slice groups per CTA; slice s = group s (warps s*WT .. s*WT+WT-1)
  int slice_len;    // K / slices
  int stages;       // ring stages (ring kernel), 2..kMaxStages
  int group_bytes;  // shared memory per slice group (its ring, later its fp32 partials)
};

// Byte offset of chunk c (0..7) of row r in a stage.
__device__ __forceinline__ int swizzle(int r, int c) {
  return r * kRowBytes + ((c ^ (r & 7)) << 4);
}

// cp.async.wait_group with a run-time count (the instruction takes an immediate).
__device__ __forceinline__ void cp_async_wait_n(int n) {
#define SD_GEMM_WAIT(N) \
  case N: asm volatile("cp.async.wait_group " #N ";\n" ::: "memory"); break;
  switch (n) {
    SD_GEMM_WAIT(0)
    SD_GEMM_WAIT(1)
    SD_GEMM_WAIT(2)
    SD_GEMM_WAIT(3)
    SD_GEMM_WAIT(4)
    SD_GEMM_WAIT(5)
    SD_GEMM_WAIT(6)
    SD_GEMM_WAIT(7)
    SD_GEMM_WAIT(8)
    SD_GEMM_WAIT(9)
    SD_GEMM_WAIT(10)
    SD_GEMM_WAIT(11)
    SD_GEMM_WAIT(12)
    SD_GEMM_WAIT(13)
    SD_GEMM_WAIT(14)
    default: asm volatile("cp.async.wait_group 0;\n" ::: "memory");
  }
#undef SD_GEMM_WAIT
}

__device__ __forceinline__ uint32_t pack2(bf16 lo, bf16 hi) {
  return static_cast<uint32_t>(lo.bits) | (static_cast<uint32_t>(hi.bits) << 16);
}

// The epilogue: bf16(acc) straight from the fragments (one slice), or the
// partials through shared memory and the canonical tree (several slices).
// c[0] = C[g][2t], c[1] = C[g][2t+1], c[2] = C[g+8][2t], c[3] = C[g+8][2t+1]
// with C[weight row][token].
// n0, m0: the CTA's first weight row and token; the warp's tokens start at
// m0 + wt * 8 * NT.
template <int MT, int NT, int WT>
__device__ __forceinline__ void epilogue(const Args& a, float (&acc)[MT][NT][4],
                                         unsigned char* smem, int n0, int m0) {
  using T = Tile<MT, NT, WT>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int group = warp / WT, wt = warp % WT;
  if (a.slices == 1) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int n = n0 + mt * 16 + g + 8 * (i >> 1);
          const int m = m0 + wt * T::kWarpTokens + nt * 8 + 2 * t + (i & 1);
          if (n < a.N && m < a.M) a.y[m * a.y_stride + n] = to_bf16(acc[mt][nt][i]);
        }
    return;
  }
  __syncthreads();  // every warp of the group is done reading its ring
  float* part = reinterpret_cast<float*>(smem + group * a.group_bytes);
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i)
        part[(mt * 16 + g + 8 * (i >> 1)) * T::kXRows + wt * T::kWarpTokens + nt * 8 + 2 * t +
             (i & 1)] = acc[mt][nt][i];
  __syncthreads();
  for (int o = threadIdx.x; o < T::kWRows * T::kXRows; o += blockDim.x) {
    const int n = n0 + o / T::kXRows, m = m0 + o % T::kXRows;
    if (n >= a.N || m >= a.M) continue;
    float p[kMaxSlices];
    for (int s = 0; s < a.slices; ++s)
      p[s] = reinterpret_cast<const float*>(smem + s * a.group_bytes)[o];
    a.y[m * a.y_stride + n] = to_bf16(canonical_tree_sum(p, a.slices));
  }
}

// grid (ceil(M / (8*NT*WT)), ceil(N / (16*MT))), block 32 * WT * slices,
// dynamic shared memory slices * group_bytes (group_bytes = stages *
// Tile::kStageBytes). The group's threads fill its ring together, so a stage
// change is a CTA barrier (every group has the same number of stages).
template <int MT, int NT, int WT>
__global__ void __launch_bounds__(32 * WT * kMaxSlices) gemm_ring_kernel(Args a) {
  using T = Tile<MT, NT, WT>;
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp / WT, wt = warp % WT, gthread = wt * 32 + lane;
  const int m0 = blockIdx.x * T::kXRows, n0 = blockIdx.y * T::kWRows;
  const int k_beg = group * a.slice_len, k_end = k_beg + a.slice_len;
  const int steps = (a.slice_len + 15) / 16, chunks = (a.slice_len + kStageK - 1) / kStageK;
  unsigned char* ring = smem + group * a.group_bytes;

  // Stage `chunk` of the group's rows: row r < kWRows is weight row n0 + r, the
  // rest token m0 + r - kWRows; k = k_beg + 64 * chunk + 8 * c for chunk c.
  auto issue = [&](int chunk) {
    unsigned char* st = ring + (chunk % a.stages) * T::kStageBytes;
    const int kc = k_beg + chunk * kStageK;
#pragma unroll
    for (int i = 0; i < T::kCopies; ++i) {
      const int idx = i * 32 * WT + gthread, r = idx >> 3, c = idx & 7, k = kc + 8 * c;
      const bf16* src;
      bool ok;
      if (r < T::kWRows) {
        ok = k < k_end && n0 + r < a.N;
        src = ok ? a.w + static_cast<int64_t>(n0 + r) * a.K + k : a.w;
      } else {
        ok = k < k_end && m0 + r - T::kWRows < a.M;
        src = ok ? a.x + static_cast<int64_t>(m0 + r - T::kWRows) * a.x_stride + k : a.x;
      }
      cp_async_16(st + swizzle(r, c), src, ok ? 16 : 0);
    }
  };

  float acc[MT][NT][4];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;

  const int ahead = a.stages - 1;  // stages in flight ahead of the one computed
  for (int p = 0; p < ahead; ++p) {
    if (p < chunks) issue(p);
    cp_async_commit();
  }
  // ldmatrix lane roles: A matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15) of a step;
  // B matrices k 0-7 | 8-15 of step j, then of step j+1, for 8 tokens.
  const int a_row = (lane & 7) + 8 * ((lane >> 3) & 1), a_chunk = lane >> 4;
  const int b_row = T::kWRows + wt * T::kWarpTokens + (lane & 7), b_chunk = lane >> 3;
  for (int chunk = 0; chunk < chunks; ++chunk) {
    cp_async_wait_n(ahead - 1);  // this thread's copies of `chunk` have landed
    __syncthreads();             // ... and every thread's; the slot of chunk-1 is free
    if (chunk + ahead < chunks) issue(chunk + ahead);
    cp_async_commit();
    const unsigned char* st = ring + (chunk % a.stages) * T::kStageBytes;
#pragma unroll
    for (int j = 0; j < 4; j += 2) {
      const int s0 = chunk * 4 + j;
      if (s0 >= steps) break;
      uint32_t b[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
        ldmatrix_x4(b[nt], st + swizzle(b_row + nt * 8, 2 * j + b_chunk));
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (s0 + h >= steps) break;
        uint32_t af[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
          ldmatrix_x4(af[mt], st + swizzle(mt * 16 + a_row, 2 * (j + h) + a_chunk));
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
            mma_bf16_16816(acc[mt][nt], af[mt], &b[nt][2 * h], acc[mt][nt]);
      }
    }
  }
  cp_async_wait_n(0);  // the trailing (empty) groups
  epilogue<MT, NT, WT>(a, acc, smem, n0, m0);
}

// The general kernel: MT = 1, fragments loaded element by element.
// Lane (g, t) of a step at k0 holds k0 + 2t, 2t+1 (register 0 / 1 of a row pair)
// and k0 + 2t+8, 2t+9 (register 2 / 3), as the fragment layout says.
template <int NT>
__global__ void __launch_bounds__(32 * kMaxSlices) gemm_general_kernel(Args a) {
  using T = Tile<1, NT, 1>;
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int m0 = blockIdx.x * T::kXRows, n0 = blockIdx.y * T::kWRows;
  const int k_beg = warp * a.slice_len, k_end = k_beg + a.slice_len;
  const int steps = (a.slice_len + 15) / 16;
  const bf16 zero{0};
  auto wv = [&](int n, int k) {
    return n < a.N && k < k_end ? a.w[static_cast<int64_t>(n) * a.K + k] : zero;
  };
  auto xv = [&](int m, int k) { return m < a.M && k < k_end ? a.x[m * a.x_stride + k] : zero; };
  float acc[1][NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[0][nt][i] = 0.0f;
  for (int s = 0; s < steps; ++s) {
    const int k = k_beg + 16 * s + 2 * t;
    uint32_t af[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int n = n0 + g + 8 * (i & 1), kk = k + 8 * (i >> 1);
      af[i] = pack2(wv(n, kk), wv(n, kk + 1));
    }
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int m = m0 + nt * 8 + g;
      const uint32_t b[2] = {pack2(xv(m, k), xv(m, k + 1)), pack2(xv(m, k + 8), xv(m, k + 9))};
      mma_bf16_16816(acc[0][nt], af, b, acc[0][nt]);
    }
  }
  epilogue<1, NT, 1>(a, acc, smem, n0, m0);
}

}  // namespace sparkdraft::cuda::gemm_detail
