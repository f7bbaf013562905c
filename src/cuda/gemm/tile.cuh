// The tensor-core GEMM of ops/gemm.h on the device: the tiles, the shared-memory
// rings and the three kernels (bulk, ring and general) that cuda::gemm (gemm.cu)
// launches. See cuda/kernels.h for the design in one paragraph.
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
// Bulk kernel: WG consumer warps own WG*16*MT weight rows and 8*NT tokens; warp w
// runs rows [w*16*MT, (w+1)*16*MT) against all the CTA's tokens (MT x NT tiles).
// The CTA streams its weight rows and its tokens through one shared-memory ring of
// `stages` stages; a stage is `stage_k` k of every row (rows padded to a pitch of
// 2*stage_k + 16 bytes, so the eight 16-byte rows an ldmatrix reads fall in eight
// different bank groups). Warp-specialized: one more warp, the producer, fills
// the ring with one cp.async.bulk per row and stage (lane 0, warp-uniform
// pointers) whose bytes complete the stage's full mbarrier; each consumer warp
// waits on it, runs the stage's mma steps and arrives on the stage's empty
// mbarrier, on which the producer waits before refilling the slot.
// Every chain runs in increasing k from +0; the K slices (k_slices = S) run one
// after the other in the same warp, each from +0, and their fp32 results are
// folded at once in registers in the order of core/reduce.h canonical_tree_sum
// (a binary counter: after slice s, add the stored partial of each level whose
// bit of s is set), so no shared memory and no workspace holds partials. Rows past
// N and tokens past M are not copied (their stale shared memory only reaches
// outputs that are not stored); a stage that ends in the middle of a 16-k step
// (K % 16 == 8) zeroes the step's upper 8 k in both fragments, which is the
// contract's zero padding. Needs K % 8 == 0, x_stride % 8 == 0 and 16-byte aligned
// w and x (every row segment is then 16-byte aligned and a multiple of 16 bytes).
//
// General kernel (anything else: odd K, odd strides, misaligned pointers): WT = 1,
// MT = 1, the same chains and epilogue with every fragment element loaded from
// global memory (bounds-checked, zero past the ends). All three give the same bits:
// only the 16-k groups and their order matter (ops/gemm.h).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/fast_math.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/ptx.cuh"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/math.h"
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
  // The 16-fragment tiles (ring_big, ring_wide) run at most 256 threads (4 or 2
  // slice groups), so that their accumulators get the registers.
  static constexpr int kMaxThreads = MT * NT >= 16 ? 256 : 32 * WT * kMaxSlices;
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
  int slices;        // slice groups per CTA; slice s = group s (warps s*WT .. s*WT+WT-1)
  int slice_len;     // K / slices
  int stages;        // ring stages (ring kernel 2..kMaxStages, bulk kernel 2..kBulkMaxStages)
  int group_bytes;   // shared memory per slice group (its ring, later its fp32 partials)
  int stage_k;       // bulk kernel: k per stage (a multiple of 32)
  int pitch;         // bulk kernel: bytes per row of a stage, 2 * stage_k + 16
  int stage_bytes;   // bulk kernel: rows * pitch; wg kernel: the bytes a stage receives
  int slice_chunks;  // bulk kernel: stages per slice, ceil(slice_len / stage_k)
  int seq_slices;    // ring kernel: K slices run one after the other in one group (0: none)
  float* y32;        // not null: the fp32 sums are stored there (y_stride apart), unrounded
  // Launched with programmatic dependent launch (the step's PdlScope): the ring, bulk and wg
  // kernels request their first stages' weight rows before they wait for the previous
  // kernel, their tokens after it. Without it they keep each stage's rows together.
  bool early_weights;
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

// ops/mlp.h on the fp32 chain results of a gate and an up row: the bits of the
// gemm's bf16 outputs followed by silu_mul (silu_fast: silu_f32's bits).
__device__ __forceinline__ bf16 swiglu(float gate_acc, float up_acc) {
  const float gate = to_f32(to_bf16(gate_acc)), up = to_f32(to_bf16(up_acc));
  return to_bf16(__fmul_rn(silu_fast(gate), up));
}

// Stores one output: bf16(v) into y, or v itself into y32 (cuda::gemm_f32).
__device__ __forceinline__ void store_out(const Args& a, int64_t i, float v) {
  if (a.y32)
    a.y32[i] = v;
  else
    a.y[i] = to_bf16(v);
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
template <int MT, int NT, int WT, bool kSwiGLU = false>
__device__ __forceinline__ void epilogue(const Args& a, float (&acc)[MT][NT][4],
                                         unsigned char* smem, int n0, int m0) {
  using T = Tile<MT, NT, WT>;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int group = warp / WT, wt = warp % WT;
  if constexpr (kSwiGLU) {  // one slice; tile mt < MT/2 is gate, mt + MT/2 its up rows
#pragma unroll
    for (int mt = 0; mt < MT / 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int n = n0 + mt * 16 + g + 8 * (i >> 1);
          const int m = m0 + wt * T::kWarpTokens + nt * 8 + 2 * t + (i & 1);
          if (n < a.N && m < a.M)
            a.y[m * a.y_stride + n] = swiglu(acc[mt][nt][i], acc[mt + MT / 2][nt][i]);
        }
    return;
  }
  if (a.slices == 1) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int n = n0 + mt * 16 + g + 8 * (i >> 1);
          const int m = m0 + wt * T::kWarpTokens + nt * 8 + 2 * t + (i & 1);
          if (n < a.N && m < a.M) store_out(a, m * a.y_stride + n, acc[mt][nt][i]);
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
    store_out(a, m * a.y_stride + n, canonical_tree_sum(p, a.slices));
  }
}

// grid (ceil(M / (8*NT*WT)), ceil(N / (16*MT))), block 32 * WT * slices,
// dynamic shared memory slices * group_bytes (group_bytes = stages *
// Tile::kStageBytes). The group's threads fill its ring together, so a stage
// change is a CTA barrier (every group has the same number of stages).
template <int MT, int NT, int WT, bool kSwiGLU>
__global__ void __launch_bounds__(Tile<MT, NT, WT>::kMaxThreads) gemm_ring_kernel(Args a) {
  // pdl_enter() comes below: the first stages' weight rows are requested before it.
  using T = Tile<MT, NT, WT>;
  static_assert(!kSwiGLU || MT % 2 == 0, "SwiGLU pairs gate and up tiles");
  // kSwiGLU: the CTA's weight rows r < kWRows/2 are gate rows n0 + r, the rest the
  // matching up rows N + n0 + r - kWRows/2 of the [2N, K] weight (N = inter).
  constexpr int kOutRows = kSwiGLU ? T::kWRows / 2 : T::kWRows;
  extern __shared__ __align__(128) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int group = warp / WT, wt = warp % WT, gthread = wt * 32 + lane;
  const int m0 = blockIdx.x * T::kXRows, n0 = blockIdx.y * kOutRows;
  const int k_beg = group * a.slice_len, k_end = k_beg + a.slice_len;
  const int steps = (a.slice_len + 15) / 16, chunks = (a.slice_len + kStageK - 1) / kStageK;
  unsigned char* ring = smem + group * a.group_bytes;

  // Stage `chunk` of the group's rows: row r < kWRows is weight row n0 + r, the
  // rest token m0 + r - kWRows; k = k_beg + 64 * chunk + 8 * c for chunk c. `rows`:
  // kAllRows, or only the weight rows (kWeightRows) or only the tokens (kTokenRows).
  constexpr int kAllRows = 0, kWeightRows = 1, kTokenRows = 2;
  auto issue = [&](int chunk, int rows) {
    unsigned char* st = ring + (chunk % a.stages) * T::kStageBytes;
    const int kc = k_beg + chunk * kStageK;
#pragma unroll
    for (int i = 0; i < T::kCopies; ++i) {
      const int idx = i * 32 * WT + gthread, r = idx >> 3, c = idx & 7, k = kc + 8 * c;
      if (rows != kAllRows && (r < T::kWRows) != (rows == kWeightRows)) continue;
      const bf16* src;
      bool ok;
      if (r < T::kWRows) {
        const int n = n0 + (kSwiGLU ? r % kOutRows : r);
        ok = k < k_end && n < a.N;
        const int row = kSwiGLU && r >= kOutRows ? a.N + n : n;
        src = ok ? a.w + static_cast<int64_t>(row) * a.K + k : a.w;
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

  // The stages in flight ahead of the one computed. Under the step's programmatic
  // dependent launch (a.early_weights) their weight rows, which no kernel of a step
  // writes, are requested before the wait for the previous kernel, so they stream while
  // it finishes, and their tokens, its output, after it; the early weights join the first
  // commit group, so a stage's group still completes with (or after) its weights.
  const int ahead = a.stages - 1;
  if (a.early_weights)
    for (int p = 0; p < ahead; ++p)
      if (p < chunks) issue(p, kWeightRows);
  pdl_enter();
  for (int p = 0; p < ahead; ++p) {
    if (p < chunks) issue(p, a.early_weights ? kTokenRows : kAllRows);
    cp_async_commit();
  }
  // ldmatrix lane roles: A matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15) of a step;
  // B matrices k 0-7 | 8-15 of step j, then of step j+1, for 8 tokens.
  const int a_row = (lane & 7) + 8 * ((lane >> 3) & 1), a_chunk = lane >> 4;
  const int b_row = T::kWRows + wt * T::kWarpTokens + (lane & 7), b_chunk = lane >> 3;
  // Sequential slices (a.seq_slices = S > 1, one group over the whole K): slice s
  // ends with chunk (s + 1) * K / (64 S) - 1; its chain result is folded into the
  // canonical tree as a binary counter (after slice s, add the stored partial of
  // each level whose bit of s is set, then store at the first clear bit), the
  // levels held in shared memory past the ring, each thread reading back only
  // what it wrote.
  const int seq_chunks = a.seq_slices > 1 ? a.K / a.seq_slices / kStageK : 0;
  // Level l, fragment element e of thread tid at [(l * kFrag + e) * 32 * WT + tid]
  // (one group: blockDim.x == 32 * WT; constant offsets from one base).
  float* const levels = reinterpret_cast<float*>(smem + a.group_bytes) + threadIdx.x;
  auto fold = [&](int s) {
    constexpr int kFrag = MT * NT * 4, kStride = 32 * WT;
    bool stored = false;
#pragma unroll
    for (int l = 0; l < 3; ++l) {
      if (stored) continue;
      float* const lv = levels + l * kFrag * kStride;
      if ((s >> l) & 1) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int i = 0; i < 4; ++i)
              acc[mt][nt][i] = __fadd_rn(lv[((mt * NT + nt) * 4 + i) * kStride], acc[mt][nt][i]);
      } else {
        if (s + 1 < a.seq_slices) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
              for (int i = 0; i < 4; ++i) {
                lv[((mt * NT + nt) * 4 + i) * kStride] = acc[mt][nt][i];
                acc[mt][nt][i] = 0.0f;  // the next slice's chain starts from +0
              }
        }
        stored = true;
      }
    }
  };
  for (int chunk = 0; chunk < chunks; ++chunk) {
    cp_async_wait_n(ahead - 1);  // this thread's copies of `chunk` have landed
    __syncthreads();             // ... and every thread's; the slot of chunk-1 is free
    if (chunk + ahead < chunks) issue(chunk + ahead, kAllRows);
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
    if (seq_chunks > 0 && (chunk + 1) % seq_chunks == 0) fold((chunk + 1) / seq_chunks - 1);
  }
  cp_async_wait_n(0);  // the trailing (empty) groups
  epilogue<MT, NT, WT, kSwiGLU>(a, acc, smem, n0, m0);
}

inline constexpr int kBulkMaxStages = 8;
inline constexpr int kBulkHeader = 128;  // the stages' full and empty mbarriers, before the ring

// The bulk kernel's CTA (see the top of this file).
template <int MT, int NT, int WG, int LEVELS>
struct Bulk {
  static constexpr int kThreads = 32 * (WG + 1);  // WG consumers and the producer
  static constexpr int kWRows = 16 * MT * WG;     // weight rows per CTA
  static constexpr int kTokens = 8 * NT;          // tokens per CTA
  static constexpr int kRows = kWRows + kTokens;
  static constexpr int kMaxSlices = 1 << LEVELS;  // LEVELS partial sets folded in registers
};

// fp32 fragments, added element by element (round to nearest even).
template <int MT, int NT>
__device__ __forceinline__ void add_into(float (&d)[MT][NT][4], const float (&p)[MT][NT][4]) {
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) d[mt][nt][i] = __fadd_rn(p[mt][nt][i], d[mt][nt][i]);
}

// grid (ceil(M / (8*NT)), ceil(N / (16*MT*WG))), block 32*(WG+1) (WG consumer
// warps and the producer warp WG), dynamic shared memory kBulkHeader + stages *
// stage_bytes; a.slices <= 2^LEVELS.
// kSwiGLU (one slice, MT = 1, WG = 2): compute warp 0 runs gate rows n0 .. n0 + 15
// and warp 1 the matching up rows N + n0 .. of the [2N, K] weight (N = inter), so
// each warp streams as fast as bulk_n8's; at the end warp 1 hands its fp32 results
// to warp 0 through shared memory, which writes ops/mlp.h's SwiGLU of the pair.
template <int MT, int NT, int WG, int LEVELS, bool kSwiGLU>
__global__ void __launch_bounds__(32 * (WG + 1)) gemm_bulk_kernel(Args a) {
  // pdl_enter() comes below: the producer first streams the first stages' weight rows.
  using B = Bulk<MT, NT, WG, LEVELS>;
  static_assert(!kSwiGLU || (MT == 1 && WG == 2 && LEVELS == 0), "SwiGLU: gate + up warp");
  constexpr int kOutRows = kSwiGLU ? B::kWRows / 2 : B::kWRows;
  extern __shared__ __align__(128) unsigned char smem[];
  // full[s] (1 arrival + the stage's bytes) at bars + 8 s, empty[s] (one arrival
  // per consumer warp) at bars + 8 (kBulkMaxStages + s).
  const uint32_t bars = smem_u32(smem), ring = bars + kBulkHeader;
  const uint32_t empties = bars + 8 * kBulkMaxStages;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int m0 = blockIdx.x * B::kTokens, n0 = blockIdx.y * kOutRows;
  const int chunks = a.slices * a.slice_chunks;
  auto chunk_len = [&](int c) {  // k of stage c
    return min(a.stage_k, a.slice_len - (c % a.slice_chunks) * a.stage_k);
  };

  if (tid == 0) {
    for (int s = 0; s < a.stages; ++s) {
      mbarrier_init(bars + 8 * s, 1);
      mbarrier_init(empties + 8 * s, WG);
    }
    fence_mbarrier_init();
  }
  __syncthreads();

  // The producer: lane 0 of warp WG (the warp index through a shuffle, so the
  // compiler knows it is warp-uniform and issues each copy once) waits until the
  // consumers are done with a slot, arms its full barrier with the stage's bytes
  // and copies the stage's rows: the weight rows n0 .. n0 + nw and the tokens
  // m0 .. m0 + nx (rows past N and tokens past M are not copied). Under the step's
  // programmatic dependent launch (a.early_weights) the first stages (one ring's worth)
  // go in two parts: their weight rows, which no kernel of a step writes, before the wait
  // for the previous kernel, so they stream while it finishes, their tokens, its output,
  // after it.
  if (__shfl_sync(0xffffffffu, warp, 0) == WG) {
    if (lane != 0) {
      pdl_enter();
      return;
    }
    const int nw = min(kOutRows, a.N - n0), nx = min(B::kTokens, a.M - m0);
    const int64_t w_gpitch = 2 * static_cast<int64_t>(a.K);
    const int64_t x_gpitch = 2 * static_cast<int64_t>(a.x_stride);
    const unsigned char* w_src = reinterpret_cast<const unsigned char*>(a.w) + n0 * w_gpitch;
    const unsigned char* x_src = reinterpret_cast<const unsigned char*>(a.x) + m0 * x_gpitch;
    const uint32_t x_dst = ring + B::kWRows * a.pitch;
    // Stage c's bytes, its ring offset and its k's byte offset.
    auto bytes_of = [&](int c) { return static_cast<uint32_t>(2 * chunk_len(c)); };
    auto koff_of = [&](int c) {
      return 2 * (static_cast<int64_t>(c / a.slice_chunks) * a.slice_len +
                  static_cast<int64_t>(c % a.slice_chunks) * a.stage_k);
    };
    auto issue_weights = [&](int c) {
      const int slot = c % a.stages;
      const uint32_t bytes = bytes_of(c), so = slot * a.stage_bytes, bar = bars + 8 * slot;
      mbarrier_arrive_expect_tx(bar, static_cast<uint32_t>((kSwiGLU ? 2 : 1) * nw + nx) * bytes);
      const int64_t koff = koff_of(c);
      for (int r = 0; r < B::kWRows; ++r) {
        // Ring row r: weight row n0 + r, or with kSwiGLU gate row n0 + r (warp 0's)
        // or up row N + n0 + r - 16 (warp 1's); rows past N are not copied.
        const int n = kSwiGLU ? r % 16 : r;
        if (n >= nw) continue;
        const int64_t row = kSwiGLU && r >= 16 ? static_cast<int64_t>(a.N) + n : n;
        bulk_copy_g2s(ring + so + r * a.pitch, w_src + koff + row * w_gpitch, bytes, bar);
      }
    };
    auto issue_tokens = [&](int c) {
      const int slot = c % a.stages;
      const uint32_t bytes = bytes_of(c), so = slot * a.stage_bytes, bar = bars + 8 * slot;
      const int64_t koff = koff_of(c);
      for (int r = 0; r < nx; ++r)
        bulk_copy_g2s(x_dst + so + r * a.pitch, x_src + koff + r * x_gpitch, bytes, bar);
    };
    const int early = !a.early_weights ? 0 : chunks < a.stages ? chunks : a.stages;
    for (int c = 0; c < early; ++c) issue_weights(c);
    pdl_enter();
    for (int c = 0; c < early; ++c) issue_tokens(c);
    for (int c = early; c < chunks; ++c) {
      const int slot = c % a.stages;
      if (c >= a.stages)
        mbarrier_wait_parity(empties + 8 * slot, static_cast<uint32_t>(((c / a.stages) + 1) & 1));
      issue_weights(c);
      issue_tokens(c);
    }
    return;
  }
  pdl_enter();  // the consumers: before they write the outputs

  // ldmatrix lane roles: A matrices (rows 0-7 | 8-15) x (k 0-7 | 8-15) of a step;
  // B matrices k 0-7 | 8-15 of step 2p, then of step 2p+1, for 8 tokens.
  uint32_t a_off[MT], b_off[NT];
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
    a_off[mt] =
        ((warp * MT + mt) * 16 + (lane & 7) + 8 * ((lane >> 3) & 1)) * a.pitch + 16 * (lane >> 4);
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
    b_off[nt] = (B::kWRows + nt * 8 + (lane & 7)) * a.pitch + 16 * (lane >> 3);

  float acc[MT][NT][4];
  float part[LEVELS > 0 ? LEVELS : 1][MT][NT][4];
  // Steps 2p and 2p+1 of the stage at `st`; `two`: step 2p+1 exists; `half`: the
  // last existing step has only its lower 8 k.
  auto pair = [&](uint32_t st, int p, bool two, bool half) {
    uint32_t b[NT][4], af[2][MT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) ldmatrix_x4(b[nt], st + b_off[nt] + 64 * p);
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h == 1 && !two) break;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt) ldmatrix_x4(af[h][mt], st + a_off[mt] + 32 * (2 * p + h));
    }
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (h == 1 && !two) break;
      if (half && (h == 1 || !two)) {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) af[h][mt][2] = af[h][mt][3] = 0u;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) b[nt][2 * h + 1] = 0u;
      }
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
          mma_bf16_16816(acc[mt][nt], af[h][mt], &b[nt][2 * h], acc[mt][nt]);
    }
  };

  int c = 0;
  for (int s = 0; s < a.slices; ++s) {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) acc[mt][nt][i] = 0.0f;
    for (int j = 0; j < a.slice_chunks; ++j, ++c) {
      const int slot = c % a.stages;
      mbarrier_wait_parity(bars + 8 * slot, static_cast<uint32_t>((c / a.stages) & 1));
      const uint32_t st = ring + slot * a.stage_bytes;
      const int len = chunk_len(c);
      if (len == a.stage_k) {
#pragma unroll 2
        for (int p = 0; p < a.stage_k / 32; ++p) pair(st, p, true, false);
      } else {
        const int steps = (len + 15) / 16;
        const bool half = len % 16 != 0;
        for (int p = 0; 2 * p < steps; ++p) {
          const bool two = 2 * p + 1 < steps;
          pair(st, p, two, half && 2 * p + (two ? 1 : 0) == steps - 1);
        }
      }
      __syncwarp();  // the warp's reads of the slot are done
      if (lane == 0) mbarrier_arrive(empties + 8 * slot);
    }
    // Fold slice s into the canonical tree: acc becomes the sum of the slices so far
    // whose subtree is complete; it is stored at the level of the first clear bit.
    bool stored = false;
#pragma unroll
    for (int l = 0; l < LEVELS; ++l) {
      if (stored) continue;
      if ((s >> l) & 1) {
        add_into<MT, NT>(acc, part[l]);
      } else {
        if (s + 1 < a.slices) {
#pragma unroll
          for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
              for (int i = 0; i < 4; ++i) part[l][mt][nt][i] = acc[mt][nt][i];
        }
        stored = true;
      }
    }
  }
  // acc: the last slice's fold, the whole tree (or the one chain when S == 1).
  const int g = lane / 4, t = lane % 4;
  if constexpr (kSwiGLU) {
    // Once both warps are past their last stage, ring slot 0 is free for the
    // hand-over.
    float* up = reinterpret_cast<float*>(smem + kBulkHeader);
    named_barrier(1, 64);
    if (warp == 1)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) up[(nt * 4 + i) * 32 + lane] = acc[0][nt][i];
    named_barrier(1, 64);
    if (warp == 1) return;
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int n = n0 + g + 8 * (i >> 1);
        const int m = m0 + nt * 8 + 2 * t + (i & 1);
        if (n < a.N && m < a.M)
          a.y[static_cast<int64_t>(m) * a.y_stride + n] =
              swiglu(acc[0][nt][i], up[(nt * 4 + i) * 32 + lane]);
      }
  } else {
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int i = 0; i < 4; ++i) {
          const int n = n0 + (warp * MT + mt) * 16 + g + 8 * (i >> 1);
          const int m = m0 + nt * 8 + 2 * t + (i & 1);
          if (n < a.N && m < a.M)
            store_out(a, static_cast<int64_t>(m) * a.y_stride + n, acc[mt][nt][i]);
        }
  }
}

// The general kernel: MT = 1, fragments loaded element by element.
// Lane (g, t) of a step at k0 holds k0 + 2t, 2t+1 (register 0 / 1 of a row pair)
// and k0 + 2t+8, 2t+9 (register 2 / 3), as the fragment layout says.
template <int NT>
__global__ void __launch_bounds__(32 * kMaxSlices) gemm_general_kernel(Args a) {
  pdl_enter();
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
