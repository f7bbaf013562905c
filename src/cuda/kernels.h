// The eager CUDA kernels: one launcher per op of cpu/ops.h, same names,
// same arguments (device pointers instead of host ones, the same ops:: params) plus
// the caller's stream. The contract of each op is in include/sparkdraft/ops/; this
// header says how each launches.
//
// Each kernel reproduces its CPU op bit for bit (contract.md section 3): the same
// rounding points (stated in ops/<family>.h), the canonical reduction order of
// core/reduce.h (one warp per normed row: lane l owns chunks l, l+32, ... of 8
// elements, one fma per term, then the xor butterfly), the math of core/math.h
// and, for every matrix product (the GEMMs and attention's two products), the
// tensor-core chain of core/mma.h, the same chains as the CPU's twin.
//
// Launchers check their arguments (InvalidArgument naming the field) before any
// launch, launch on `stream` and check the launch (DeviceError). They never
// synchronize and never allocate, so they can be captured in a CUDA graph.
// Values behind device pointers (token ids, positions, slots, kv lengths) are
// not read on the host: the API boundary validates them (contract.md section 4).
// Zero rows / tokens is a valid empty call and launches nothing.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "sparkdraft/config.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/ops/attention.h"
#include "sparkdraft/ops/boundary.h"
#include "sparkdraft/ops/confidence.h"
#include "sparkdraft/ops/embed.h"
#include "sparkdraft/ops/gemm.h"
#include "sparkdraft/ops/kv.h"
#include "sparkdraft/ops/mlp.h"
#include "sparkdraft/ops/norm.h"
#include "sparkdraft/ops/query_block.h"
#include "sparkdraft/ops/rope.h"

namespace sparkdraft::cuda {

// ---- GEMM (ops/gemm.h) ------------------------------------------------------------------
// cpu::gemm on the device: y = bf16(chain(x[m], w[n])), k_slices canonical K slices
// added by the fixed tree. mma.sync m16n8k16 with the operands swapped (weights
// are A, 16 rows per m16 tile; tokens are B, 8 per n8 tile); no cuBLAS.
//
// Design (src/cuda/gemm/tile.cuh): a CTA owns 16*MT weight rows and 8*NT*WT
// tokens and is k_slices slice groups of WT warps; group s runs slice s, each of
// its warps the group's weight rows against its own 8*NT tokens, every chain over
// the whole slice in increasing k. With k_slices > 1 the CTA adds the groups'
// fp32 partials by the canonical tree in shared memory (no workspace). Grid
// (ceil(M / (8*NT*WT)), ceil(N / (16*MT))): x (fastest) walks the token chunks,
// so the CTAs that share weight rows run together and the re-reads hit L2.
// Ring variants (K % 8 == 0, x_stride % 8 == 0, x and w 16-byte aligned): every
// group streams its weight rows and its tokens through its own shared-memory
// ring (stages of 64 k, 16-byte cp.async, ldmatrix.x4 reads, swizzled; one CTA
// barrier per stage), stages = clamp(budget / k_slices / stage bytes, 2, 16), budget
// 96 KB, but 48 KB for ring_big and 72 KB for ring_wide (3 and 4 CTAs an SM):
//   ring_n8   MT 1, NT 1, WT 1 (16 rows, 8 tokens)                3 KB a stage
//   ring_n16  MT 1, NT 2, WT 1 (16 rows, 16 tokens)               4 KB
//   ring_n32  MT 2, NT 2, WT 2 (32 rows, 32 tokens)               8 KB
//   ring_n64  MT 2, NT 2, WT 4 (32 rows, 64 tokens)               12 KB
//   ring_big  MT 4, NT 4, WT 2 (64 rows, 64 tokens; <= 4 slices)  16 KB
//   ring_wide MT 4, NT 4, WT 4 (64 rows, 128 tokens; <= 2 slices) 24 KB
// ring_big and ring_wide run more slices than their thread limit allows (8, or 4
// and 8) in sequence in one group when K % (64 * k_slices) == 0 (the tree's three
// levels in shared memory past the ring, folded as a binary counter after each
// slice); otherwise as ring_n64.
// Bulk variant bulk_n8 (the same layouts): a CTA of one compute warp owns 16
// weight rows and 8 tokens, every chain over the whole K; the k_slices slices run
// one after the other in the warp and are folded in registers by the canonical
// tree. One more warp, the producer, streams the CTA's rows through one ring of
// stages of 256, 128 or 64 k (rows padded to 2*k + 16 bytes), one cp.async.bulk
// per row and stage completing the stage's full mbarrier; the compute warp
// releases a slot on its empty mbarrier. The widest stage that leaves >= 4 stages
// (up to 8) when every CTA of the grid is resident (up to 4 a SM).
// automatic (gemm_pick; GemmSpeed.EveryVariant measures every variant): general
// where the layout needs it; M <= 8: bulk_n8 (k_slices 1) or ring_n8; M <= 16
// ring_n16; M <= 32 ring_n32; M <= 64 ring_big if k_slices <= 4 and N >= 8192, else
// ring_n64; past 64 tokens ring_wide (k_slices <= 2, or in sequence), ring_big
// (<= 4), ring_n64. Where cuda::wgmma_self_test passes and K % (64 k_slices) == 0,
// the wg tiles instead: up to 64 tokens wg_n64 for N >= 16384, else bulk_n8 up to
// 8 tokens and wg_n64 from 9 (with K slices: ring_n8 up to 8 tokens, wg_k from 9: slice
// groups over one CTA or a cluster's two, and past 64 tokens with 8 slices the wide tile,
// one slice a CTA of a cluster of eight, folded through distributed shared memory: three
// warpgroups' 192 rows a CTA up to 192 tokens, two past that);
// past 64 tokens wg_n256 (as narrow as the tokens; one warpgroup's rows a CTA where that
// grid fills its waves of SMs better, gemm.cu kWaveGain) for N >= 8192, else wg_n64 (one
// warpgroup's rows against all the tokens up to 256) (measured: gemm.cu gemm_pick).
// general: any K, stride and alignment, MT 1, NT 4, each fragment element loaded
// from global memory (zero past the ends); the same bits as the ring.
// Refuses (InvalidArgument) what ops::check_gemm_args refuses, and N needing more
// than 65535 row blocks. M == 0 or N == 0 launches nothing. The first call on a
// device runs cuda::mma_self_test() and cuda::wgmma_self_test() (cuda/common/mma_probe.h; they
// synchronize), so capture a graph after one eager call (CudaDraft runs both at
// construction). The wg tiles encode their TMA tensor maps on the host at each call
// (captured into a graph with the kernel's arguments).
// With p.y_dtype f32 the fp32 sums are stored unrounded into y [M, y_stride] fp32:
// y[m][n] = the canonical tree of the k_slices slices' chains (one chain when
// k_slices is 1), before the bf16 rounding. A TP rank's subtree of its canonical
// K slices (ops/gemm.h; the all-reduce completes the tree, then one rounding).
// Every variant but the SwiGLU tiles. The bits are cpu::gemm's, except that an
// fp32 NaN keeps NaN but not its payload (the GPU's arithmetic returns the
// canonical NaN; the bf16 rounding after makes every NaN the canonical bf16 NaN on
// both). The GPU takes packed weights only (p.w_stride 0 or K).
void gemm(const ops::GemmParams& p, cudaStream_t stream);

// The variants cuda::gemm chooses from (tests force each; forcing a ring or bulk
// variant on arguments it cannot take throws InvalidArgument).
enum class GemmVariant {
  automatic,
  ring_n8,
  ring_n16,
  ring_n32,
  ring_n64,
  ring_big,   // 64 weight rows x 64 tokens per CTA, 2 warps of 64 x 32 (more mma per
              // fragment load); 4 K slices in parallel groups, 8 in sequence
  ring_wide,  // 64 weight rows x 128 tokens per CTA, 4 warps of 64 x 32; 2 K slices in
              // parallel groups, 4 or 8 in sequence
  bulk_n8,
  // wgmma fed by the TMA (src/cuda/gemm/wg_tile.cuh; only where
  // cuda::wgmma_self_test passes: sm_90a; K % (64 k_slices) == 0): 64 tokens and 64
  // weight rows a CTA (one warpgroup, m64n64k16; from 65 to 256 tokens the 64 rows against
  // all the tokens, m64nMk16 as below), 128 x 128 (two, m64n128k16), 256 tokens x
  // 128 rows (two, m64n256k16; up to 256 tokens only round_up(M, 32) from 160, m64nMk16);
  // with K slices each of them runs as wg_k
  wg_n64,
  wg_n128,
  wg_n256,
  // wgmma as above, K slices in parallel: min(4, k_slices) warpgroups over the same
  // 64 weight rows and 64 tokens, each slice group with its own TMA ring, their
  // results added by the canonical tree (one K slice: as wg_n64); eight slices where
  // twice the CTAs fit one wave, or past 64 tokens, run over the two CTAs of a cluster
  // (four each, the halves' subtrees added through distributed shared memory; past 64
  // tokens 128 tokens a CTA in two groups of two slices)
  wg_k,
  general
};
void gemm_with(GemmVariant variant, const ops::GemmParams& p, cudaStream_t stream);
// What `automatic` runs for these arguments, and whether the ring and bulk
// variants can (the same layouts).
GemmVariant gemm_pick(const ops::GemmParams& p);
bool gemm_ring_ok(const bf16* x, int64_t x_stride, const bf16* w, int K);

// The bulk_n8 kernel's ring, for the tuning sweep of the tests
// (CudaGemm.BulkTuningEqualsCpu, GemmSpeed.BulkTuning); cuda::gemm runs the default,
// which the sweep measured fastest (docs/history/gpu-log.md, 2026-12-01g, run 1; a
// 32-lane producer it also tried helped only the narrow stages and is gone).
//   stage_k          k of a ring stage (512, 256, 128 or 64); 0: the widest that
//                    leaves min_stages in the CTA's share of shared memory
//   min_stages       the fewest stages that share must hold (2 or more)
// Every setting gives the same bits (only the staging changes); a stage_k whose
// min_stages do not fit is refused with InvalidArgument.
struct GemmBulkTuning {
  int stage_k = 0;
  int min_stages = 2;
};
void gemm_bulk_tuned(const GemmBulkTuning& tuning, const ops::GemmParams& p, cudaStream_t stream);

// gate_up and the SwiGLU of ops/mlp.h in one pass (p.gu unused):
// w is the [2*inter, K] gate_up weight, y [M, y_stride] gets
//   y[m][i] = bf16(silu_f32(f32(bf16(chain(x[m], w[i])))) * f32(bf16(chain(x[m], w[inter+i]))))
// the bits of cuda::gemm into [M, 2*inter] followed by cuda::silu_mul, without the
// [M, 2*inter] intermediate (the bulk kernel up to 8 tokens, then the wg or ring
// tile gemm_pick gives, each CTA holding gate rows and their up rows). Needs
// gemm_ring_ok (InvalidArgument otherwise).
void gemm_swiglu(const ops::GateUpParams& p, cudaStream_t stream);
const char* gemm_variant_name(GemmVariant v);

// ---- norms ------------------------------------------------------------------------
// cpu::rms_norm: y_i = bf16((x_i * r) * g_i), r = 1 / sqrt(ss / n + eps), ss in the
// canonical order. One warp per row, 4 rows per 128-thread block; any n >= 1.
// In place (y == x, same stride) is allowed for bf16 input.
void rms_norm(const ops::RmsNormParams& p, cudaStream_t stream);

// ---- residual boundary --------------------------------------------------------------
// ops::BoundaryParams with device pointers; `residual` is float* when residual_dtype is
// f32, else bf16*; updated in place. One block per row of `hidden` contiguous values
// (src/cuda/common/residual_boundary.cuh).
void residual_boundary(const ops::BoundaryParams& p, const bf16* branch, void* residual, bf16* next,
                       cudaStream_t stream);

// Per-head norm, in place (ops/norm.h head_rms_norm): one warp per head, the
// arithmetic of rms_norm.
void head_rms_norm(const ops::HeadNormParams& p, cudaStream_t stream);

// ---- RoPE ---------------------------------------------------------------------------
// cpu::rope with `table` the device copy of cpu::rope_table's host table (fp32,
// [max_positions, head_dim]); every positions[t] must lie in the table. One thread
// per rotated pair.
void rope(const ops::RopeParams& p, cudaStream_t stream);

// ---- KV cache -----------------------------------------------------------------------
// cpu::kv_insert: exact copies into the paged cache [slots, kv_heads, 2*head_dim];
// a negative slot (-1 = padding) writes nothing. One block per token.
void kv_insert(const ops::KvInsertParams& p, cudaStream_t stream);

// ---- embedding, activations -----------------------------------------------------------
// cpu::embed: out[r] = table[ids[r]]. One block per row.
void embed(const ops::EmbedParams& p, cudaStream_t stream);

// cpu::widen: out[i] = f32(x[i]). One thread per element.
void widen(const ops::WidenParams& p, cudaStream_t stream);
// out[i] = to_bf16(x[i]) (core/bf16.h: round to nearest even, any NaN the canonical
// bf16 NaN): the one rounding after a TP all-reduce. One thread per element.
void narrow(const float* x, int64_t n, bf16* out, cudaStream_t stream);

// cpu::prepare_query_block (ops/query_block.h) on device pointers. One thread per token.
void prepare_query_block(const ops::QueryBlockParams& p, cudaStream_t stream);
// cpu::select_drafted_rows (ops/query_block.h) on device pointers: one block per drafted
// row, 8-byte words where the rows allow it, else bf16 by bf16.
void select_drafted_rows(const ops::DraftedRowsParams& p, cudaStream_t stream);

// cpu::silu_mul: y = bf16(silu(f32(g)) * f32(u)), gu [rows, 2I], y [rows, I].
// One thread per output element.
void silu_mul(const ops::SiluMulParams& p, cudaStream_t stream);

// cpu::confidence (ops/confidence.h, contract.md section 9). One warp per (row, step)
// value, 4 per 128-thread block; the warp walks [h ; e] in the canonical order of
// core/reduce.h (lane l owns chunks l, l+32, ... of 8 inputs, one fma per term) and
// combines the lanes with the xor butterfly, then adds the bias and applies
// sigmoid_f32 (core/confidence.h).
void confidence(const ops::ConfidenceParams& p, cudaStream_t stream);

// cpu::o_norm_gate (in place on o [tokens, heads*head_dim]); the gate applies when
// g is not null. One warp per (token, head).
void o_norm_gate(const ops::ONormGateParams& p, cudaStream_t stream);

// ---- weights --------------------------------------------------------------------------
// The lowest index i < n whose element (bf16, or fp32 when `f32`) is NaN or infinite,
// folded into *first by atomicMin (the caller sets *first to ULLONG_MAX first; it
// stays so when every element is finite). Grid-stride loop, any n.
void first_nonfinite(const void* data, int64_t n, bool f32, unsigned long long* first,
                     cudaStream_t stream);

// ---- attention over the paged cache -----------------------------------------------------
// ops/attention.h's definition on the tensor cores, bit for bit cpu::attention (how:
// src/cuda/eager/attention.cu). One CTA per (piece of up to 64 rows = tokens x grouped
// heads of one request, KV head, split); with splits > 1 each CTA covers a share of
// its rows' chunks and stores per-chunk partials that a combine kernel folds in chunk
// order (the same bits for every split). Padding tokens (token_request -1) write zeros.
inline constexpr int kAttentionMaxHeadDim = 256;
inline constexpr int kAttentionMaxGroup = 64;  // heads / kv_heads (rows of one token per CTA)

// Besides ops::AttentionParams::check(), the launcher refuses what the kernels cannot
// do: head_dim > kAttentionMaxHeadDim, heads / kv_heads > kAttentionMaxGroup, heads
// or kv_heads > 65535.
void check_attention_limits(const ops::AttentionParams& p);

// The launcher's split for these params (host-known fields only: tokens, requests,
// heads, kv_heads, head_dim, window, causal, max_kv_len): 1 where the batch already
// gives (requests or token pieces) x kv_heads >= 3/4 of a wave (132 SMs x the CTAs
// per SM of the head dim: 2 up to 128, else 1), else as many splits of each row
// set's chunks as still fit in that one wave. The pieces are about a request's tokens,
// halved where the context would split and half a piece still spans two 16-row tiles.
int attention_splits(const ops::AttentionParams& p);
// The launcher's piece: the most consecutive tokens of one request a CTA takes.
int attention_tokens_per_piece(const ops::AttentionParams& p);

// Device workspace `attention` needs with `splits` (0 = attention_splits(p)): 0 for
// one split, else fp32 (m, l, o[head_dim]) per token, head and chunk slot (the
// chunks one query can fold, ceil(max_kv_len / 64), or with a causal window w
// ceil((w - 1) / 64) + 1), and an int32 per token and head (the chunk where the first
// split's own fold stopped).
size_t attention_workspace_bytes(const ops::AttentionParams& p, int splits = 0);

// q: [tokens, q_stride] (head h at h*head_dim), cache: [slots, kv_heads, 2*head_dim],
// out: [tokens, heads*head_dim] bf16. splits: 0 = attention_splits(p); tests force
// any value in [1, 65535].
void attention(const ops::AttentionParams& p, const bf16* q, const bf16* cache, bf16* out,
               void* workspace, size_t workspace_bytes, cudaStream_t stream, int splits = 0);

// The kernels' fast forms (common/fast_math.cuh: a shorter double route that falls back
// to the function itself near float rounding boundaries) against core/math.h's function
// on the device, over all 2^32 float bit patterns: the number that differ, the lowest
// such pattern (0xffffffff when none) and how many x of the working domain take the
// fallback (exp: [-87, 0], attention's s - max; silu: [-80, 40]; sigmoid: [-87, 40]; tanh:
// [-10, 10]). The proof that attention's p = exp(s - max), SwiGLU's silu, the output gate's
// sigmoid and the Markov step logits' tanh have the contract's bits (CudaFastMath).
enum class FastMath { exp, silu, sigmoid, tanh };
uint64_t fast_math_mismatches(FastMath f, uint32_t* first_bad, uint64_t* slow_in_domain);

}  // namespace sparkdraft::cuda
