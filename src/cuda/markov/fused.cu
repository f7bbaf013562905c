// The fused Markov loop (SPEC section 5) and its vocab-parallel form (section 6).
//
// Per step ONE kernel over the vocabulary. Block b walks a contiguous run of
// vocab tiles (tile = 256 / tpv entries, all rank columns of w2), streamed into a
// shared-memory ring with 16-byte cp.async, so w2 is read once per step for all
// rows. Per tile:
//   phase A (bias): g = tpv * E consecutive threads share E entries (register
//     blocking, E = fused_entries_per_thread); thread q owns the canonical lanes
//     q, q + g, ... (core/reduce.h) of all E entries, keeps its chunks of w2 in
//     registers as fp32 and, for every row, runs its lanes' fma chains over the
//     row's embedding (shared memory; each chunk loaded once feeds E entries),
//     the butterfly levels 16 .. g inside the thread, the levels g/2 .. tpv as
//     xor shuffles that halve the entries a thread holds (each thread keeps one
//     half, sends the other) and the levels tpv/2 .. 1 as plain xor shuffles:
//     exactly the canonical sum. The bias (rounded to bf16) goes to a staging buffer.
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

template <int K, bool kEF32>
__global__ void __launch_bounds__(kFusedThreads, 2) fused_step_kernel(const FusedStepParams p) {
  constexpr int kTpv = K <= 256 ? 4 : K / 64;  // fused_threads_per_entry
  constexpr int kTileV = kFusedThreads / kTpv;
  constexpr int kChunks = K / 8;
  // Register blocking of phase A: a group of kGroup = kTpv * kE threads shares kE
  // entries, so every embedding chunk a thread loads feeds kE entries (the shared
  // memory traffic per (entry, row) drops kE-fold). The w2 registers per thread
  // stay kChunks * 8 / kTpv floats.
  constexpr int kE = fused_entries_per_thread(K);
  constexpr int kGroup = kTpv * kE;
  constexpr int kCpt = kChunks >= kGroup ? kChunks / kGroup : 1;  // chunks per thread and entry
  constexpr int kAcc = 32 / kGroup;                               // canonical lanes per thread
  constexpr int kTileElems = kTileV * K;
  static_assert(kCpt * kE <= 8 && kTpv * kTileV == kFusedThreads && kGroup <= 32);

  extern __shared__ __align__(16) unsigned char smem[];
  const FusedSmemLayout lay = fused_smem_layout(p.rows, K, p.stages, kEF32);
  bf16* ring = reinterpret_cast<bf16*>(smem + lay.ring);
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
  const int q = tid % kGroup, group = tid / kGroup;
  const int total_tiles = (p.width + kTileV - 1) / kTileV;
  const int t_begin = static_cast<int>(static_cast<int64_t>(blockIdx.x) * total_tiles / gridDim.x);
  const int t_end =
      static_cast<int>(static_cast<int64_t>(blockIdx.x + 1) * total_tiles / gridDim.x);
  const int ntiles = t_end - t_begin;
  const int e_tiles = fused_epilogue_tiles(p.rows, K);
  const int width = e_tiles * kTileV;  // staging row length

  auto tile_at = [&](int it) { return p.reverse ? t_end - 1 - it : t_begin + it; };
  // Queues tile `it` into its ring stage; always commits (maybe an empty group) so
  // every thread counts the same groups.
  auto issue = [&](int it) {
    if (it < ntiles) {
      const int t = tile_at(it);
      bf16* dst = ring + (it % p.stages) * kTileElems;
      const bf16* src = p.w2 + static_cast<int64_t>(t) * kTileElems;
      for (int x = tid; x < kTileElems / 8; x += kFusedThreads) {
        const bool ok = t * kTileV + x / kChunks < p.width;
        cp_async_16(dst + x * 8, ok ? src + x * 8 : p.w2, ok ? 16 : 0);
      }
    }
    cp_async_commit();
  };

  // Prologue: only static data (w2, the noise bounds), so it may overlap the
  // previous kernel.
  for (int s = 0; s < p.stages - 1; ++s) issue(s);
  for (int b = tid; b < kNoiseBuckets; b += kFusedThreads) noise_hi[b] = p.noise_bound[b];
  grid_dependency_wait();

  // This step's rows: embeddings, temperatures, step seeds, cache rows.
  for (int x = tid; x < p.rows * kChunks; x += kFusedThreads) {
    const uint4 raw = reinterpret_cast<const uint4*>(p.embeds_in)[x];
    if constexpr (kEF32) {
      // Split halves: a thread's two float4 of chunk c lie at c and K/8 + c of the
      // row, so consecutive threads read consecutive 16 bytes (no bank conflicts).
      float v[8];
      unpack8(raw, v);
      float4* dst = reinterpret_cast<float4*>(smem + lay.e) + (x / kChunks) * (K / 4) + x % kChunks;
      dst[0] = make_float4(v[0], v[1], v[2], v[3]);
      dst[K / 8] = make_float4(v[4], v[5], v[6], v[7]);
    } else {
      reinterpret_cast<uint4*>(smem + lay.e)[x] = raw;
    }
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

    // ---- phase A: bias of this tile's entries group * kE + j for every row ----
    // Thread q owns the canonical lanes q, q + kGroup, ... of all kE entries.
    const bf16* wrow = ring + (it % p.stages) * kTileElems + group * kE * K;
    float w[kE][kCpt][8];
#pragma unroll
    for (int j = 0; j < kE; ++j)
#pragma unroll
      for (int i = 0; i < kCpt; ++i) {
        const int c = q + kGroup * i;
        if (kChunks >= kGroup || c < kChunks)
          unpack8(*reinterpret_cast<const uint4*>(wrow + j * K + c * 8), w[j][i]);
      }
    // After the exchange levels below, this thread holds the sum of entry `mine`.
    int mine = 0;
#pragma unroll
    for (int off = kGroup / 2, h = kE / 2; h > 0; off /= 2, h /= 2)
      if (q & off) mine += h;
#pragma unroll 2
    for (int r = 0; r < p.rows; ++r) {
      float acc[kE][kAcc];
#pragma unroll
      for (int j = 0; j < kE; ++j)
#pragma unroll
        for (int m = 0; m < kAcc; ++m) acc[j][m] = 0.0f;
#pragma unroll
      for (int i = 0; i < kCpt; ++i) {
        const int c = q + kGroup * i;  // canonical lane c % 32 = q + kGroup * (i % kAcc)
        if (kChunks >= kGroup || c < kChunks) {
          float x[8];
          if constexpr (kEF32) {
            const float4* src = reinterpret_cast<const float4*>(smem + lay.e) + r * (K / 4) + c;
            const float4 a = src[0], b = src[K / 8];
            x[0] = a.x, x[1] = a.y, x[2] = a.z, x[3] = a.w;
            x[4] = b.x, x[5] = b.y, x[6] = b.z, x[7] = b.w;
          } else {
            unpack8(reinterpret_cast<const uint4*>(smem + lay.e)[(r * K + c * 8) / 8], x);
          }
#pragma unroll
          for (int j = 0; j < kE; ++j)
#pragma unroll
            for (int k = 0; k < 8; ++k)
              acc[j][i % kAcc] = __fmaf_rn(w[j][i][k], x[k], acc[j][i % kAcc]);
        }
      }
      // Butterfly levels 16 .. kGroup pair lanes of this thread (acc m and m + off).
#pragma unroll
      for (int j = 0; j < kE; ++j)
#pragma unroll
        for (int off = kAcc / 2; off > 0; off /= 2)
#pragma unroll
          for (int m = 0; m < off; ++m) acc[j][m] = __fadd_rn(acc[j][m], acc[j][m + off]);
      float v[kE];
#pragma unroll
      for (int j = 0; j < kE; ++j) v[j] = acc[j][0];
      // Levels kGroup/2 .. kTpv pair threads q and q ^ off holding kE = 2h entries
      // each: the thread with bit `off` set keeps the upper h, its partner the lower
      // h, and each sends the other half: one shuffle per kept entry, and each sum
      // is p[l] + p[l ^ off] (fp32 addition commutes: the canonical value).
#pragma unroll
      for (int off = kGroup / 2, h = kE / 2; h > 0; off /= 2, h /= 2) {
        const bool upper = (q & off) != 0;
#pragma unroll
        for (int j = 0; j < h; ++j) {
          const float send = upper ? v[j] : v[j + h];
          const float keep = upper ? v[j + h] : v[j];
          v[j] = __fadd_rn(keep, __shfl_xor_sync(0xffffffffu, send, off));
        }
      }
      float dot = v[0];
      // Levels kTpv/2 .. 1 pair the threads that hold the same entry.
#pragma unroll
      for (int off = kTpv / 2; off > 0; off /= 2)
        dot = __fadd_rn(dot, __shfl_xor_sync(0xffffffffu, dot, off));
      if (r % kTpv == q % kTpv)
        staging[r * width + slot * kTileV + group * kE + mine] = to_bf16(dot);
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

template <int K>
StepKernel step_kernel_for(bool e_f32) {
  return e_f32 ? fused_step_kernel<K, true> : fused_step_kernel<K, false>;
}

StepKernel step_kernel(int rank, bool e_f32) {
  switch (rank) {
    case 8: return step_kernel_for<8>(e_f32);
    case 16: return step_kernel_for<16>(e_f32);
    case 32: return step_kernel_for<32>(e_f32);
    case 64: return step_kernel_for<64>(e_f32);
    case 128: return step_kernel_for<128>(e_f32);
    case 256: return step_kernel_for<256>(e_f32);
    case 512: return step_kernel_for<512>(e_f32);
    case 1024: return step_kernel_for<1024>(e_f32);
    default: break;
  }
  throw InvalidArgument("cuda::fused_markov_loop: rank " + std::to_string(rank) +
                        " has no fused kernel (a power of two in [8, 1024])");
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
  return StepLaunch{step_kernel(ws.rank(), l.shape.e_f32), dim3(l.grid), l.shape.smem_bytes,
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

void prepare_fused_kernels(int rank, int max_smem, int reg_blocks[2]) {
  for (int f = 0; f < 2; ++f) {
    const StepKernel k = step_kernel(rank, f == 1);
    SD_CUDA_CHECK(cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, max_smem));
    SD_CUDA_CHECK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&reg_blocks[f], k, kFusedThreads, 0));
  }
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
