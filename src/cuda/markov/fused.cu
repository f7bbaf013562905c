// The fused Markov loop (SPEC section 5) and its vocab-parallel form (section 6).
//
// Per step ONE kernel over the vocabulary. Block b walks a contiguous run of
// vocab tiles (tile = 256 / tpv entries, all rank columns of w2), streamed into a
// shared-memory ring with 16-byte cp.async, so w2 is read once per step for all
// rows. Per tile:
//   phase A (bias, on the tensor cores): the tile's entries in 16-entry m-tiles
//     times the rows in 8-row n-tiles; each warp takes (m-tile, n-tile) items and
//     runs the chain of mma.sync.m16n8k16 over the rank (A = 16 w2 rows from the
//     ring by ldmatrix, B = 8 embeddings from shared memory), so every bias is
//     bf16(mma_chain(w2[v], e[r])) (core/mma.h), and stages it as bf16. The ring
//     stores each row's 16-byte chunks XOR-swizzled by the row (conflict-free
//     ldmatrix).
//   phase B (epilogue, every `epilogue_tiles` tiles so that all warps have whole
//     32-entry segments): bf16(base + bias), the transform, the cache store, the
//     noised score and each warp's best per row. The exact noise (two logs) is
//     deferred: an entry's u (Philox) brackets its score, zlo <= z <= zhi, by the
//     noise bounds of u's bucket; the block keeps per row `known`, the largest zlo
//     (or exact z) seen, and an entry whose zhi is below `known` is dropped: an
//     entry with z >= known exists and beats it, so the result is unchanged. The
//     survivors (a few per row and block) wait in a per-warp queue, one entry per
//     lane, and are scored 32 at a time, so a warp runs the logs about once per
//     block instead of once per segment that holds a possible winner.
// At the end each block writes its best per row, fences, and counts itself in with
// an atomicAdd on the row's arrival counter; the block that arrives last reduces
// the row's block bests (in any order: `better` is associative) and writes the
// token and w1[token] as the next step's embedding, or, in a vocab shard, the
// row's packet. Odd steps walk the tiles backwards, so the first tiles a block
// reads are the ones it read last (still in L2).
//
// Launch: the step kernels use programmatic dependent launch. Everything before
// griddepcontrol.wait touches only w2 (static): the ring prologue of step j+1
// overlaps the tail of step j. Blocks trigger their dependents when their vocab
// walk is done.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/common/mma.cuh"
#include "cuda/markov/markov_device.cuh"
#include "cuda/markov/markov_internal.h"
#include "sparkdraft/core/philox.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/markov.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {
namespace markov_detail {
namespace {

struct FusedStepParams {
  const bf16* w2;               // [width, K] this shard's rows
  const bf16* base;             // step j's plane: row r at base + r * base_row_stride
  int64_t base_row_stride;
  const bf16* embeds_in;        // [rows, K] step j's embeddings
  bf16* embeds_out;             // [rows, K] step j+1's (TP 1)
  const bf16* w1;               // [V, K]
  const float* temperatures;
  const int64_t* seeds;
  const int64_t* anchor_positions;
  const int64_t* cache_slots;
  bf16* cache;                  // step j's plane: row index i at cache + i * cache_row_stride
  int64_t cache_row_stride;
  int cache_by_row;             // shard caches are indexed by row, the full cache by slot
  int64_t* tokens;              // TP 1: draft_tokens + j, row stride `steps`
  MarkovPacket* packets;        // vocab shard: [rows]; null at TP 1
  MarkovCandidate* partials;    // [rows][partial_stride]
  int partial_stride;
  uint32_t* arrivals;           // [rows] this step's counters (zeroed by the anchor kernel)
  const float* noise_bound;     // [kNoiseBuckets] noise_bound_table()
  cpu::LogitTransform transform;
  int rows, width, steps, step, id_offset;
  int stages, reverse;
};

// fp32 -> int32 whose signed order is the order of the (non-NaN) floats, and back
// (the map is its own inverse): the block's `known` bounds go through atomicMax.
__device__ __forceinline__ int order_key(float x) {
  const int b = __float_as_int(x);
  return b >= 0 ? b : b ^ 0x7fffffff;
}
__device__ __forceinline__ float key_value(int k) { return __int_as_float(k >= 0 ? k : k ^ 0x7fffffff); }

__device__ __forceinline__ MarkovCandidate load_partial(const MarkovCandidate* p) {
  const int2 raw = __ldcg(reinterpret_cast<const int2*>(p));
  return MarkovCandidate{__int_as_float(raw.x), raw.y};
}

// The best of `grid` block bests (this lane's share; warp_best finishes it), in
// batches of independent loads: one L2 round trip per batch on the serial tail
// of the step, not one per block. Not inlined: its registers stay out of the
// step kernel's main loop.
__device__ __noinline__ MarkovCandidate reduce_partials(const MarkovCandidate* partials, int grid,
                                                        int lane) {
  constexpr int kBatch = 8;
  MarkovCandidate c = no_candidate();
  for (int b0 = lane; b0 < grid; b0 += kWarp * kBatch) {
    MarkovCandidate o[kBatch];
#pragma unroll
    for (int u = 0; u < kBatch; ++u) {
      const int b = b0 + u * kWarp;
      o[u] = b < grid ? load_partial(partials + b) : no_candidate();
    }
#pragma unroll
    for (int u = 0; u < kBatch; ++u)
      if (wins(o[u], c)) c = o[u];
  }
  return c;
}

// Copies w1[id] (rank bf16, rank % 8 == 0) to dst with one warp.
__device__ __forceinline__ void copy_embedding(const bf16* w1, int32_t id, int rank, bf16* dst,
                                               int lane) {
  const uint4* src = reinterpret_cast<const uint4*>(w1 + static_cast<int64_t>(id) * rank);
  uint4* out = reinterpret_cast<uint4*>(dst);
  for (int x = lane; x < rank / 8; x += kWarp) out[x] = src[x];
}

template <int K>
__global__ void __launch_bounds__(kFusedThreads, 2) fused_step_kernel(const FusedStepParams p) {
  constexpr int kTileV = fused_tile_vocab(K);
  constexpr int kChunks = K / 8;
  constexpr int kTileElems = kTileV * K;
  constexpr int kMTiles = kTileV / 16;
  constexpr int kEStride = fused_e_stride(K);
  static_assert(K % 16 == 0 && kTileV % 16 == 0);

  extern __shared__ __align__(16) unsigned char smem[];
  const FusedSmemLayout lay = fused_smem_layout(p.rows, K, p.stages);
  bf16* ring = reinterpret_cast<bf16*>(smem + lay.ring);
  const bf16* e_s = reinterpret_cast<const bf16*>(smem + lay.e);
  bf16* staging = reinterpret_cast<bf16*>(smem + lay.staging);
  MarkovCandidate* best = reinterpret_cast<MarkovCandidate*>(smem + lay.best);
  int64_t* cache_row = reinterpret_cast<int64_t*>(smem + lay.cache_row);
  float* temp = reinterpret_cast<float*>(smem + lay.temp);
  uint32_t* seed = reinterpret_cast<uint32_t*>(smem + lay.seed);
  int* last = reinterpret_cast<int*>(smem + lay.last);
  int* staged_v0 = reinterpret_cast<int*>(smem + lay.staged_v0);
  int* known = reinterpret_cast<int*>(smem + lay.known);
  float* noise_hi = reinterpret_cast<float*>(smem + lay.noise);

  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const int total_tiles = (p.width + kTileV - 1) / kTileV;
  const int t_begin = static_cast<int>(static_cast<int64_t>(blockIdx.x) * total_tiles / gridDim.x);
  const int t_end =
      static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * total_tiles / gridDim.x);
  const int ntiles = t_end - t_begin;
  const int e_tiles = fused_epilogue_tiles(p.rows, K);
  const int width = e_tiles * kTileV;  // staging row length
  const int n_tiles = (p.rows + 7) / 8;

  auto tile_at = [&](int it) { return p.reverse ? t_end - 1 - it : t_begin + it; };
  // Queues tile `it` into its ring stage (chunk c of row v at fused_ring_chunk(v, c));
  // always commits (maybe an empty group) so every thread counts the same groups.
  auto issue = [&](int it) {
    if (it < ntiles) {
      const int t = tile_at(it);
      bf16* dst = ring + (it % p.stages) * kTileElems;
      const bf16* src = p.w2 + static_cast<int64_t>(t) * kTileElems;
      for (int x = tid; x < kTileElems / 8; x += kFusedThreads) {
        const int v = x / kChunks, c = x % kChunks;
        const bool ok = t * kTileV + v < p.width;
        cp_async_16(dst + v * K + fused_ring_chunk<K>(v, c) * 8, ok ? src + x * 8 : p.w2, ok ? 16 : 0);
      }
    }
    cp_async_commit();
  };

  // Prologue: only static data (w2, the noise bounds), so it may overlap the
  // previous kernel.
  for (int s = 0; s < p.stages - 1; ++s) issue(s);
  for (int b = tid; b < kNoiseBuckets; b += kFusedThreads) noise_hi[b] = p.noise_bound[b];
  grid_dependency_wait();

  // This step's rows: embeddings (bf16, rows padded to whole n-tiles with zeros,
  // row stride kEStride), temperatures, step seeds, cache rows.
  for (int x = tid; x < n_tiles * 8 * kChunks; x += kFusedThreads) {
    const int r = x / kChunks, c = x % kChunks;
    const uint4 raw = r < p.rows ? reinterpret_cast<const uint4*>(p.embeds_in)[x] : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(smem + lay.e + (r * kEStride + c * 8) * 2) = raw;
  }
  for (int r = tid; r < p.rows; r += kFusedThreads) {
    temp[r] = p.temperatures[r];
    seed[r] = draft_step_seed(p.seeds[r], p.anchor_positions[r], p.step);
    const int64_t slot = p.cache_slots[r];
    cache_row[r] = slot < 0 ? -1 : (p.cache_by_row ? r : slot);
    known[r] = order_key(__int_as_float(static_cast<int>(0xff800000u)));  // -inf
  }
  for (int x = tid; x < p.rows * kFusedWarps; x += kFusedThreads) best[x] = no_candidate();

  // This warp's queue of survivors (T > 0 entries that may win): one per lane,
  // q_row < 0 = empty. scaled = f32(l) / T as the epilogue computed it.
  int q_row = -1;
  int32_t q_id = 0;
  float q_scaled = 0.0f;
  // Scores the queued entries exactly (score(): scaled + draft_noise) and folds
  // them into the warp's best of their rows, one row at a time. Warp-uniform.
  auto flush_queue = [&]() {
    MarkovCandidate c = no_candidate();
    if (q_row >= 0) c = MarkovCandidate{__fadd_rn(q_scaled, draft_noise(seed[q_row], q_id)), q_id};
    for (unsigned left = __ballot_sync(0xffffffffu, q_row >= 0); left != 0u;
         left = __ballot_sync(0xffffffffu, q_row >= 0)) {
      const int r0 = __shfl_sync(0xffffffffu, q_row, __ffs(left) - 1);
      const MarkovCandidate o = warp_best(q_row == r0 ? c : no_candidate());
      if (lane == 0) {
        if (wins(o, best[r0 * kFusedWarps + warp])) best[r0 * kFusedWarps + warp] = o;
        if (o.value == o.value) atomicMax(known + r0, order_key(o.value));
      }
      if (q_row == r0) q_row = -1;
    }
    __syncwarp();
  };

  for (int it = 0; it < ntiles; ++it) {
    cp_async_wait(p.stages - 2);  // this thread's copies of tile `it` landed
    __syncthreads();              // everyone's; and stage (it - 1) is free again
    issue(it + p.stages - 1);
    const int slot = it % e_tiles;
    if (tid == 0) staged_v0[slot] = tile_at(it) * kTileV;

    // ---- phase A: the bias of this tile's entries for every row, as MMA chains ----
    {
      const bf16* stage = ring + (it % p.stages) * kTileElems;
      const int g = lane / 4, t4 = lane % 4;
      const int lm_row = (lane / 8 % 2) * 8 + lane % 8, lm_chunk = lane / 16;  // ldmatrix roles
      for (int item = warp; item < kMTiles * n_tiles; item += kFusedWarps) {
        const int mt = item % kMTiles, nt = item / kMTiles;
        const int v = mt * 16 + lm_row;
        const bf16* a_row = stage + v * K;
        const bf16* b_row = e_s + (nt * 8 + g) * kEStride + 2 * t4;
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 4
        for (int ks = 0; ks < K / 16; ++ks) {
          uint32_t a[4];
          ldmatrix_x4(a, a_row + fused_ring_chunk<K>(v, 2 * ks + lm_chunk) * 8);
          const uint32_t b[2] = {*reinterpret_cast<const uint32_t*>(b_row + ks * 16),
                                 *reinterpret_cast<const uint32_t*>(b_row + ks * 16 + 8)};
          mma_bf16_16816(acc, a, b, acc);
        }
        const int r0 = nt * 8 + 2 * t4, x0 = slot * kTileV + mt * 16 + g;
        if (r0 < p.rows) {
          staging[r0 * width + x0] = to_bf16(acc[0]);
          staging[r0 * width + x0 + 8] = to_bf16(acc[2]);
        }
        if (r0 + 1 < p.rows) {
          staging[(r0 + 1) * width + x0] = to_bf16(acc[1]);
          staging[(r0 + 1) * width + x0 + 8] = to_bf16(acc[3]);
        }
      }
    }
    if (slot != e_tiles - 1 && it != ntiles - 1) continue;

    // ---- phase B: epilogue over the staged tiles, one 32-entry segment per warp ----
    __syncthreads();
    const int staged = (slot + 1) * kTileV;
    const int per_row = (staged + kWarp - 1) / kWarp;
    for (int sg = warp; sg < p.rows * per_row; sg += kFusedWarps) {
      const int r = sg / per_row;
      const int x = (sg % per_row) * kWarp + lane;
      const float t = temp[r];
      const bool noised = t > 0.0f;  // the row's rule: noised_score adds noise iff T > 0
      MarkovCandidate cand = no_candidate();
      bool survives = false;
      float scaled = 0.0f, zhi = 0.0f, zlo = __int_as_float(static_cast<int>(0xff800000u));
      int32_t id = 0;
      if (x < staged) {
        const int v = staged_v0[x / kTileV] + x % kTileV;
        if (v < p.width) {
          const bf16 l = step_logit(p.base[r * p.base_row_stride + v], staging[r * width + x],
                                    p.transform);
          if (cache_row[r] >= 0) p.cache[cache_row[r] * p.cache_row_stride + v] = l;
          id = v + p.id_offset;
          if (noised) {
            // The global bound first (no Philox), then the bounds of u's bucket.
            scaled = __fdiv_rn(to_f32(l), t);
            const float k0 = key_value(*reinterpret_cast<volatile int*>(known + r));
            if (!(__fadd_rn(scaled, kNoiseBound) < k0)) {
              const float u = philox_uniform(seed[r], id);
              const int b = noise_bucket(u);
              zhi = __fadd_rn(scaled, noise_hi[b]);
              zlo = __fadd_rn(scaled, b + 1 < kNoiseBuckets ? noise_hi[b + 1] : kNoiseFloor);
              survives = true;
            }
          } else {
            cand = score(l, t, seed[r], id);  // T <= 0: the logit itself, no noise
          }
        }
      }
      if (noised) {
        // zlo <= z of a real entry of this segment (fmaxf drops NaN, which bound nothing).
        float m = zlo;
#pragma unroll
        for (int off = kWarp / 2; off > 0; off /= 2)
          m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
        const float k = fmaxf(key_value(*reinterpret_cast<volatile int*>(known + r)), m);
        if (lane == 0 && m == m) atomicMax(known + r, order_key(m));
        // A NaN zhi (NaN logit) never compares below: NaN entries always survive.
        survives = survives && !(zhi < k);
        const unsigned in = __ballot_sync(0xffffffffu, survives);
        if (in != 0u) {
          if (__popc(in) + __popc(__ballot_sync(0xffffffffu, q_row >= 0)) > kWarp)
            flush_queue();
          // Each survivor (lowest lane first) moves to the lowest free lane.
          unsigned free_lanes = __ballot_sync(0xffffffffu, q_row < 0);
          for (unsigned rest = in; rest != 0u; rest &= rest - 1u, free_lanes &= free_lanes - 1u) {
            const int src = __ffs(rest) - 1;
            const float s_scaled = __shfl_sync(0xffffffffu, scaled, src);
            const int32_t s_id = __shfl_sync(0xffffffffu, id, src);
            if (lane == __ffs(free_lanes) - 1) {
              q_row = r;
              q_scaled = s_scaled;
              q_id = s_id;
            }
          }
        }
      } else {
        cand = warp_best(cand);
        if (lane == 0 && wins(cand, best[r * kFusedWarps + warp]))
          best[r * kFusedWarps + warp] = cand;
        __syncwarp();
      }
    }
    // The next iteration's __syncthreads orders these staging reads before new writes.
  }
  flush_queue();

  launch_dependents();  // the vocab walk is done: the next step may start its prologue
  __syncthreads();

  // Block best per row, then the arrival count.
  for (int r = tid; r < p.rows; r += kFusedThreads) {
    MarkovCandidate c = best[r * kFusedWarps];
    for (int w8 = 1; w8 < kFusedWarps; ++w8)
      if (wins(best[r * kFusedWarps + w8], c)) c = best[r * kFusedWarps + w8];
    p.partials[static_cast<int64_t>(r) * p.partial_stride + blockIdx.x] = c;
    __threadfence();
    const uint32_t arrived = atomicAdd(&p.arrivals[r], 1u);
    last[r] = arrived == gridDim.x - 1;
  }
  __syncthreads();

  // Rows this block arrived last at: reduce the block bests, emit.
  for (int r = warp; r < p.rows; r += kFusedWarps) {
    if (!last[r]) continue;
    __threadfence();
    MarkovCandidate c = reduce_partials(p.partials + static_cast<int64_t>(r) * p.partial_stride,
                                        static_cast<int>(gridDim.x), lane);
    c = warp_best(c);
    if (p.packets != nullptr) {
      if (lane == 0) p.packets[r] = MarkovPacket{c.value, c.id, c.value != c.value ? 1 : 0};
    } else {
      if (lane == 0) p.tokens[static_cast<int64_t>(r) * p.steps] = c.id;
      copy_embedding(p.w1, c.id, K, p.embeds_out + static_cast<int64_t>(r) * K, lane);
    }
  }
}

// Step 0's embeddings w1[anchor] and zeroed arrival counters.
__global__ void anchor_kernel(const int64_t* anchors, const bf16* w1, int rank, bf16* embeds,
                              uint32_t* arrivals, int arrivals_len) {
  const int r = blockIdx.x;
  const uint4* src = reinterpret_cast<const uint4*>(w1 + anchors[r] * rank);
  uint4* dst = reinterpret_cast<uint4*>(embeds + static_cast<int64_t>(r) * rank);
  for (int x = threadIdx.x; x < rank / 8; x += blockDim.x) dst[x] = src[x];
  for (int x = r * blockDim.x + threadIdx.x; x < arrivals_len; x += gridDim.x * blockDim.x)
    arrivals[x] = 0;
}

// Vocab-parallel: the shards' packets [shards][rows] folded in shard order.
__global__ void pick_kernel(const MarkovPacket* packets, int shards, int rows, const bf16* w1,
                            int rank, int64_t* tokens, int steps, bf16* embeds_out) {
  const int r = blockIdx.x;
  // Lane s takes shard s's packet (and s + 32, ...); the warp reduction applies
  // the rule (associative, so this is the shard-order fold).
  MarkovCandidate c = no_candidate();
  for (int s = threadIdx.x; s < shards; s += kWarp) {
    const MarkovPacket* pk = packets + static_cast<int64_t>(s) * rows + r;
    const MarkovCandidate o{pk->nan ? __int_as_float(0x7fffffff) : pk->value, pk->id};
    if (wins(o, c)) c = o;
  }
  c = warp_best(c);
  if (threadIdx.x == 0) tokens[static_cast<int64_t>(r) * steps] = c.id;
  copy_embedding(w1, c.id, rank, embeds_out + static_cast<int64_t>(r) * rank, threadIdx.x);
}

// Vocab-parallel: gathered [shards][rows][steps][width] -> cache[slot][step][shard * width + v].
template <int kVec>
__global__ void cache_fill_kernel(const bf16* gathered, const int64_t* cache_slots, int rows,
                                  int steps, int width, int vocab, bf16* cache) {
  const int rj = blockIdx.x;  // r * steps + j
  const int s = blockIdx.y;
  const int64_t slot = cache_slots[rj / steps];
  if (slot < 0) return;
  const int64_t j = rj % steps;
  const bf16* src = gathered + (static_cast<int64_t>(s) * rows * steps + rj) * width;
  bf16* dst = cache + (slot * steps + j) * vocab + static_cast<int64_t>(s) * width;
  if constexpr (kVec == 8) {
    for (int x = threadIdx.x; x < width / 8; x += blockDim.x)
      reinterpret_cast<uint4*>(dst)[x] = reinterpret_cast<const uint4*>(src)[x];
  } else {
    for (int x = threadIdx.x; x < width; x += blockDim.x) dst[x] = src[x];
  }
}

using StepKernel = void (*)(FusedStepParams);

StepKernel step_kernel(int rank) {
  switch (rank) {
    case 16: return fused_step_kernel<16>;
    case 32: return fused_step_kernel<32>;
    case 64: return fused_step_kernel<64>;
    case 128: return fused_step_kernel<128>;
    case 256: return fused_step_kernel<256>;
    case 512: return fused_step_kernel<512>;
    case 1024: return fused_step_kernel<1024>;
    default: break;
  }
  throw InvalidArgument("cuda::fused_markov_loop: rank " + std::to_string(rank) +
                        " has no fused kernel (a power of two in [16, 1024])");
}

// Per-step launch values shared by the TP 1 and the shard launches.
struct StepLaunch {
  StepKernel kernel;
  dim3 grid;
  int smem;
  int stages;
  bool pdl;
};

StepLaunch plan_step(const MarkovWorkspace& ws, int rows, int width) {
  const FusedStepLaunch l = fused_step_launch(ws, rows, width);
  return StepLaunch{step_kernel(ws.rank()), dim3(l.grid), l.shape.smem_bytes,
                    l.shape.stages, ws.pdl()};
}

void launch_step(const StepLaunch& l, const FusedStepParams& p, cudaStream_t stream) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = l.grid;
  cfg.blockDim = dim3(kFusedThreads);
  cfg.dynamicSmemBytes = static_cast<size_t>(l.smem);
  cfg.stream = stream;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = l.pdl ? 1 : 0;
  SD_CUDA_CHECK(cudaLaunchKernelEx(&cfg, l.kernel, p));
}

FusedStepParams common_params(const MarkovHead& head, const MarkovBatch& batch,
                              MarkovWorkspace& ws, const StepLaunch& l) {
  FusedStepParams p{};
  p.w1 = head.w1;
  p.temperatures = batch.temperatures;
  p.seeds = batch.seeds;
  p.anchor_positions = batch.anchor_positions;
  p.cache_slots = batch.cache_slots;
  p.partials = ws.partials.data();
  p.partial_stride = ws.max_grid();
  p.noise_bound = ws.noise_bound.data();
  p.transform = head.transform;
  p.rows = batch.rows;
  p.steps = batch.steps;
  p.stages = l.stages;
  return p;
}

void check_batch(const char* op, const MarkovHead& head, const MarkovBatch& batch,
                 const MarkovWorkspace& ws) {
  require(head.vocab == ws.vocab() && head.rank == ws.rank(), op,
          "head (vocab " + std::to_string(head.vocab) + ", rank " + std::to_string(head.rank) +
              ") does not match the workspace (vocab " + std::to_string(ws.vocab()) + ", rank " +
              std::to_string(ws.rank()) + ")");
  require(batch.rows >= 0 && batch.rows <= ws.max_rows(), op,
          "rows " + std::to_string(batch.rows) + " not in [0, " + std::to_string(ws.max_rows()) +
              "]");
  require(batch.steps >= 1 && batch.steps <= ws.steps(), op,
          "steps " + std::to_string(batch.steps) + " not in [1, " + std::to_string(ws.steps()) +
              "]");
  require(head.w1 != nullptr, op, "head.w1 must not be null");
  require(batch.anchor_tokens != nullptr && batch.anchor_positions != nullptr &&
              batch.seeds != nullptr && batch.temperatures != nullptr &&
              batch.cache_slots != nullptr && batch.draft_tokens != nullptr &&
              batch.cache != nullptr,
          op, "the batch's row arrays, draft_tokens and cache must not be null");
}

void launch_anchor(const MarkovHead& head, const MarkovBatch& batch, MarkovWorkspace& ws,
                   cudaStream_t stream) {
  anchor_kernel<<<batch.rows, 128, 0, stream>>>(batch.anchor_tokens, head.w1, head.rank,
                                                ws.embeds.data(), ws.arrivals.data(),
                                                static_cast<int>(ws.arrivals.size()));
  SD_CHECK_LAUNCH();
}

}  // namespace

int prepare_fused_kernels(int rank, int max_smem) {
  const StepKernel k = step_kernel(rank);
  SD_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
  int blocks = 0;
  SD_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&blocks, k, kFusedThreads, 0));
  return blocks;
}

}  // namespace markov_detail

using namespace markov_detail;

void fused_markov_loop(const MarkovHead& head, const MarkovBatch& batch, MarkovWorkspace& ws,
                       cudaStream_t stream) {
  MarkovPlanInput plan;
  plan.vocab = head.vocab;
  plan.rank = head.rank;
  plan.max_rows = ws.max_rows();
  plan.w1 = head.w1;
  plan.w2 = head.w2;
  const std::string refusal = fused_refusal(plan, ws.max_smem(), ws.smem_per_sm());
  require(refusal.empty(), "fused_markov_loop", "the fused loop does not run here: " + refusal);
  require(ws.shards() == 1, "fused_markov_loop",
          "the workspace has " + std::to_string(ws.shards()) + " shards; use VocabParallelMarkov");
  check_batch("fused_markov_loop", head, batch, ws);
  require(head.w2 != nullptr && batch.base_logits != nullptr, "fused_markov_loop",
          "head.w2 and base_logits must not be null");
  if (batch.rows == 0) return;

  const StepLaunch l = plan_step(ws, batch.rows, head.vocab);
  const int64_t n = batch.steps, v = head.vocab, row_k = static_cast<int64_t>(batch.rows) * head.rank;
  launch_anchor(head, batch, ws, stream);
  for (int j = 0; j < batch.steps; ++j) {
    FusedStepParams p = common_params(head, batch, ws, l);
    p.w2 = head.w2;
    p.base = batch.base_logits + j * v;
    p.base_row_stride = n * v;
    p.embeds_in = ws.embeds.data() + j * row_k;
    p.embeds_out = ws.embeds.data() + (j + 1) * row_k;
    p.cache = batch.cache + j * v;
    p.cache_row_stride = n * v;
    p.cache_by_row = 0;
    p.tokens = batch.draft_tokens + j;
    p.packets = nullptr;
    p.arrivals = ws.arrivals.data() + static_cast<int64_t>(j) * ws.max_rows();
    p.width = head.vocab;
    p.step = j;
    p.id_offset = 0;
    p.reverse = ws.alternate_direction() && (j % 2 == 1);
    launch_step(l, p, stream);
  }
}

void VocabParallelMarkov::run(const MarkovBatch& batch, std::span<const MarkovShard> local,
                              cudaStream_t stream) {
  const std::vector<int> shards = exchange_.local_shards();
  require(local.size() == shards.size(), "VocabParallelMarkov::run",
          "got " + std::to_string(local.size()) + " shards for " + std::to_string(shards.size()) +
              " local shards");
  check_batch("VocabParallelMarkov::run", head_, batch, ws_);
  for (size_t i = 0; i < local.size(); ++i) {
    require(local[i].w2 != nullptr && local[i].base_logits != nullptr, "VocabParallelMarkov::run",
            "shard " + std::to_string(shards[i]) + ": w2 and base_logits must not be null");
    require(reinterpret_cast<uintptr_t>(local[i].w2) % 16 == 0, "VocabParallelMarkov::run",
            "shard " + std::to_string(shards[i]) + ": w2 is not 16-byte aligned");
  }
  if (batch.rows == 0) return;

  const int s_count = ws_.shards(), width = ws_.shard_width(), rows = batch.rows;
  const int64_t n = batch.steps, row_k = static_cast<int64_t>(rows) * head_.rank;
  const int64_t shard_cache_len = static_cast<int64_t>(ws_.max_rows()) * ws_.steps() * width;
  const StepLaunch l = plan_step(ws_, rows, width);
  std::vector<const void*> sends(local.size());
  launch_anchor(head_, batch, ws_, stream);
  for (int j = 0; j < batch.steps; ++j) {
    for (size_t i = 0; i < local.size(); ++i) {
      const int s = shards[i];
      FusedStepParams p = common_params(head_, batch, ws_, l);
      p.w2 = local[i].w2;
      p.base = local[i].base_logits + j * width;
      p.base_row_stride = n * width;
      p.embeds_in = ws_.embeds.data() + j * row_k;
      p.embeds_out = nullptr;
      p.cache = ws_.shard_cache.data() + s * shard_cache_len + j * width;
      p.cache_row_stride = n * width;
      p.cache_by_row = 1;
      p.tokens = nullptr;
      p.packets = ws_.packets_send.data() + static_cast<int64_t>(s) * ws_.max_rows();
      p.arrivals = ws_.arrivals.data() + (static_cast<int64_t>(s) * ws_.steps() + j) * ws_.max_rows();
      p.width = width;
      p.step = j;
      p.id_offset = s * width;
      p.reverse = ws_.alternate_direction() && (j % 2 == 1);
      launch_step(l, p, stream);
      sends[i] = p.packets;
    }
    exchange_.all_gather(sends.data(), ws_.packets_recv.data(), rows * sizeof(MarkovPacket),
                         stream);
    pick_kernel<<<rows, kWarp, 0, stream>>>(ws_.packets_recv.data(), s_count, rows, head_.w1,
                                            head_.rank, batch.draft_tokens + j, batch.steps,
                                            ws_.embeds.data() + (j + 1) * row_k);
    SD_CHECK_LAUNCH();
  }
  // The cache slices: [rows][steps][width] of every shard -> the full cache.
  for (size_t i = 0; i < local.size(); ++i)
    sends[i] = ws_.shard_cache.data() + shards[i] * shard_cache_len;
  exchange_.all_gather(sends.data(), ws_.gathered_cache.data(),
                       static_cast<size_t>(rows) * batch.steps * width * sizeof(bf16), stream);
  const dim3 grid(rows * batch.steps, s_count);
  if (width % 8 == 0 && head_.vocab % 8 == 0 &&
      reinterpret_cast<uintptr_t>(batch.cache) % 16 == 0)
    cache_fill_kernel<8><<<grid, 256, 0, stream>>>(ws_.gathered_cache.data(), batch.cache_slots,
                                                   rows, batch.steps, width, head_.vocab,
                                                   batch.cache);
  else
    cache_fill_kernel<1><<<grid, 256, 0, stream>>>(ws_.gathered_cache.data(), batch.cache_slots,
                                                   rows, batch.steps, width, head_.vocab,
                                                   batch.cache);
  SD_CHECK_LAUNCH();
}

}  // namespace sparkdraft::cuda
