// cuda::gemm: the launcher of the tensor-core GEMM (tile.cuh), its variant choice
// and its ring sizing (cp.async ring and bulk-copy ring) (cuda/kernels.h states the design;
// ops/gemm.h the contract).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <set>
#include <string>
#include <utility>

#include "cuda/common/launch.h"
#include "cuda/common/mma_probe.h"
#include "cuda/gemm/tile.cuh"
#include "cuda/gemm/wg_tile.cuh"
#include "cuda/kernels.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/error.h"
#include "sparkdraft/ops/gemm.h"

namespace sparkdraft::cuda {
namespace {

using gemm_detail::Args;
using gemm_detail::Tile;

// Shared memory one slice group's ring may take (a CTA has `slices` groups), before
// the clamp to 2..16 stages: 96 KB a CTA (two CTAs an SM) for the small tiles;
// three 16 KB stages for ring_big (four CTAs an SM) and three 24 KB stages for
// ring_wide (three CTAs an SM): with two CTAs an SM ring_big kept the tensor pipe
// 18% busy (run 19).
int ring_budget_bytes(int slices, int rows) {
  if (rows == 128) return (48 << 10) / slices;
  if (rows == 192) return (72 << 10) / slices;
  return (96 << 10) / slices;
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Raises the kernel's dynamic shared memory limit once per (device, kernel).
void allow_smem(const void* kernel, size_t bytes) {
  if (bytes <= (48u << 10)) return;
  static std::mutex mu;
  static std::set<std::pair<int, const void*>> done;
  int device = 0;
  SD_CUDA_CHECK(cudaGetDevice(&device));
  const std::lock_guard<std::mutex> lock(mu);
  if (done.count({device, kernel}) != 0) return;
  int optin = 0;
  SD_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  SD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin));
  done.insert({device, kernel});
}

template <int MT, int NT, int WT, bool kRing, bool kSwiGLU = false>
void launch(Args a, cudaStream_t stream) {
  using T = Tile<MT, NT, WT>;
  constexpr int kOutRows = kSwiGLU ? T::kWRows / 2 : T::kWRows;
  size_t levels_bytes = 0;
  if (kRing && a.slices > 1 && T::kMaxThreads < 32 * WT * a.slices) {
    // More slice groups than the tile may run at once: one group runs the slices
    // one after the other, the tree's three levels past its ring.
    ops::require(a.K % (a.slices * gemm_detail::kStageK) == 0, "cuda::gemm",
                 "this tile runs K slices in sequence: K must be a multiple of 64 * k_slices");
    a.seq_slices = a.slices;
    a.slices = 1;
    a.slice_len = a.K;
    levels_bytes = size_t{3} * 32 * WT * MT * NT * 4 * sizeof(float);
  }
  if (kRing) {
    a.stages = std::clamp(ring_budget_bytes(a.slices, T::kRows) / T::kStageBytes, 2,
                          gemm_detail::kMaxStages);
    a.group_bytes = a.stages * T::kStageBytes;
  } else {
    a.stages = 0;
    a.group_bytes = a.slices > 1 ? T::kPartialBytes : 0;
  }
  const int64_t row_blocks = ceil_div(a.N, kOutRows);
  ops::require(row_blocks <= 65535, "cuda::gemm",
               "N = " + std::to_string(a.N) + " needs more than 65535 row blocks");
  LaunchShape shape;
  shape.grid =
      dim3(static_cast<unsigned>(ceil_div(a.M, T::kXRows)), static_cast<unsigned>(row_blocks));
  shape.block = dim3(static_cast<unsigned>(32 * WT * a.slices));
  shape.smem = static_cast<size_t>(a.slices) * a.group_bytes + levels_bytes;
  shape.stream = stream;
  if constexpr (kRing) {
    const auto kernel = gemm_detail::gemm_ring_kernel<MT, NT, WT, kSwiGLU>;
    allow_smem(reinterpret_cast<const void*>(kernel), shape.smem);
    launch_kernel("gemm_ring_kernel", kernel, shape, a);
  } else {
    allow_smem(reinterpret_cast<const void*>(&gemm_detail::gemm_general_kernel<NT>), shape.smem);
    launch_kernel("gemm_general_kernel", gemm_detail::gemm_general_kernel<NT>, shape, a);
  }
}

// The most dynamic shared memory a CTA may opt in to (227 KB on the H100 and H200).
int smem_optin() {
  int device = 0, optin = 0;
  SD_CUDA_CHECK(cudaGetDevice(&device));
  SD_CUDA_CHECK(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  return optin;
}

int sm_count() {
  int device = 0, sms = 0;
  SD_CUDA_CHECK(cudaGetDevice(&device));
  SD_CUDA_CHECK(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device));
  return std::max(sms, 1);
}

// The share of the SM slots of its waves that a grid of `ctas` CTAs, one an SM, fills.
double wave_fill(int64_t ctas) {
  const int64_t sms = sm_count();
  return static_cast<double>(ctas) / static_cast<double>(ceil_div(ctas, sms) * sms);
}

// The bulk kernel: the ring sized so that every CTA of the grid can be resident
// at once (up to 4 a SM): the widest stage (512, 256, 128 or 64 k) that leaves at
// least 2 stages in the share of shared memory a CTA gets, up to kBulkMaxStages
// (GemmBulkTuning overrides the stage, the fewest stages and the producer lanes).
template <int MT, int NT, int WG, int LEVELS, bool kSwiGLU = false>
void launch_bulk(Args a, cudaStream_t stream, const GemmBulkTuning& tuning = {}) {
  using B = gemm_detail::Bulk<MT, NT, WG, LEVELS>;
  ops::require(a.slices <= B::kMaxSlices, "cuda::gemm", "too many K slices for this variant");
  constexpr int kOutRows = kSwiGLU ? B::kWRows / 2 : B::kWRows;
  const int64_t row_blocks = ceil_div(a.N, kOutRows);
  ops::require(row_blocks <= 65535, "cuda::gemm",
               "N = " + std::to_string(a.N) + " needs more than 65535 row blocks");
  const int64_t token_blocks = ceil_div(a.M, B::kTokens);
  const int64_t ctas = row_blocks * token_blocks;
  const int sms = sm_count();
  // A stage costs its barriers more than its bytes (the SwiGLU tile went from 185
  // to 105 us at M 7 with 256-k stages instead of 128): the widest stage that
  // leaves 2 in flight.
  constexpr int kMaxPerSm = 4;
  const int min_stages = tuning.min_stages;
  const int per_sm = static_cast<int>(std::clamp<int64_t>(ceil_div(ctas, sms), 1, kMaxPerSm));
  const int budget = (227 << 10) / per_sm - gemm_detail::kBulkHeader - (1 << 10);
  for (int stage_k : {512, 256, 128, 64}) {
    if (tuning.stage_k != 0 && stage_k != tuning.stage_k) continue;
    a.stage_k = stage_k;
    a.pitch = 2 * stage_k + 16;
    a.stage_bytes = B::kRows * a.pitch;
    a.stages = std::min(gemm_detail::kBulkMaxStages, budget / a.stage_bytes);
    if (a.stages >= min_stages) break;
  }
  ops::require(tuning.stage_k == 0 || a.stages >= min_stages, "cuda::gemm",
               "bulk stage_k " + std::to_string(tuning.stage_k) + " leaves " +
                   std::to_string(a.stages) + " stages, fewer than min_stages " +
                   std::to_string(min_stages));
  a.stages = std::max(a.stages, 2);
  a.slice_chunks = (a.slice_len + a.stage_k - 1) / a.stage_k;
  LaunchShape shape;
  shape.grid = dim3(static_cast<unsigned>(token_blocks), static_cast<unsigned>(row_blocks));
  shape.block = dim3(static_cast<unsigned>(B::kThreads));
  shape.smem =
      static_cast<size_t>(gemm_detail::kBulkHeader) + static_cast<size_t>(a.stages) * a.stage_bytes;
  shape.stream = stream;
  const auto kernel = gemm_detail::gemm_bulk_kernel<MT, NT, WG, LEVELS, kSwiGLU>;
  allow_smem(reinterpret_cast<const void*>(kernel), shape.smem);
  launch_kernel("gemm_bulk_kernel", kernel, shape, a);
}

// cuTensorMapEncodeTiled from the driver (through the runtime: nothing links libcuda).
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    SD_CUDA_CHECK(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000,
                                                   cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || p == nullptr)
      throw DeviceError(
          "cuda::gemm: the driver has no cuTensorMapEncodeTiled (the wg variants need it)");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(p);
  }();
  return fn;
}

// The TMA view of a bf16 matrix [rows, cols] with a row pitch of `pitch` elements,
// in boxes of 64 columns x box_rows rows, 128-byte swizzle, zeros outside.
CUtensorMap tensor_map(const bf16* base, int64_t rows, int64_t cols, int64_t pitch, int box_rows) {
  CUtensorMap m;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(pitch) * sizeof(bf16)};
  const cuuint32_t box[2] = {static_cast<cuuint32_t>(gemm_detail::kStageK),
                             static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t elem[2] = {1, 1};
  const CUresult r = tensor_map_encoder()(
      &m, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<bf16*>(base), dims, strides, box, elem,
      CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw DeviceError("cuda::gemm: cuTensorMapEncodeTiled failed (CUresult " + std::to_string(r) +
                      ") for a [" + std::to_string(rows) + ", " + std::to_string(cols) +
                      "] matrix of pitch " + std::to_string(pitch));
  return m;
}

// The wg kernel (wg_tile.cuh): the ring as deep as the tile's share of shared
// memory allows (3 to 8 stages; all a CTA may opt in to (227 KB) for the wide tiles (160 to 256
// tokens) and the slice groups, one CTA an SM: 2026-12-06d run 5 found their consumers waiting
// for a stage's bytes; for the others about 110 KB, two an SM, or 72 KB, three, on a grid of
// more than two CTAs an SM).
template <int WGS, int TOK, bool kSwiGLU = false, bool kGroups = false, int kCtas = 1>
void launch_wg(Args a, cudaStream_t stream) {
  // kGroups: WGS slice groups, each a one-warpgroup ring (wg_tile.cuh); kCtas: the
  // cluster's CTAs over which the K slices split.
  using T = gemm_detail::WgTile<kGroups ? 1 : WGS, TOK>;
  constexpr int kOutRows = kSwiGLU || kGroups ? 64 : T::kWRows;
  constexpr int kRings = kGroups ? WGS : 1;
  ops::require(a.K % (a.slices * gemm_detail::kStageK) == 0, "cuda::gemm",
               "the wg variants run whole 64-k stages (and K slices): K must be a multiple of "
               "64 * k_slices");
  a.seq_slices = 0;
  if constexpr (kGroups) {
    ops::require(a.slices % (WGS * kCtas) == 0 && a.slices / (WGS * kCtas) <= 2, "cuda::gemm",
                 "wg_k: the K slices must split into " + std::to_string(WGS * kCtas) +
                     " groups of at most 2");
    a.seq_slices = a.slices;
  } else if constexpr (kCtas > 1) {
    ops::require(a.slices == kCtas, "cuda::gemm",
                 "this wg tile runs one K slice a CTA: k_slices must be " + std::to_string(kCtas));
    a.seq_slices = a.slices;
  } else {
    ops::require(a.slices == 1, "cuda::gemm", "this wg tile runs one chain over K (no K slices)");
  }
  a.slices = 1;
  a.slice_len = a.K;
  const int64_t row_blocks = ceil_div(a.N, kOutRows);
  const int64_t token_blocks = ceil_div(a.M, T::kTokens);
  const int64_t ctas = token_blocks * row_blocks;
  // The smaller tiles take about 110 KB (two CTAs an SM), or 72 KB (three) when the
  // grid is more than two CTAs an SM: 2026-12-04e run 7, gate_up at 7 tokens on wg_n64
  // (384 CTAs) 69.2 -> 60.9 us, lm_head 306 -> 300; with fewer CTAs the shallower ring
  // loses (qkv at 56 tokens, 96 CTAs: 29.2 -> 34.2 us).
  const int small = ctas > 2 * int64_t{sm_count()} ? (72 << 10) : (110 << 10);
  const int budget = (T::kTokens > 128 || kGroups ? smem_optin() : small) - gemm_detail::kWgHeader;
  a.stages = std::clamp(budget / (kRings * T::kStageBytes), 3, gemm_detail::kWgMaxStages);
  ops::require(row_blocks <= 65535, "cuda::gemm",
               "N = " + std::to_string(a.N) + " needs more than 65535 row blocks");
  const CUtensorMap tw = tensor_map(a.w, kSwiGLU ? 2 * int64_t{a.N} : a.N, a.K, a.K, kOutRows);
  const int box_tokens = static_cast<int>(std::min<int64_t>(T::kTokens, (a.M + 7) / 8 * 8));
  a.stage_bytes = (T::kWRows + box_tokens) * gemm_detail::kRowBytes;  // what a stage receives
  const CUtensorMap tx = tensor_map(a.x, a.M, a.K, a.x_stride, box_tokens);
  LaunchShape shape;
  shape.grid = dim3(static_cast<unsigned>(token_blocks), static_cast<unsigned>(row_blocks),
                    static_cast<unsigned>(kCtas));
  shape.cluster = dim3(1, 1, static_cast<unsigned>(kCtas));
  shape.block = dim3(static_cast<unsigned>(gemm_detail::wg_threads(WGS)));
  shape.smem = gemm_detail::kWgHeader + static_cast<size_t>(kRings * a.stages) * T::kStageBytes;
  shape.stream = stream;
  const auto kernel = gemm_detail::gemm_wg_kernel<WGS, TOK, kSwiGLU, kGroups, kCtas>;
  allow_smem(reinterpret_cast<const void*>(kernel), shape.smem);
  launch_kernel("gemm_wg_kernel", kernel, shape, tw, tx, a);
}

// The wide tile (WGS warpgroups of 64 weight rows) as narrow as the tokens allow up to
// 256 (round_up(M, 32) from 160): the tensor cores compute no token column past them
// (2026-12-05f run 6, H200, 224 tokens: lm_head + gate_up 941 -> 872 us qwen3-8b, with
// muse's qkv 3121 -> 2875; the step at 32 requests -1.8% / -2.8%).
template <int WGS>
void launch_wide(const Args& a, cudaStream_t stream) {
  if (a.M <= 160)
    launch_wg<WGS, 160, false, false>(a, stream);
  else if (a.M <= 192)
    launch_wg<WGS, 192, false, false>(a, stream);
  else if (a.M <= 224)
    launch_wg<WGS, 224, false, false>(a, stream);
  else
    launch_wg<WGS, 256, false, false>(a, stream);
}

// wg_n256 past 64 tokens takes one warpgroup's rows a CTA where that grid fills its waves
// by more than this over the two-warpgroup grid (launch_wg_variant). Measured (the step's
// timeline at 224 tokens, one warpgroup against two; 2026-12-06c run 1 on the H200, run 2
// on an H100): muse's qkv (N 18432: fills 0.73 against 0.55) 167.2 -> 151.9 us (H200),
// 184.3 -> 172.0 (H100); qwen3-8b's gate_up (N 24576: 0.97 against 0.73) 89.4 -> 85.2
// (H200) but 99.0 -> 102.5 (H100); muse's gate_up (N 32768: 0.97 both) 178.3 -> 213.6
// (H200), and the step with lm_head on one warpgroup too (0.999 both) +1.6% (qwen3-8b) and
// +3.2% (muse) at 32 requests (H200).
constexpr double kWaveGain = 0.1;

// The wg tiles: 64 or 128 tokens a CTA, or the wide tile's 160 to 256; K slices (any wg
// variant) in slice groups of at most two slices, on one CTA or on the two CTAs of a
// cluster (below).
void launch_wg_variant(GemmVariant v, const Args& a, cudaStream_t stream) {
  // Eight K slices where twice the row blocks x token tiles fit one wave of SMs (N 4096
  // up to 64 tokens: 64 CTAs): the slices' two halves on the two CTAs of a cluster, so
  // that every row block streams its weights through two SMs. Measured (2026-12-05f run
  // 1, H100, the step's timeline): qwen3-8b at 8 requests, o_proj and down 364 -> 301 us
  // (the step -2.6%); where the clusters exceed one wave they lose (muse, N 8192: 128 row
  // blocks, 256 CTAs, 749 -> 805 us).
  const int64_t ctas = ceil_div(a.N, 64) * ceil_div(a.M, 64);
  if (a.slices == 8 && 2 * ctas <= sm_count()) return launch_wg<4, 64, false, true, 2>(a, stream);
  // Past 64 tokens: the wide tile (two warpgroups' 128 rows against up to 256 tokens), one K
  // slice a CTA of a cluster of eight, so the weights are read once for all the tokens and
  // the tokens once a 128-row block. Measured (2026-12-06e runs 1 and 4, H100, the step's
  // timeline at 32 requests), against 128-token tiles of two slice groups on a cluster's two
  // CTAs: o_proj and down 590 -> 563 us qwen3-8b, 1629 -> 1249 muse; the step -0.6 / -1.5%
  // and -4.6 / -4.1%. An H100 holds 15 clusters of eight at once (ncu, run 2), so qwen3-8b's
  // 256 CTAs run in three waves; one warpgroup's 64 rows a CTA (512 CTAs) was slower with
  // one CTA an SM (run 1) and with two (run 3), and the fold with all its loads in flight
  // slower than two outputs at a time (runs 3-4).
  // Up to 192 tokens three warpgroups' 192 rows a CTA (their 80 or 96 accumulators a thread fit
  // the 128 registers of a 416-thread CTA; 224's 112 do not, and a wgmma cannot use registers
  // that setmaxnreg adds, gpu-log 2026-12-06e): a third fewer CTAs, so qwen3-8b's N 4096 runs
  // 176 CTAs in two waves of 15 clusters instead of 256 in three: o_proj + down a step at 16
  // and 24 requests 483 -> 455 and 522 -> 484 us on an H100 (gpu-log 2026-12-06f run 1).
  if (a.slices == 8 && a.M > 64) {
    if (a.M <= 160) return launch_wg<3, 160, false, false, 8>(a, stream);
    if (a.M <= 192) return launch_wg<3, 192, false, false, 8>(a, stream);
    if (a.M <= 224) return launch_wg<2, 224, false, false, 8>(a, stream);
    return launch_wg<2, 256, false, false, 8>(a, stream);
  }
  if (a.slices >= 4) return launch_wg<4, 64, false, true>(a, stream);
  if (a.slices == 2) return launch_wg<2, 64, false, true>(a, stream);
  switch (v) {
    case GemmVariant::wg_n64:
    case GemmVariant::wg_k:
      // From 65 to 256 tokens (a draft step's query block) one warpgroup's 64 weight rows
      // against all the tokens, the wide tile's m64nTOKk16 (2026-12-06b run 2, H100, the
      // step's timeline at 224 tokens: qkv 45.4 -> 30.0 us a call on qwen3-8b, where
      // 2026-12-05f run 1's 256-token form with L2 flushed had lost); past 256 (the context
      // fill) 64 x 64 tiles as measured before.
      if (a.M > 64 && a.M <= 256)
        launch_wide<1>(a, stream);
      else
        launch_wg<1, 64>(a, stream);
      break;
    case GemmVariant::wg_n128: launch_wg<2, 128>(a, stream); break;
    default:
      // wg_n256 (N >= 8192 past 64 tokens): two warpgroups' 128 rows a CTA, which read the
      // tokens once for twice the rows, unless one warpgroup's 64 (twice the CTAs, one an
      // SM either way) fills its last wave of SMs clearly better (kWaveGain).
      if (a.M <= 256 && wave_fill(ceil_div(a.N, 64)) > wave_fill(ceil_div(a.N, 128)) + kWaveGain)
        launch_wide<1>(a, stream);
      else
        launch_wide<2>(a, stream);
      break;
  }
}

// The kernels' arguments for one call (the launchers fill in the ring sizing).
// y is bf16, or fp32 (y32) for the unrounded sums.
Args make_args(const ops::GemmParams& p) {
  Args a{};
  a.x = p.x;
  a.x_stride = p.x_stride;
  a.w = p.w;
  a.M = p.M;
  a.N = p.N;
  a.K = p.K;
  a.y = p.y_dtype == StreamDType::bf16 ? p.y_bf16() : nullptr;
  a.y32 = p.y_dtype == StreamDType::f32 ? p.y_f32() : nullptr;
  a.y_stride = p.y_stride;
  a.slices = p.k_slices;
  a.slice_len = p.K / p.k_slices;
  a.early_weights = PdlScope::active();
  return a;
}

// The argument rules of every entry point: ops::GemmParams's, and packed weights.
void check_params(const ops::GemmParams& p, const char* op) {
  p.check(op);
  ops::require(p.w_row_stride() == p.K, op, "the GPU takes packed weights (w_stride 0 or K)");
}

// Whether a big tile that runs `parallel` slice groups at most can take k_slices:
// in parallel groups, or one after the other in one group (whole 64-k stages a
// slice; else the caller falls back to ring_n64).
bool big_tile_takes(int K, int k_slices, int parallel) {
  return k_slices <= parallel || K % (k_slices * gemm_detail::kStageK) == 0;
}

}  // namespace

bool gemm_ring_ok(const bf16* x, int64_t x_stride, const bf16* w, int K) {
  return K % 8 == 0 && x_stride % 8 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
         reinterpret_cast<uintptr_t>(w) % 16 == 0;
}

// Measured on the H200 (GemmSpeed.EveryVariant, docs/history/runs/2026-12-01e): at M <= 8
// the bulk kernel streams one weight slice per warp fastest with one K slice, the
// ring with K slices (the slices in parallel warps); past 8 tokens the ring's
// tiles: ring_big (64 x 64 a CTA, three CTAs an SM) at 33-64 tokens when N is
// large enough to fill the GPU with its 64-row blocks (gate_up 97 vs 160 us,
// lm_head 532 vs 943 us at M 56), ring_wide (64 x 128, four warps) past 64 tokens
// (gate_up 262 vs 358 us, lm_head 1544 vs 2011 us at M 224), o_proj and down
// included, their 8 slices then run in sequence in one group (82 vs 117 us and 223
// vs 268 us at M 224; in sequence they lose at 56 tokens: 81 vs 37 us). The general kernel
// takes what the ring cannot (K % 8 != 0, odd strides, misaligned pointers).
// Where wgmma runs (sm_90a, K % (64 k_slices) == 0) the wg tiles win; with their
// producer warp and one wgmma group in flight (2026-12-04e run 3, same test): up to 64
// tokens wg_n64 for N >= 16384 (M 7: lm_head 309 vs 336 wg_n128 and 388 bulk_n8,
// gate_up 70 vs 73 and 77; M 56: 322 vs 336, 69 vs 75), else bulk_n8 up to 8 tokens
// (qkv 28 vs 28, fc 70 vs 89) and wg_n64 from 9 (qkv 28 vs 50 wg_n128, fc 89 vs 189);
// past 64 tokens wg_n256 from N 8192 (M 224: lm_head 486 vs 624 wg_n128, gate_up 108
// vs 114, context_kv 52 vs 70), else wg_n64 (qkv 48 vs 53, fc 120 vs 194, then on 64 x 64
// tiles; up to 256 tokens wg_n64 now runs one warpgroup against all the tokens,
// launch_wg_variant). With K
// slices (o_proj, down) ring_n8 up to 8 tokens (2026-12-01g run 7, M 7: 17 vs 23 and
// 40 vs 54 us for wg_k), then wg_k (M 56 24 vs 37 ring_n64 and 55 vs 81; M 224 43 vs
// 51 wg_n64 and 106 vs 133).
GemmVariant gemm_pick(const ops::GemmParams& p) {
  const int M = p.M, N = p.N, K = p.K, k_slices = p.k_slices;
  if (!gemm_ring_ok(p.x, p.x_stride, p.w, K)) return GemmVariant::general;
  const bool wg = K % (k_slices * gemm_detail::kStageK) == 0 && wgmma_self_test().usable;
  if (wg && k_slices == 1 && M <= 64 && N >= 16384) return GemmVariant::wg_n64;
  if (M <= 8) return k_slices == 1 ? GemmVariant::bulk_n8 : GemmVariant::ring_n8;
  if (wg) {
    if (k_slices > 1) return GemmVariant::wg_k;
    if (M <= 64) return GemmVariant::wg_n64;
    return N >= 8192 ? GemmVariant::wg_n256 : GemmVariant::wg_n64;
  }
  if (M <= 16) return GemmVariant::ring_n16;
  if (M <= 32) return GemmVariant::ring_n32;
  if (M <= 64) return k_slices <= 4 && N >= 8192 ? GemmVariant::ring_big : GemmVariant::ring_n64;
  if (big_tile_takes(K, k_slices, 2)) return GemmVariant::ring_wide;
  return k_slices <= 4 ? GemmVariant::ring_big : GemmVariant::ring_n64;
}

namespace {

// One call of either output type (y bf16, or y32 fp32 when a.y32 is set).
void run_gemm(GemmVariant variant, const ops::GemmParams& p, cudaStream_t stream) {
  mma_self_test();  // once per device: refuses a device the CPU twin does not reproduce
  const Args a = make_args(p);
  const int K = a.K, k_slices = a.slices;
  if (variant == GemmVariant::automatic) variant = gemm_pick(p);
  ops::require(
      variant == GemmVariant::general || gemm_ring_ok(a.x, a.x_stride, a.w, K), "cuda::gemm",
      "the ring and bulk variants need K % 8 == 0, x_stride % 8 == 0 and 16-byte aligned x and w");
  switch (variant) {
    case GemmVariant::ring_n8: launch<1, 1, 1, true>(a, stream); break;
    case GemmVariant::ring_n16: launch<1, 2, 1, true>(a, stream); break;
    case GemmVariant::ring_n32: launch<2, 2, 2, true>(a, stream); break;
    case GemmVariant::ring_n64: launch<2, 2, 4, true>(a, stream); break;
    case GemmVariant::ring_big:  // up to 4 slices in parallel groups; 8 in sequence
                                 // where K % (64 * 8) == 0, else as ring_n64
      if (big_tile_takes(K, k_slices, 4))
        launch<4, 4, 2, true>(a, stream);
      else
        launch<2, 2, 4, true>(a, stream);
      break;
    case GemmVariant::ring_wide:  // up to 2 slices in parallel groups, more in sequence
      if (big_tile_takes(K, k_slices, 2))
        launch<4, 4, 4, true>(a, stream);
      else
        launch<2, 2, 4, true>(a, stream);
      break;
    case GemmVariant::bulk_n8: launch_bulk<1, 1, 1, 3>(a, stream); break;
    case GemmVariant::wg_n64:
    case GemmVariant::wg_n128:
    case GemmVariant::wg_n256:
    case GemmVariant::wg_k: {
      const WgmmaStatus& wg = wgmma_self_test();
      if (!wg.usable)
        throw DeviceError("cuda::gemm: the " + std::string(gemm_variant_name(variant)) +
                          " variant cannot run here: " + wg.why);
      launch_wg_variant(variant, a, stream);
      break;
    }
    default: launch<1, 4, 1, false>(a, stream); break;
  }
}

}  // namespace

void gemm_with(GemmVariant variant, const ops::GemmParams& p, cudaStream_t stream) {
  check_params(p, "cuda::gemm");
  if (p.M == 0 || p.N == 0) return;
  run_gemm(variant, p, stream);
}

void gemm_bulk_tuned(const GemmBulkTuning& tuning, const ops::GemmParams& p, cudaStream_t stream) {
  check_params(p, "cuda::gemm_bulk_tuned");
  ops::require(p.y_dtype == StreamDType::bf16, "cuda::gemm_bulk_tuned", "needs a bf16 output");
  ops::require(gemm_ring_ok(p.x, p.x_stride, p.w, p.K), "cuda::gemm_bulk_tuned",
               "needs K % 8 == 0, x_stride % 8 == 0 and 16-byte aligned x and w");
  ops::require(tuning.stage_k == 0 || tuning.stage_k == 64 || tuning.stage_k == 128 ||
                   tuning.stage_k == 256 || tuning.stage_k == 512,
               "cuda::gemm_bulk_tuned", "stage_k must be 0, 64, 128, 256 or 512");
  ops::require(tuning.min_stages >= 2 && tuning.min_stages <= gemm_detail::kBulkMaxStages,
               "cuda::gemm_bulk_tuned",
               "min_stages must be in [2, " + std::to_string(gemm_detail::kBulkMaxStages) + "]");
  if (p.M == 0 || p.N == 0) return;
  mma_self_test();
  launch_bulk<1, 1, 1, 3>(make_args(p), stream, tuning);
}

void gemm_swiglu(const ops::GateUpParams& p, cudaStream_t stream) {
  p.check("cuda::gemm_swiglu");
  ops::require(gemm_ring_ok(p.x, p.x_stride, p.w, p.K), "cuda::gemm_swiglu",
               "needs K % 8 == 0, x_stride % 8 == 0 and 16-byte aligned x and w");
  const int M = p.rows;
  if (M == 0 || p.inter == 0) return;
  mma_self_test();
  // The kernels' arguments: N = inter outputs, each from a gate row and its up row.
  const Args a = make_args(ops::gemm_of(p.x, p.x_stride, p.w, M, p.inter, p.K, p.y, p.y_stride));
  // The tile gemm_pick gives the gate_up product (N = 2 * inter), with its weight
  // rows paired: the bulk kernel up to 8 tokens, then the wg tiles where wgmma
  // runs, else the ring tiles (ring_n32's from 9 to 32 tokens: ring_n16 has one m16
  // tile a warp, nothing to pair).
  if (M <= 8) {
    launch_bulk<1, 1, 2, 0, true>(a, stream);
    return;
  }
  const GemmVariant v = gemm_pick(p.gate_up());
  if (v == GemmVariant::wg_n64 || v == GemmVariant::wg_n128 || v == GemmVariant::wg_n256) {
    // The wg tiles: 64 tokens up to 64 (75 us at M 56), then 128 (the 256-token
    // tile took 308 us where gate_up + silu_mul took 153 at M 224: 2026-12-01g run 4).
    if (M <= 64)
      launch_wg<2, 64, true>(a, stream);
    else
      launch_wg<2, 128, true>(a, stream);
    return;
  }
  switch (v) {
    case GemmVariant::ring_n64: launch<2, 2, 4, true, true>(a, stream); break;
    case GemmVariant::ring_big: launch<4, 4, 2, true, true>(a, stream); break;
    case GemmVariant::ring_wide: launch<4, 4, 4, true, true>(a, stream); break;
    default: launch<2, 2, 2, true, true>(a, stream); break;
  }
}

void gemm(const ops::GemmParams& p, cudaStream_t stream) {
  gemm_with(GemmVariant::automatic, p, stream);
}

const char* gemm_variant_name(GemmVariant v) {
  switch (v) {
    case GemmVariant::automatic: return "automatic";
    case GemmVariant::ring_n8: return "ring_n8";
    case GemmVariant::ring_n16: return "ring_n16";
    case GemmVariant::ring_n32: return "ring_n32";
    case GemmVariant::ring_n64: return "ring_n64";
    case GemmVariant::ring_big: return "ring_big";
    case GemmVariant::ring_wide: return "ring_wide";
    case GemmVariant::bulk_n8: return "bulk_n8";
    case GemmVariant::wg_n64: return "wg_n64";
    case GemmVariant::wg_n128: return "wg_n128";
    case GemmVariant::wg_n256: return "wg_n256";
    case GemmVariant::wg_k: return "wg_k";
    case GemmVariant::general: return "general";
  }
  return "?";
}

}  // namespace sparkdraft::cuda
