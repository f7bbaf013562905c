// The fused Markov loop (SPEC section 5) and its vocab-parallel form (section 6).
//
// Per step ONE kernel over the vocabulary. Block b walks a contiguous run of
// vocab tiles (fused_tile_vocab(rank) entries, all rank columns of w2), streamed
// into a shared-memory ring with 16-byte cp.async, so w2 is read once per step for
// all rows. Per tile:
//   phase A (bias, on the tensor cores): the tile's entries in 16-entry m-tiles
//     times the rows in 8-row n-tiles; each warp takes (m-tile, n-tile) items (two
//     at a time, their chains interleaved) and runs the chain of mma.sync.m16n8k16
//     over the rank (A = 16 w2 rows from the ring by ldmatrix, B = 8 embeddings
//     from shared memory), so every bias is bf16(mma_chain(w2[v], e[r]))
//     (core/mma.h), staged as bf16. The ring stores each row's 16-byte chunks
//     XOR-swizzled by the row (conflict-free ldmatrix).
//   phase B (epilogue, every fused_epilogue_tiles tiles): lane slots of kEpl
//     consecutive entries of one row (8 from 16 rows, fewer below):
//     l = step_logit(base, bias) (base read once, streaming), the cache store, then
//     for T > 0, branch-free over the slot, the Philox uniform u and a bracket
//     zlo <= z <= zhi of the score z = RN(RN(l / T) + g) without a division or a
//     log (score_bracket: RN(l * RN(1 / T)) within a proven margin, g within u's
//     noise bucket, directed rounding). The row's known lower bound (grid-wide and
//     block-wide, order keys, atomicMax) takes the largest zlo; an entry whose zhi
//     is below it cannot be the row's maximum and is dropped. The few survivors
//     wait in a per-warp queue and are scored exactly (the contract's division and
//     logs) at the end of the walk, when the bound has grown and drops most of them.
//     T = 0 rows and non-finite scores are exact candidates at once.
// At the end each block folds its best per row into the row's best with one 64-bit
// atomicMax (pack_candidate orders candidates as the sampling rule does), fences,
// and counts itself in on the row's arrival counter; the block that arrives last
// reads the row's best and writes the token and w1[token] as the next step's
// embedding, or, in a vocab shard, the row's packet. Odd steps walk the tiles
// backwards, so the first tiles a block reads are the ones it read last (in L2).
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
  const bf16* w2;    // [width, K] this shard's rows
  const bf16* base;  // step j's plane: row r at base + r * base_row_stride
  int64_t base_row_stride;
  const bf16* embeds_in;  // [rows, K] step j's embeddings
  bf16* embeds_out;       // [rows, K] step j+1's (TP 1)
  const bf16* w1;         // [V, K]
  const float* temperatures;
  const int64_t* seeds;
  const int64_t* anchor_positions;
  const int64_t* cache_slots;
  bf16* cache;  // step j's plane: row index i at cache + i * cache_row_stride
  int64_t cache_row_stride;
  int cache_by_row;              // shard caches are indexed by row, the full cache by slot
  int64_t* tokens;               // TP 1: draft_tokens + j, row stride `steps`
  MarkovPacket* packets;         // vocab shard: [rows]; null at TP 1
  unsigned long long* row_best;  // [rows] this step's best (value, id) of each row so far,
                                 // packed by pack_candidate (0 by the anchor kernel)
  uint32_t* arrivals;            // [rows] this step's counters (zeroed by the anchor kernel)
  int* known;                    // [rows] this step's grid-wide lower bounds of the rows' best
                                 // z as order keys (-inf by the anchor kernel)
  const float* noise_bound;      // [kNoiseBuckets] noise_bound_table()
  ops::LogitTransform transform;
  int rows, width, steps, step, id_offset;
  int stages, reverse;
  int vec_io;  // base and cache rows allow 16-byte accesses at 8-entry steps
};

// fp32 -> int32 whose signed order is the order of the (non-NaN) floats, and back
// (the map is its own inverse): the block's `known` bounds go through atomicMax.
__device__ __forceinline__ int order_key(float x) {
  const int b = __float_as_int(x);
  return b >= 0 ? b : b ^ 0x7fffffff;
}
__device__ __forceinline__ float key_value(int k) {
  return __int_as_float(k >= 0 ? k : k ^ 0x7fffffff);
}

__device__ __forceinline__ int ld_volatile(const int* p) {
  return *reinterpret_cast<const volatile int*>(p);
}

// A candidate as one 64-bit key whose unsigned order is the sampling rule's
// preference (core/sampling.h `better`): the high word orders the values (NaN above
// every number, -0 as +0, which `better` treats as equal), the low word prefers
// the lower id. So the blocks fold their bests into a row with one atomicMax.
__device__ __forceinline__ unsigned long long pack_candidate(const MarkovCandidate& c) {
  const int key = c.value != c.value ? 0x7fffffff : order_key(c.value == 0.0f ? 0.0f : c.value);
  const uint32_t hi = static_cast<uint32_t>(key) ^ 0x80000000u;
  const uint32_t lo = ~static_cast<uint32_t>(c.id);
  return (static_cast<unsigned long long>(hi) << 32) | lo;
}
__device__ __forceinline__ MarkovCandidate unpack_candidate(unsigned long long k) {
  const int key = static_cast<int>(static_cast<uint32_t>(k >> 32) ^ 0x80000000u);
  const float value = key == 0x7fffffff ? __int_as_float(0x7fffffff) : key_value(key);
  return MarkovCandidate{value, static_cast<int32_t>(~static_cast<uint32_t>(k))};
}

// Copies w1[id] (rank bf16, rank % 8 == 0) to dst with one warp.
__device__ __forceinline__ void copy_embedding(const bf16* w1, int32_t id, int rank, bf16* dst,
                                               int lane) {
  const uint4* src = reinterpret_cast<const uint4*>(w1 + static_cast<int64_t>(id) * rank);
  uint4* out = reinterpret_cast<uint4*>(dst);
  for (int x = lane; x < rank / 8; x += kWarp) out[x] = src[x];
}

// The step logits l = step_logit(base, bias) of n <= E consecutive entries v0.. of
// row r (bias from the staging buffer), stored to cache row `crow` when crow >= 0;
// lv = f32(l). Base logits and cache are touched once: streaming (evict-first)
// accesses, so that L2 keeps w2 for the next step. E = 8 and vec_io: one 16-byte
// access each.
template <int E>
__device__ __forceinline__ void load_logits(const FusedStepParams& p, int r, int v0, int n,
                                            const bf16* bias, int64_t crow, float lv[E]) {
  const bf16* base = p.base + r * p.base_row_stride + v0;
  bf16* cache = crow >= 0 ? p.cache + crow * p.cache_row_stride + v0 : nullptr;
  if constexpr (E == 8) {
    if (p.vec_io && n == 8) {
      const uint4 braw = __ldcs(reinterpret_cast<const uint4*>(base));
      const uint4 sraw = *reinterpret_cast<const uint4*>(bias);
      const uint32_t bw[4] = {braw.x, braw.y, braw.z, braw.w};
      const uint32_t sw[4] = {sraw.x, sraw.y, sraw.z, sraw.w};
      uint32_t lw[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const bf16 l0 = step_logit(bf16{static_cast<uint16_t>(bw[i] & 0xffffu)},
                                   bf16{static_cast<uint16_t>(sw[i] & 0xffffu)}, p.transform);
        const bf16 l1 = step_logit(bf16{static_cast<uint16_t>(bw[i] >> 16)},
                                   bf16{static_cast<uint16_t>(sw[i] >> 16)}, p.transform);
        lw[i] = static_cast<uint32_t>(l0.bits) | (static_cast<uint32_t>(l1.bits) << 16);
        lv[2 * i] = to_f32(l0);
        lv[2 * i + 1] = to_f32(l1);
      }
      if (cache != nullptr)
        __stcs(reinterpret_cast<uint4*>(cache), make_uint4(lw[0], lw[1], lw[2], lw[3]));
      return;
    }
  }
#pragma unroll
  for (int i = 0; i < E; ++i) {
    if (i >= n) {
      lv[i] = 0.0f;
      continue;
    }
    const bf16 l = step_logit(bf16{__ldcs(reinterpret_cast<const unsigned short*>(base + i))},
                              bias[i], p.transform);
    if (cache != nullptr) __stcs(reinterpret_cast<unsigned short*>(cache + i), l.bits);
    lv[i] = to_f32(l);
  }
}

// The bracket zlo <= z <= zhi of an entry's score z = RN(RN(l / T) + g) without the
// division or the logs: sa = RN(l * y), y = RN(1 / T), is within
// d = |sa| 2^-22 + 2^-126 of RN(l / T) (two roundings of 2^-24 each plus RN's half
// ulp; the absolute term covers subnormal results), and g lies in [lo, hi] of u's
// bucket; rounding down and up keeps the bracket. Valid for finite sa and
// T in [2^-100, 2^100]; the callers send everything else to the exact path.
struct Bracket {
  float lo, hi;
};
__device__ __forceinline__ Bracket score_bracket(float l, float y, float u, const float* noise_b) {
  const float sa = __fmul_rn(l, y);
  const float d = __fmaf_ru(fabsf(sa), 0x1p-22f, 0x1p-126f);
  const int b = noise_bucket(u);
  return Bracket{__fadd_rd(__fsub_rd(sa, d), noise_b[b + 1]),
                 __fadd_ru(__fadd_ru(sa, d), noise_b[b])};
}
__device__ __forceinline__ bool bracket_ok(float l, float y, float t) {
  return (__float_as_uint(__fmul_rn(l, y)) & 0x7f800000u) != 0x7f800000u && t >= 0x1p-100f &&
         t <= 0x1p100f;
}

// A survivor waiting for its exact score: its row, id, logit and uniform.
struct Survivor {
  int row, id;
  float l, u;
};
inline constexpr int kQueue = 16;  // survivors per warp

template <int K, int kEpl>
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
  unsigned long long* best = reinterpret_cast<unsigned long long*>(smem + lay.best);  // packed
  int64_t* cache_row = reinterpret_cast<int64_t*>(smem + lay.cache_row);
  float* temp = reinterpret_cast<float*>(smem + lay.temp);
  uint32_t* seed = reinterpret_cast<uint32_t*>(smem + lay.seed);
  int* last = reinterpret_cast<int*>(smem + lay.last);
  int* staged_v0 = reinterpret_cast<int*>(smem + lay.staged_v0);
  int* known_s = reinterpret_cast<int*>(smem + lay.known);
  // The noise of any u in bucket b lies in [noise_b[b + 1], noise_b[b]] (the entry
  // past the last bucket holds kNoiseFloor).
  float* noise_b = reinterpret_cast<float*>(smem + lay.noise);
  Survivor* queue = reinterpret_cast<Survivor*>(smem + lay.queue) + (threadIdx.x / kWarp) * kQueue;

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
        cp_async_16(dst + v * K + fused_ring_chunk<K>(v, c) * 8, ok ? src + x * 8 : p.w2,
                    ok ? 16 : 0);
      }
    }
    cp_async_commit();
  };

  // Prologue: only static data (w2, the noise bounds), so it may overlap the
  // previous kernel.
  for (int s = 0; s < p.stages - 1; ++s) issue(s);
  for (int b = tid; b <= kNoiseBuckets; b += kFusedThreads)
    noise_b[b] = b < kNoiseBuckets ? p.noise_bound[b] : kNoiseFloor;
  grid_dependency_wait();

  // This step's rows: embeddings (bf16, rows padded to whole n-tiles with zeros,
  // row stride kEStride), temperatures, step seeds, cache rows.
  for (int x = tid; x < n_tiles * 8 * kChunks; x += kFusedThreads) {
    const int r = x / kChunks, c = x % kChunks;
    const uint4 raw =
        r < p.rows ? reinterpret_cast<const uint4*>(p.embeds_in)[x] : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(smem + lay.e + (r * kEStride + c * 8) * 2) = raw;
  }
  for (int r = tid; r < p.rows; r += kFusedThreads) {
    temp[r] = p.temperatures[r];
    seed[r] = draft_step_seed(p.seeds[r], p.anchor_positions[r], p.step);
    const int64_t slot = p.cache_slots[r];
    cache_row[r] = slot < 0 ? -1 : (p.cache_by_row ? r : slot);
    known_s[r] = order_key(__int_as_float(static_cast<int>(0xff800000u)));  // -inf
  }
  for (int x = tid; x < p.rows; x += kFusedThreads) best[x] = 0ull;

  // Survivors (entries whose bracket reaches the row's bound) wait in the warp's
  // queue; flush() scores them exactly (contract arithmetic) with the bound of the
  // time, which by then drops most of them, and folds them into the warp's bests.
  int q_count = 0;  // warp-uniform
  auto flush = [&]() {
    __syncwarp();
    MarkovCandidate c = no_candidate();
    int row = -1;
    if (lane < q_count) {  // q_count <= kQueue <= 32
      const Survivor sv = queue[lane];
      row = sv.row;
      const float t = temp[row];
      const float kr = key_value(*reinterpret_cast<volatile int*>(known_s + row));
      if (!(score_bracket(sv.l, __frcp_rn(t), sv.u, noise_b).hi < kr))
        c = MarkovCandidate{__fadd_rn(__fdiv_rn(sv.l, t), gumbel_noise(sv.u)), sv.id};
    }
    for (unsigned left = __ballot_sync(0xffffffffu, row >= 0); left != 0u;
         left = __ballot_sync(0xffffffffu, row >= 0)) {
      const int r0 = __shfl_sync(0xffffffffu, row, __ffs(left) - 1);
      const MarkovCandidate o = warp_best(row == r0 ? c : no_candidate());
      if (lane == 0) {
        if (o.id != 0x7fffffff) atomicMax(best + r0, pack_candidate(o));
        if (o.value == o.value && o.id != 0x7fffffff) atomicMax(known_s + r0, order_key(o.value));
      }
      if (row == r0) row = -1;
    }
    q_count = 0;
    __syncwarp();
  };

  for (int it = 0; it < ntiles; ++it) {
    cp_async_wait(p.stages - 2);  // this thread's copies of tile `it` landed
    __syncthreads();              // everyone's; and stage (it - 1) is free again
    issue(it + p.stages - 1);
    const int slot = it % e_tiles;
    const bool epilogue = slot == e_tiles - 1 || it == ntiles - 1;
    // The grid-wide bound of row tid (rows past the block size read theirs below),
    // loaded now and merged after phase A, off the critical path.
    const int known_g = epilogue && tid < p.rows ? ld_volatile(p.known + tid) : 0;
    if (tid == 0) staged_v0[slot] = tile_at(it) * kTileV;

    // ---- phase A: the bias of this tile's entries for every row, as MMA chains ----
    {
      const bf16* stage = ring + (it % p.stages) * kTileElems;
      const int g = lane / 4, t4 = lane % 4;
      const int lm_row = (lane / 8 % 2) * 8 + lane % 8, lm_chunk = lane / 16;  // ldmatrix roles
      // The accumulator of item (m-tile, n-tile) to the staging buffer as bf16: lane
      // (g, t4) holds entries g, g + 8 of the m-tile for rows 2 t4, 2 t4 + 1.
      auto stage_bias = [&](const float acc[4], int item) {
        const int r0 = (item / kMTiles) * 8 + 2 * t4,
                  x0 = slot * kTileV + (item % kMTiles) * 16 + g;
        if (r0 < p.rows) {
          staging[r0 * width + x0] = to_bf16(acc[0]);
          staging[r0 * width + x0 + 8] = to_bf16(acc[2]);
        }
        if (r0 + 1 < p.rows) {
          staging[(r0 + 1) * width + x0] = to_bf16(acc[1]);
          staging[(r0 + 1) * width + x0 + 8] = to_bf16(acc[3]);
        }
      };
      // Two items per pass when there are enough: their chains interleave.
      const int n_items = kMTiles * n_tiles;
      for (int item0 = warp; item0 < n_items; item0 += 2 * kFusedWarps) {
        const int item1 = item0 + kFusedWarps;
        const bool two = item1 < n_items;  // warp-uniform
        const int v0 = (item0 % kMTiles) * 16 + lm_row, v1 = (item1 % kMTiles) * 16 + lm_row;
        const bf16* a0_row = stage + v0 * K;
        const bf16* a1_row = stage + v1 * K;
        const bf16* b0_row = e_s + ((item0 / kMTiles) * 8 + g) * kEStride + 2 * t4;
        const bf16* b1_row = e_s + ((item1 / kMTiles) * 8 + g) * kEStride + 2 * t4;
        float acc0[4] = {0.0f, 0.0f, 0.0f, 0.0f}, acc1[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll 4
        for (int ks = 0; ks < K / 16; ++ks) {
          uint32_t a[4];
          ldmatrix_x4(a, a0_row + fused_ring_chunk<K>(v0, 2 * ks + lm_chunk) * 8);
          const uint32_t b[2] = {*reinterpret_cast<const uint32_t*>(b0_row + ks * 16),
                                 *reinterpret_cast<const uint32_t*>(b0_row + ks * 16 + 8)};
          mma_bf16_16816(acc0, a, b, acc0);
          if (two) {
            uint32_t a1[4];
            ldmatrix_x4(a1, a1_row + fused_ring_chunk<K>(v1, 2 * ks + lm_chunk) * 8);
            const uint32_t b1[2] = {*reinterpret_cast<const uint32_t*>(b1_row + ks * 16),
                                    *reinterpret_cast<const uint32_t*>(b1_row + ks * 16 + 8)};
            mma_bf16_16816(acc1, a1, b1, acc1);
          }
        }
        stage_bias(acc0, item0);
        if (two) stage_bias(acc1, item1);
      }
    }
    if (!epilogue) continue;
    // Merge the grid-wide bounds into the block's, and publish the block's where it
    // is ahead (once per row and epilogue: the grid-wide bound is one hot address
    // per row, so the warps do not each update it).
    if (tid < p.rows) {
      const int mine = atomicMax(known_s + tid, known_g);
      if (mine > known_g) atomicMax(p.known + tid, mine);
    }
    for (int r = tid + kFusedThreads; r < p.rows; r += kFusedThreads) {
      const int g = ld_volatile(p.known + r), mine = atomicMax(known_s + r, g);
      if (mine > g) atomicMax(p.known + r, mine);
    }

    // ---- phase B: the epilogue over the staged tiles ----
    // Lane slots of kEpl consecutive entries of one row (kEpl = fused_entries_per_lane:
    // 8 from 8 rows, fewer below so that every warp has slots); slot q of the staged
    // block is row q / (width / kEpl), entries kEpl (q % (width / kEpl)) ..; a warp
    // takes 32 slots at a time: 32 / group rows of `group` lanes.
    __syncthreads();
    {
      const int staged = (slot + 1) * kTileV;  // entries per row in this block
      const int slots_per_row = width / kEpl;
      const int group = slots_per_row < kWarp ? slots_per_row : kWarp;  // lanes per row
      for (int q0 = warp * kWarp; q0 < p.rows * slots_per_row; q0 += kFusedWarps * kWarp) {
        const int q = q0 + lane;
        const int r = q / slots_per_row, x0 = (q % slots_per_row) * kEpl;
        const bool active = r < p.rows && x0 < staged;
        const int rr = active ? r : 0;
        const float t = temp[rr];
        const bool noised = t > 0.0f;
        const uint32_t sd = seed[rr];
        const int v0 = active ? staged_v0[x0 / kTileV] + x0 % kTileV : 0;
        const int n = active ? (p.width - v0 < kEpl ? p.width - v0 : kEpl) : 0;  // entries < width
        float lv[kEpl];
#pragma unroll
        for (int i = 0; i < kEpl; ++i) lv[i] = 0.0f;
        if (n > 0) load_logits<kEpl>(p, rr, v0, n, staging + rr * width + x0, cache_row[rr], lv);
        MarkovCandidate cand = no_candidate();
        float lo = __int_as_float(static_cast<int>(0xff800000u));  // -inf
        const float k0 = key_value(*reinterpret_cast<volatile int*>(known_s + rr));
        float u[kEpl], zhi[kEpl];
        unsigned exact = 0;  // entries to score exactly
        if (noised) {
          // Pass 1, branch-free over the kEpl entries (their Philox chains interleave):
          // a bracket zlo <= z <= zhi of each entry's score z = RN(RN(l / T) + g).
          // sa = RN(l * RN(1 / T)) is within d = |sa| 2^-22 + 2^-126 of RN(l / T)
          // (two roundings of 2^-24 each plus RN's half ulp; the absolute term covers
          // subnormal results), and g lies in its bucket's [lo, hi]; rounding down
          // and up keeps the bracket. Non-finite sa and temperatures outside
          // [2^-100, 2^100] go to the exact path.
          const float y = __frcp_rn(t);
#pragma unroll
          for (int i = 0; i < kEpl; ++i) {
            u[i] = philox_uniform_u32(sd, static_cast<uint32_t>(v0 + i + p.id_offset));
            const Bracket bz = score_bracket(lv[i], y, u[i], noise_b);
            zhi[i] = bz.hi;
            if (i < n) {
              if (bracket_ok(lv[i], y, t))
                lo = fmaxf(lo, bz.lo);
              else
                exact |= 1u << i;
            }
          }
        } else {
          // T = 0: z = l, no noise.
#pragma unroll
          for (int i = 0; i < kEpl; ++i) {
            const MarkovCandidate c{lv[i], v0 + i + p.id_offset};
            if (i < n && wins(c, cand)) cand = c;
          }
          if (cand.value == cand.value) lo = cand.value;
        }
        // The row's bound: this group's brackets, merged over the group's lanes.
#pragma unroll
        for (int off = 1; off < kWarp; off *= 2)
          if (off < group) lo = fmaxf(lo, __shfl_xor_sync(0xffffffffu, lo, off));
        const float k = fmaxf(k0, lo);
        unsigned surv = 0;  // finite entries whose bracket reaches k: to the queue
        if (noised) {
#pragma unroll
          for (int i = 0; i < kEpl; ++i)
            if (i < n && !(zhi[i] < k)) surv |= 1u << i;
          surv &= ~exact;
          // Entries outside the bracket's range: scored exactly now (rare).
          for (unsigned m = exact; m != 0u; m &= m - 1u) {
            const int i = __ffs(m) - 1;
            float li = 0.0f, ui = 0.0f;
#pragma unroll
            for (int j = 0; j < kEpl; ++j)
              if (j == i) li = lv[j], ui = u[j];
            const float sc = __fdiv_rn(li, t);
            const bool finite = (__float_as_uint(sc) & 0x7f800000u) != 0x7f800000u;
            const MarkovCandidate c{finite ? __fadd_rn(sc, gumbel_noise(ui)) : sc,
                                    v0 + i + p.id_offset};
            if (wins(c, cand)) cand = c;
          }
        }
        // The group's best to the block's best of the row; the bound to the row. (Most
        // passes have no exact candidate at all: the reduction is skipped then.)
        if (__ballot_sync(0xffffffffu, cand.id != 0x7fffffff) != 0u) {
#pragma unroll
          for (int off = 1; off < kWarp; off *= 2) {
            if (off >= group) break;
            MarkovCandidate o;
            o.value = __shfl_xor_sync(0xffffffffu, cand.value, off);
            o.id = __shfl_xor_sync(0xffffffffu, cand.id, off);
            if (wins(o, cand)) cand = o;
          }
        }
        if (active && q % group == 0) {
          if (cand.id != 0x7fffffff) atomicMax(best + rr, pack_candidate(cand));
          const float kb = cand.value == cand.value ? fmaxf(lo, cand.value) : lo;
          if (kb > k0 && kb == kb) atomicMax(known_s + rr, order_key(kb));
        }
        // The survivors to the queue (flushed first when they would not fit).
        const int cnt = __popc(surv);
        if (__ballot_sync(0xffffffffu, cnt > 0) != 0u) {
          int incl = cnt;
#pragma unroll
          for (int off = 1; off < kWarp; off *= 2) {
            const int o = __shfl_up_sync(0xffffffffu, incl, off);
            if (lane >= off) incl += o;
          }
          const int total = __shfl_sync(0xffffffffu, incl, kWarp - 1);
          if (q_count + total > kQueue) flush();
          if (total > kQueue) {
            // More than a queue in one pass: score this pass's survivors in rounds.
            int done = 0;
            while (done < total) {
              int pos = incl - cnt - done;
              for (unsigned m = surv; m != 0u; m &= m - 1u, ++pos) {
                const int i = __ffs(m) - 1;
                if (pos < 0 || pos >= kQueue) continue;
                float li = 0.0f, ui = 0.0f;
#pragma unroll
                for (int j = 0; j < kEpl; ++j)
                  if (j == i) li = lv[j], ui = u[j];
                queue[pos] = Survivor{rr, v0 + i + p.id_offset, li, ui};
              }
              q_count = total - done < kQueue ? total - done : kQueue;
              flush();
              done += kQueue;
            }
          } else {
            int pos = q_count + incl - cnt;
            for (unsigned m = surv; m != 0u; m &= m - 1u, ++pos) {
              const int i = __ffs(m) - 1;
              float li = 0.0f, ui = 0.0f;
#pragma unroll
              for (int j = 0; j < kEpl; ++j)
                if (j == i) li = lv[j], ui = u[j];
              queue[pos] = Survivor{rr, v0 + i + p.id_offset, li, ui};
            }
            q_count += total;
          }
        }
        __syncwarp();  // a later pass's group leader may be another lane
      }
    }
    // The next iteration's __syncthreads orders these staging reads before new writes.
  }
  flush();
  launch_dependents();  // the vocab walk is done: the next step may start its prologue
  __syncthreads();

  // Block best per row folded into the row's best (one 64-bit atomicMax), then the
  // arrival count: the block that arrives last reads the rows' final bests.
  for (int r = tid; r < p.rows; r += kFusedThreads) {
    atomicMax(p.row_best + r, best[r]);
    __threadfence();
    const uint32_t arrived = atomicAdd(&p.arrivals[r], 1u);
    last[r] = arrived == gridDim.x - 1;
  }
  __syncthreads();

  // Rows this block arrived last at: the token (or the shard's packet) and the next
  // step's embedding, one warp per row.
  __threadfence();
  for (int r = warp; r < p.rows; r += kFusedWarps) {
    if (!last[r]) continue;
    const MarkovCandidate c =
        unpack_candidate(*reinterpret_cast<volatile unsigned long long*>(p.row_best + r));
    if (p.packets != nullptr) {
      if (lane == 0) p.packets[r] = make_packet(c.value, c.id);
    } else {
      if (lane == 0) p.tokens[static_cast<int64_t>(r) * p.steps] = c.id;
      copy_embedding(p.w1, c.id, K, p.embeds_out + static_cast<int64_t>(r) * K, lane);
    }
  }
}

// Step 0's embeddings w1[anchor] and zeroed arrival counters.
__global__ void anchor_kernel(const int64_t* anchors, const bf16* w1, int rank, bf16* embeds,
                              uint32_t* arrivals, int* known, unsigned long long* row_best,
                              int arrivals_len) {
  const int r = blockIdx.x;
  const uint4* src = reinterpret_cast<const uint4*>(w1 + anchors[r] * rank);
  uint4* dst = reinterpret_cast<uint4*>(embeds + static_cast<int64_t>(r) * rank);
  for (int x = threadIdx.x; x < rank / 8; x += blockDim.x) dst[x] = src[x];
  for (int x = r * blockDim.x + threadIdx.x; x < arrivals_len; x += gridDim.x * blockDim.x)
    arrivals[x] = 0, known[x] = order_key(__int_as_float(static_cast<int>(0xff800000u))),
    row_best[x] = 0ull;
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

template <int K>
StepKernel step_kernel_for(int epl) {
  switch (epl) {
    case 1: return fused_step_kernel<K, 1>;
    case 2: return fused_step_kernel<K, 2>;
    case 4: return fused_step_kernel<K, 4>;
    default: return fused_step_kernel<K, 8>;
  }
}

StepKernel step_kernel(int rank, int epl) {
  switch (rank) {
    case 16: return step_kernel_for<16>(epl);
    case 32: return step_kernel_for<32>(epl);
    case 64: return step_kernel_for<64>(epl);
    case 128: return step_kernel_for<128>(epl);
    case 256: return step_kernel_for<256>(epl);
    case 512: return step_kernel_for<512>(epl);
    case 1024: return step_kernel_for<1024>(epl);
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
  return StepLaunch{step_kernel(ws.markov_rank(), fused_entries_per_lane(rows)), dim3(l.grid),
                    l.shape.smem_bytes, l.shape.stages, ws.pdl()};
}

// Whether every 8-entry slot of the step's base and cache rows is one aligned 16-byte access.
int vec_io(const FusedStepParams& p) {
  auto aligned = [](const void* q) { return reinterpret_cast<uintptr_t>(q) % 16 == 0; };
  return p.width % 8 == 0 && p.base_row_stride % 8 == 0 && p.cache_row_stride % 8 == 0 &&
         aligned(p.base) && aligned(p.cache);
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

FusedStepParams common_params(const MarkovHead& head, const MarkovBatch& batch, MarkovWorkspace& ws,
                              const StepLaunch& l) {
  FusedStepParams p{};
  p.w1 = head.w1;
  p.temperatures = batch.temperatures;
  p.seeds = batch.seeds;
  p.anchor_positions = batch.anchor_positions;
  p.cache_slots = batch.cache_slots;
  p.noise_bound = ws.noise_bound.data();
  p.transform = head.transform;
  p.rows = batch.rows;
  p.steps = batch.steps;
  p.stages = l.stages;
  return p;
}

void check_batch(const char* op, const MarkovHead& head, const MarkovBatch& batch,
                 const MarkovWorkspace& ws) {
  require(head.vocab == ws.vocab() && head.markov_rank == ws.markov_rank(), op,
          "head (vocab " + std::to_string(head.vocab) + ", rank " +
              std::to_string(head.markov_rank) + ") does not match the workspace (vocab " +
              std::to_string(ws.vocab()) + ", rank " + std::to_string(ws.markov_rank()) + ")");
  require(
      batch.rows >= 0 && batch.rows <= ws.max_rows(), op,
      "rows " + std::to_string(batch.rows) + " not in [0, " + std::to_string(ws.max_rows()) + "]");
  require(
      batch.steps >= 1 && batch.steps <= ws.steps(), op,
      "steps " + std::to_string(batch.steps) + " not in [1, " + std::to_string(ws.steps()) + "]");
  require(head.w1 != nullptr, op, "head.w1 must not be null");
  require(batch.anchor_tokens != nullptr && batch.anchor_positions != nullptr &&
              batch.seeds != nullptr && batch.temperatures != nullptr &&
              batch.cache_slots != nullptr && batch.draft_tokens != nullptr &&
              batch.cache != nullptr,
          op, "the batch's row arrays, draft_tokens and cache must not be null");
}

void launch_anchor(const MarkovHead& head, const MarkovBatch& batch, MarkovWorkspace& ws,
                   cudaStream_t stream) {
  anchor_kernel<<<batch.rows, 128, 0, stream>>>(
      batch.anchor_tokens, head.w1, head.markov_rank, ws.embeds.data(), ws.arrivals.data(),
      ws.known.data(), ws.row_best.data(), static_cast<int>(ws.arrivals.size()));
  SD_CHECK_LAUNCH();
}

}  // namespace

int prepare_fused_kernels(int rank, int max_smem) {
  int blocks = 0;
  for (const int epl : {1, 2, 4, 8}) {
    const StepKernel k = step_kernel(rank, epl);
    SD_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
    int b = 0;
    SD_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, k, kFusedThreads, 0));
    blocks = blocks == 0 ? b : std::min(blocks, b);
  }
  return blocks;
}

}  // namespace markov_detail

using namespace markov_detail;

void fused_markov_loop(const MarkovHead& head, const MarkovBatch& batch, MarkovWorkspace& ws,
                       cudaStream_t stream) {
  MarkovPlanInput plan;
  plan.vocab = head.vocab;
  plan.markov_rank = head.markov_rank;
  plan.max_rows = ws.max_rows();
  plan.w1 = head.w1;
  plan.w2 = head.w2;
  const std::string refusal = fused_refusal(plan, ws.max_smem(), ws.smem_per_sm());
  require(refusal.empty(), "fused_markov_loop", "the fused loop does not run here: " + refusal);
  require(ws.tp_size() == 1, "fused_markov_loop",
          "the workspace has " + std::to_string(ws.tp_size()) + " shards; use VocabParallelMarkov");
  check_batch("fused_markov_loop", head, batch, ws);
  require(head.w2 != nullptr && batch.base_logits != nullptr, "fused_markov_loop",
          "head.w2 and base_logits must not be null");
  if (batch.rows == 0) return;

  const StepLaunch l = plan_step(ws, batch.rows, head.vocab);
  const int64_t n = batch.steps, v = head.vocab,
                row_k = static_cast<int64_t>(batch.rows) * head.markov_rank;
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
    p.known = ws.known.data() + static_cast<int64_t>(j) * ws.max_rows();
    p.row_best = ws.row_best.data() + static_cast<int64_t>(j) * ws.max_rows();
    p.width = head.vocab;
    p.step = j;
    p.id_offset = 0;
    p.reverse = ws.alternate_direction() && (j % 2 == 1);
    p.vec_io = vec_io(p);
    launch_step(l, p, stream);
  }
}

void VocabParallelMarkov::run(const MarkovBatch& batch, std::span<const MarkovShard> local,
                              cudaStream_t stream) {
  const std::vector<int> shards = comm_.local_ranks();
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

  const int s_count = ws_.tp_size(), width = ws_.shard_width(), rows = batch.rows;
  const int64_t n = batch.steps, row_k = static_cast<int64_t>(rows) * head_.markov_rank;
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
      p.arrivals =
          ws_.arrivals.data() + (static_cast<int64_t>(s) * ws_.steps() + j) * ws_.max_rows();
      p.known = ws_.known.data() + (static_cast<int64_t>(s) * ws_.steps() + j) * ws_.max_rows();
      p.row_best =
          ws_.row_best.data() + (static_cast<int64_t>(s) * ws_.steps() + j) * ws_.max_rows();
      p.width = width;
      p.step = j;
      p.id_offset = s * width;
      p.reverse = ws_.alternate_direction() && (j % 2 == 1);
      p.vec_io = vec_io(p);
      launch_step(l, p, stream);
      sends[i] = p.packets;
    }
    comm_.all_gather(sends.data(), ws_.packets_recv.data(), rows * sizeof(MarkovPacket), stream);
    pick_kernel<<<rows, kWarp, 0, stream>>>(ws_.packets_recv.data(), s_count, rows, head_.w1,
                                            head_.markov_rank, batch.draft_tokens + j, batch.steps,
                                            ws_.embeds.data() + (j + 1) * row_k);
    SD_CHECK_LAUNCH();
  }
  // The cache slices: [rows][steps][width] of every shard -> the full cache.
  for (size_t i = 0; i < local.size(); ++i)
    sends[i] = ws_.shard_cache.data() + shards[i] * shard_cache_len;
  comm_.all_gather(sends.data(), ws_.gathered_cache.data(),
                   static_cast<size_t>(rows) * batch.steps * width * sizeof(bf16), stream);
  const dim3 grid(rows * batch.steps, s_count);
  if (width % 8 == 0 && head_.vocab % 8 == 0 && reinterpret_cast<uintptr_t>(batch.cache) % 16 == 0)
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
