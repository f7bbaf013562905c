// The wg variant of cuda::gemm (gemm.cu): the chains of ops/gemm.h on Hopper's
// warpgroup instruction wgmma.mma_async.m64nNk16.f32.bf16.bf16 (N 64, 128, or the wide
// tile's 160, 192, 224 or 256 tokens), which the device probe (tests/cuda/test_wgmma.cu) and
// cuda::wgmma_self_test show give the bits of the mma.sync.m16n8k16 chain, k16 step by
// k16 step (contract.md section 3).
//
// Operands swapped (weights = A, tokens = B): a CTA is WGS warpgroups of 128
// threads; warpgroup g owns weight rows n0 + 64 g .. n0 + 64 g + 63 against the
// CTA's TOK tokens, per k16 step one m64nTOKk16 (TOK 128 to 256: B read once per A read,
// so shared memory feeds the tensor cores with room to spare) or, at 64, one m64n64k16, every
// chain in increasing k from +0. K (and each K slice) is a whole number of 64-k stages, so
// no wgmma runs under a condition (ptxas would serialize them all, C7520) and no
// step past the end runs (an extra step of zero products would turn a -0 into +0). With kSwiGLU
// (WGS = 2) warpgroup 0 runs the gate rows n0 .. n0 + 63 and warpgroup 1 the matching up rows N +
// n0 .. of the [2N, K] weight; warpgroup 1 hands its fp32 results to warpgroup 0 through shared
// memory, which writes ops/mlp.h's SwiGLU of the pair.
//
// Ring: a producer fills `stages` stages of 64 k of every row with two 2-D TMA
// copies (weight rows, then tokens; with kSwiGLU the gate and the up rows are two
// boxes), in the 128-byte swizzle that wgmma reads (common/wgmma.cuh
// wgmma_desc_sw128); the tensor maps end at N (2N) and M, so the TMA writes
// zeros past them. When the tokens fit one CTA, their box is only round_up(M, 8)
// rows (a.stage_bytes = the bytes a stage receives): the token rows past it are
// never written, and their stale bytes reach only outputs that are not stored.
// Stage c's full mbarrier completes with its bytes; each
// consumer warp arrives on its empty mbarrier once the wgmma group that read it is
// done, and the producer refills the slot with stage c + stages when every warp did.
// The producer is a warp of its own (the CTA's last; lane r fills ring r), and the
// consumers keep one wgmma group in flight: stage c's slot is released once stage
// c + 1's group is issued and wgmma_wait<1> says c's is done (2026-12-04e runs 3-5:
// qkv at 56 tokens 38.2 -> 28.9 us, lm_head at 224 523 -> 483 us with m64n256k16).
//
// K slices (k_slices = S > 1, each a whole number of stages) run in one of two ways over
// the kCtas CTAs of a cluster:
// - slice groups (kGroups, below), with kCtas = 2 over the two CTAs of a cluster: CTA rank h
//   runs slices [h S / 2, (h + 1) S / 2), rank 1 leaves its subtree of the canonical tree
//   in its shared memory and rank 0 adds it to its own (left + right, the tree's root)
//   through distributed shared memory, so a row block's weights stream through two SMs;
// - one slice a CTA (kCtas = S, no groups): CTA rank z runs slice z with all its
//   warpgroups (each its own 64 rows, as without slices), leaves its fp32 results in its
//   shared memory, and after a cluster barrier each CTA folds 1 / S of the outputs: it
//   reads the S partials of each through distributed shared memory and adds them by
//   canonical_tree_sum (the whole tree at once). The wide tile's weights are read once
//   for all the tokens and streamed through S SMs (o_proj and down past 64 tokens).
// Needs K % (64 k_slices) == 0, x_stride % 8 == 0 and 16-byte
// aligned w and x (the tensor maps' strides and bases).
#pragma once

#include <cuda.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/common/ptx.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/gemm/tile.cuh"

namespace sparkdraft::cuda::gemm_detail {

inline constexpr int kWgMaxStages = 8;  // the header holds 2 mbarriers a stage

template <int WGS, int TOK>
struct WgTile {
  static_assert(TOK == 64 || TOK == 128 || TOK == 160 || TOK == 192 || TOK == 224 || TOK == 256,
                "tokens a CTA: 64, 128 or 160 .. 256 (one m64nTOKk16 a k16 step)");
  static constexpr int kThreads = 128 * WGS;
  static constexpr int kWRows = 64 * WGS;                // weight rows per CTA
  static constexpr int kTokens = TOK;                    // tokens per CTA
  static constexpr int kRows = kWRows + kTokens;         // rows of a stage
  static constexpr int kStageBytes = kRows * kRowBytes;  // 64 k of every row
  static constexpr int kAcc = TOK / 2;                   // fp32 accumulators per thread
};

inline constexpr int kWgHeader = 2048;  // the mbarriers, then slack to align the ring to 1 KB

// Threads of a CTA: the consumer warpgroups, then the producer warp.
__host__ __device__ constexpr int wg_threads(int wgs) { return 128 * wgs + 32; }

// grid (ceil(M / TOK), ceil(N / rows), kCtas) in clusters of 1 x 1 x kCtas,
// rows = 64 (kSwiGLU, kGroups) or 64 WGS;
// block wg_threads(WGS); dynamic shared memory kWgHeader + stages * kStageBytes (one chain
// over K), or with kGroups kWgHeader + WGS * stages * the one-warpgroup stage.
// kGroups: the WGS warpgroups are slice groups over the same 64 rows and tokens:
// group g runs slices [g S / WGS, (g + 1) S / WGS) (at most 2: folded in registers)
// through its own ring and barriers (the producer warp's lane g fills it), and the
// groups' results are added by canonical_tree_sum in group 0 through shared memory
// (the S slices' canonical tree: the groups hold aligned subtrees of it).
// tw: the weight [N, K] (kSwiGLU: [2N, K]) in boxes of 64 k x rows rows; tx: the
// tokens [M, K] (row pitch x_stride) in boxes of 64 k x min(TOK, round_up(M, 8))
// rows.
template <int WGS, int TOK, bool kSwiGLU, bool kGroups = false, int kCtas = 1>
__global__ void __launch_bounds__(wg_threads(WGS))
    gemm_wg_kernel(const __grid_constant__ CUtensorMap tw, const __grid_constant__ CUtensorMap tx,
                   Args a) {
  // pdl_enter() comes below: the producer first streams its ring's first stages of weights.
  using T = WgTile<kGroups ? 1 : WGS, TOK>;  // the layout of one ring's stage
  static_assert(!kSwiGLU || WGS == 2, "SwiGLU: a gate and an up warpgroup");
  static_assert(!(kGroups && kSwiGLU), "slice groups: plain, one chain over K for SwiGLU");
  static_assert(kCtas == 1 || (kGroups && kCtas == 2) ||
                    (!kGroups && !kSwiGLU && (kCtas == 2 || kCtas == 4 || kCtas == 8)),
                "a cluster's CTAs: the slice groups' two halves, or one K slice a CTA");
  constexpr bool kSliceCtas = !kGroups && kCtas > 1;  // one K slice a CTA
  static_assert(!kSliceCtas || T::kAcc % kCtas == 0, "each CTA folds kAcc / kCtas outputs");
  constexpr int kOutRows = kSwiGLU || kGroups ? 64 : T::kWRows;
  constexpr int kRings = kGroups ? WGS : 1;
  constexpr int kConsumerWarps = 4 * WGS / kRings;  // the warps that read a ring
  extern __shared__ __align__(1024) unsigned char smem[];
  const int tid = threadIdx.x, wg = tid / 128, lane = tid % 32;
  const bool producer_warp = tid >= 128 * WGS;
  // This thread's ring (the producer warp: lane r fills ring r).
  const int grp = producer_warp ? (lane < kRings ? lane : 0) : kGroups ? wg : 0;
  const bool producer = producer_warp && lane < kRings;
  const int m0 = blockIdx.x * T::kTokens, n0 = blockIdx.y * kOutRows;
  // This CTA's slices are [half S, (half + 1) S) of the S kCtas (one slice a CTA: S = 1).
  const int half = kCtas > 1 ? static_cast<int>(cluster_ctarank()) : 0;
  const int S = kGroups ? a.seq_slices / kCtas : 1;
  const int per = S / kRings;  // slices of one ring
  const int slice_len = a.K / (S * kCtas);
  const int slice_chunks = slice_len / kStageK;
  const int chunks = per * slice_chunks;
  // Ring r's full[s] at base + 16 r kWgMaxStages + 8 s, its empty[s] 8 kWgMaxStages
  // further; the rings from the first 1 KB boundary past the barriers.
  const uint32_t base = smem_u32(smem);
  const uint32_t bars = base + 16 * kWgMaxStages * grp, empties = bars + 8 * kWgMaxStages;
  const uint32_t rings = (base + 16 * kWgMaxStages * kRings + 1023) & ~1023u;
  const uint32_t ring = rings + static_cast<uint32_t>(grp * a.stages) * T::kStageBytes;
  if (producer) {
    for (int st = 0; st < a.stages; ++st) {
      mbarrier_init(bars + 8 * st, 1);
      mbarrier_init(empties + 8 * st, kConsumerWarps);
    }
    fence_mbarrier_init();
  }
  __syncthreads();

  // A stage into ring slot `slot` (its producer) at k: the ring's chunks in order, k =
  // slice * slice_len + 64 c for chunk c of each of its slices. In two parts: the slot's
  // full barrier armed with the stage's bytes and the weight rows, then the tokens.
  auto issue_weights = [&](int slot, int k) {
    const uint32_t st = ring + static_cast<uint32_t>(slot) * T::kStageBytes, bar = bars + 8 * slot;
    mbarrier_arrive_expect_tx(bar, static_cast<uint32_t>(a.stage_bytes));
    if constexpr (kSwiGLU) {
      tma_load_2d(st, &tw, k, n0, bar);
      tma_load_2d(st + 64 * kRowBytes, &tw, k, a.N + n0, bar);
    } else {
      tma_load_2d(st, &tw, k, n0, bar);
    }
  };
  auto issue_tokens = [&](int slot, int k) {
    const uint32_t st = ring + static_cast<uint32_t>(slot) * T::kStageBytes, bar = bars + 8 * slot;
    tma_load_2d(st + T::kWRows * kRowBytes, &tx, k, m0, bar);
  };
  if (producer_warp) {
    // Under the step's programmatic dependent launch (a.early_weights) the first stages
    // (one ring's worth) go in two parts: their weight rows, which no kernel of a step
    // writes, before the wait for the previous kernel, so they stream while it finishes,
    // their tokens, its output, after it.
    const int k_first = (half * S + grp * per) * slice_len;
    const int early = !a.early_weights ? 0 : chunks < a.stages ? chunks : a.stages;
    auto k_of = [&](int c) {  // the loop's k of stage c
      return k_first + (c / slice_chunks) * slice_len + (c % slice_chunks) * kStageK;
    };
    if (producer)
      for (int c = 0; c < early; ++c) issue_weights(c, k_of(c));
    pdl_enter();
    if (producer)
      for (int c = 0; c < early; ++c) issue_tokens(c, k_of(c));
    // Stage c into slot c % stages, once every consumer warp released stage c -
    // stages (phase c / stages - 1 of the slot's empty barrier). The slot, its phase and
    // k advance with c (no division in the loop).
    if (producer) {
      int slot = 0, in_slice = 0;
      uint32_t phase = 1;  // the phase before the first: c < stages waits for none
      int k = k_first;
      for (int c = 0; c < chunks; ++c) {
        if (c >= a.stages) mbarrier_wait_parity(empties + 8 * slot, phase);
        if (c >= early) {
          issue_weights(slot, k);
          issue_tokens(slot, k);
        }
        k += kStageK;
        if (++in_slice == slice_chunks) {  // the next slice starts slice_len further
          in_slice = 0;
          k += slice_len - slice_chunks * kStageK;
        }
        if (++slot == a.stages) {
          slot = 0;
          phase ^= 1u;
        }
      }
    }
    return;  // the epilogue's barriers are named ones over the consumers
  }
  pdl_enter();  // the consumers: before they write the outputs

  // acc: the chain (a group's first slice), acc2: a group's second slice, from +0.
  float acc[T::kAcc], acc2[kGroups ? T::kAcc : 1];
#pragma unroll
  for (int e = 0; e < T::kAcc; ++e) acc[e] = 0.0f;
  wgmma_fence_operands(acc);
  if constexpr (kGroups) {
#pragma unroll
    for (int e = 0; e < T::kAcc; ++e) acc2[e] = 0.0f;
    wgmma_fence_operands(acc2);  // the zeros in place before the first wgmma (C7515)
  }

  // Stages [c0, c1): one wgmma group each, one group left in flight; stage c's slot
  // is released once c + 1's group is issued and c's is done. Only wgmmas touch acc
  // between the waits for every group (ptxas would serialize them, C7514).
  const uint32_t a_off = kGroups ? 0u : static_cast<uint32_t>(wg) * 64 * kRowBytes;  // its rows
  const uint32_t b_off = T::kWRows * kRowBytes;                                      // the tokens
  // Slot 0's descriptors; a slot's (and a k16 step's 32 bytes) are theirs plus its byte offset
  // / 16 in the address field (bits 0-13: shared addresses below 256 KB never carry out).
  const uint64_t da0 = wgmma_desc_sw128(ring + a_off), db0 = wgmma_desc_sw128(ring + b_off);
  constexpr uint64_t kStageDesc = T::kStageBytes / 16;
  static_assert(T::kStageBytes % 1024 == 0, "every stage's atoms 1024-byte aligned");
  // Stages [c0, c1): the slot and its phase advance with the chunk (no division in the loop).
  auto stages = [&](int c0, int c1, float(&d)[T::kAcc]) {
    int slot = c0 % a.stages, prev = (c0 + a.stages - 1) % a.stages;
    uint32_t phase = static_cast<uint32_t>((c0 / a.stages) & 1);
    for (int chunk = c0; chunk < c1; ++chunk) {
      mbarrier_wait_parity(bars + 8 * slot, phase);
      const uint64_t off = static_cast<uint64_t>(slot) * kStageDesc;
      wgmma_fence();
#pragma unroll
      for (int h = 0; h < 4; ++h) {  // every stage is 4 whole k16 steps (K % 64 == 0)
        const uint64_t da = da0 + off + 2 * h;
        const uint64_t db = db0 + off + 2 * h;
        // The tokens are TOK / 8 consecutive 8-row atoms: acc[32 nb + i] is m64n64's
        // acc[i] of token block nb (the accumulator layout repeats every 8 columns).
        if constexpr (TOK == 256) {
          wgmma_m64n256k16_ss(d, da, db);
        } else if constexpr (TOK == 224) {
          wgmma_m64n224k16_ss(d, da, db);
        } else if constexpr (TOK == 192) {
          wgmma_m64n192k16_ss(d, da, db);
        } else if constexpr (TOK == 160) {
          wgmma_m64n160k16_ss(d, da, db);
        } else if constexpr (TOK == 128) {
          wgmma_m64n128k16_ss(d, da, db);
        } else {
          wgmma_m64n64k16_ss(d, da, db);
        }
      }
      wgmma_commit();
      wgmma_wait<1>();
      __syncwarp();
      if (chunk > 0 && lane == 0) mbarrier_arrive(empties + 8 * prev);
      prev = slot;
      if (++slot == a.stages) {
        slot = 0;
        phase ^= 1u;
      }
    }
  };
  // A group's first slice (or its only one) into acc, the second (per == 2) into acc2;
  // no register of either is written between their wgmmas (a write would make ptxas
  // serialize every wgmma, C7520).
  const int first = kGroups && per == 2 ? slice_chunks : chunks;
  stages(0, first, acc);
  if constexpr (kGroups) stages(first, chunks, acc2);
  wgmma_wait<0>();
  wgmma_fence_operands(acc);
  if constexpr (kGroups) {
    wgmma_fence_operands(acc2);
    if (per == 2)
#pragma unroll
      for (int e = 0; e < T::kAcc; ++e) acc[e] = __fadd_rn(acc[e], acc2[e]);
  }

  // The consumer warpgroups only (the producer warp has left).
  auto consumers_sync = [] { named_barrier(1, 128 * WGS); };
  if constexpr (kGroups) {
    // Group g > 0 leaves its subtree in the (free) rings; group 0 adds them.
    consumers_sync();  // every group is past its last wgmma, no copy in flight
    float* const ex = reinterpret_cast<float*>(smem + (rings - base));
    if (wg > 0)
#pragma unroll
      for (int e = 0; e < T::kAcc; ++e) ex[((wg - 1) * T::kAcc + e) * 128 + tid % 128] = acc[e];
    consumers_sync();
    if (wg > 0) return;
#pragma unroll
    for (int e = 0; e < T::kAcc; ++e) {
      float p[WGS];
      p[0] = acc[e];
#pragma unroll
      for (int h = 1; h < WGS; ++h) p[h] = ex[((h - 1) * T::kAcc + e) * 128 + tid];
      acc[e] = canonical_tree_sum(p, WGS);
    }
    if constexpr (kCtas == 2) {
      // The S slices' tree is the two halves' subtrees, then their sum (left + right).
      // Rank 1 leaves its subtree in its own ring (its thread's slots: read above,
      // free now); after the cluster barrier rank 0 reads it there and adds it; after
      // the second rank 1 may exit (its shared memory is read no more).
      if (half == 1)
#pragma unroll
        for (int e = 0; e < T::kAcc; ++e) ex[e * 128 + tid] = acc[e];
      cluster_sync();
      if (half == 0) {
        const uint32_t right = cluster_map_shared(smem_u32(ex + tid), 1u);
#pragma unroll
        for (int e = 0; e < T::kAcc; ++e)
          acc[e] = __fadd_rn(acc[e], ld_shared_cluster_f32(right + 4u * 128u * e));
      }
      cluster_sync();
      if (half == 1) return;
    }
  }

  // Thread (warp w of its warpgroup, lane 4 g + t): acc[32 nb + 4 j + i] is weight
  // row 16 w + g + 8 (i / 2) of the warpgroup and token 64 nb + 8 j + 2 t + i % 2.
  const int w = (tid / 32) % 4, g = lane / 4, t = lane % 4;
  if constexpr (kSliceCtas) {
    // One slice a CTA: the partials [e][thread] in the (free) ring, then CTA `half` folds
    // outputs e in [half kShare, (half + 1) kShare) of every thread position from the
    // kCtas CTAs' partials (slice z in CTA z), in the tree's order.
    constexpr int kT = 128 * WGS, kShare = T::kAcc / kCtas;
    consumers_sync();  // every warpgroup is past its last wgmma: the ring is free
    float* const ex = reinterpret_cast<float*>(smem + (rings - base));
#pragma unroll
    for (int e = 0; e < T::kAcc; ++e) ex[e * kT + tid] = acc[e];
    cluster_sync();  // every CTA's partials are in place
    uint32_t src[kCtas];
#pragma unroll
    for (int z = 0; z < kCtas; ++z)
      src[z] = cluster_map_shared(smem_u32(ex + tid), static_cast<uint32_t>(z));
#pragma unroll 2
    for (int q = 0; q < kShare; ++q) {
      const int e = half * kShare + q;
      float p[kCtas];
#pragma unroll
      for (int z = 0; z < kCtas; ++z)
        p[z] = ld_shared_cluster_f32(src[z] + 4u * static_cast<uint32_t>(kT * e));
      const float v = canonical_tree_sum(p, kCtas);
      const int i = e % 4, j = (e / 4) % 8, nb = e / 32;
      const int n = n0 + 64 * wg + 16 * w + g + 8 * (i >> 1);
      const int m = m0 + 64 * nb + 8 * j + 2 * t + (i & 1);
      if (n < a.N && m < a.M) store_out(a, static_cast<int64_t>(m) * a.y_stride + n, v);
    }
    cluster_sync();  // no CTA leaves while another still reads its partials
    return;
  }
  if constexpr (kSwiGLU) {
    consumers_sync();  // every warpgroup is past its last wgmma: the ring is free
    float* up = reinterpret_cast<float*>(smem + (rings - base));
    if (wg == 1)
#pragma unroll
      for (int e = 0; e < T::kAcc; ++e) up[e * 128 + tid - 128] = acc[e];
    consumers_sync();
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
      const int n = n0 + 64 * wg + 16 * w + g + 8 * (i >> 1);  // kGroups: wg == 0
      const int m = m0 + 64 * nb + 8 * j + 2 * t + (i & 1);
      if (n < a.N && m < a.M) store_out(a, static_cast<int64_t>(m) * a.y_stride + n, acc[e]);
    }
  }
}

}  // namespace sparkdraft::cuda::gemm_detail
