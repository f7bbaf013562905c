// The fused Markov loop (contract.md section 5) and its vocab-parallel form (section 6):
// the step kernel, assembled from its parts, its small companions and the host
// launches.
//
// Per step ONE kernel over the vocabulary. Block b walks a contiguous run of vocab
// tiles through a shared-memory ring (ring.cuh); per tile, phase A computes the
// bias of the tile's entries for every row on the tensor cores (compute.cuh), and
// every fused_epilogue_tiles tiles phase B runs the epilogue over the staged bias
// (epilogue.cuh: logits, cache store, Philox and the noise bracket, the survivor
// queue, the block's best); at the end the tail (tail.cuh) folds the block's bests
// into the rows' and the last block of a row writes its token and next embedding
// (or, in a vocab shard, its packet). The constants and the shared-memory layout
// are in tile.h, the parameters in params.h.
//
// Launch: the step kernels use programmatic dependent launch (common/launch.h).
// Everything before griddepcontrol.wait touches only w2 (static): the ring prologue
// of step j+1 overlaps the tail of step j. Blocks trigger their dependents when
// their vocab walk is done.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/common/launch.h"
#include "cuda/common/ptx.cuh"
#include "cuda/markov/detail.h"
#include "cuda/markov/device.cuh"
#include "cuda/markov/fused/compute.cuh"
#include "cuda/markov/fused/epilogue.cuh"
#include "cuda/markov/fused/params.h"
#include "cuda/markov/fused/ring.cuh"
#include "cuda/markov/fused/smem.cuh"
#include "cuda/markov/fused/tail.cuh"
#include "cuda/markov/markov.h"
#include "cuda/markov/tile.h"
#include "sparkdraft/core/philox.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {
namespace markov_detail {
namespace {

template <int K, int kEpl>
__global__ void __launch_bounds__(kFusedThreads, 2) fused_step_kernel(const FusedStepParams p) {
  constexpr int kTileV = fused_tile_vocab(K);
  static_assert(K % 16 == 0 && kTileV % 16 == 0);

  extern __shared__ __align__(16) unsigned char smem[];
  const FusedSmemLayout lay = fused_smem_layout(p.rows, K, p.stages);
  const FusedSmem s = carve_smem(smem, lay);
  const bf16* e_s = reinterpret_cast<const bf16*>(s.e);

  const int tid = threadIdx.x, lane = tid % kWarp, warp = tid / kWarp;
  const TileWalk walk = tile_walk<K>(p);
  const int e_tiles = fused_epilogue_tiles(p.rows, K);
  const int width = e_tiles * kTileV;  // staging row length
  const int n_tiles = (p.rows + 7) / 8;

  // Prologue: only static data (w2, the noise bounds), so it may overlap the
  // previous kernel.
  ring_prologue<K>(p, walk, s.ring, tid);
  load_noise_bounds(p, s.noise_b, tid);
  grid_dependency_wait();

  // This step's rows: embeddings, temperatures, step seeds, cache rows.
  load_embeddings<K>(p, s.e, n_tiles, tid);
  load_rows(p, s, tid);

  // Lane slots of the epilogue (phase B below): kEpl consecutive entries of one row
  // (kEpl = fused_entries_per_lane: 8 from 8 rows, fewer below so that every warp has
  // slots); slot q of the staged block is row q / slots_per_row, entries kEpl (q %
  // slots_per_row) ..; a warp takes 32 slots at a time: 32 / group rows of `group` lanes.
  const int slots_per_row = width / kEpl;  // a power of two (ranks are)
  const int row_shift = __ffs(slots_per_row) - 1;
  const int group = slots_per_row < kWarp ? slots_per_row : kWarp;  // lanes per row
  // Lane slot qs of an epilogue at iteration `it` (staged tile `slot`): its row, first
  // staged entry, first id and entry count. Staged tile j of the epilogue's group was
  // staged at iteration it - slot + j.
  struct LaneSlot {
    int r, x0, v0, n;
    bool active;
  };
  auto lane_slot = [&](int qs, int it, int slot) {
    LaneSlot q;
    q.r = qs >> row_shift;
    q.x0 = (qs & (slots_per_row - 1)) * kEpl;
    q.active = q.r < p.rows && q.x0 < (slot + 1) * kTileV;
    q.v0 = q.active ? tile_at(p, walk, it - slot + q.x0 / kTileV) * kTileV + q.x0 % kTileV : 0;
    q.n = q.active ? (p.width - q.v0 < kEpl ? p.width - q.v0 : kEpl) : 0;  // entries < width
    return q;
  };

  SurvivorQueue queue{s.queue, 0};
  int rd_stage = 0, wr_stage = p.stages - 1;  // it % stages, (it + stages - 1) % stages
  // The grid-wide bound of row tid (rows past the block size read theirs in
  // merge_known_bounds), loaded at the first iteration of each epilogue's group of tiles
  // and merged after the group's last phase A: one hot address a row for the whole grid,
  // so its load takes long, and where it was issued just before that phase A (with more
  // than one tile a group) thread tid's warp, and with it the block at the barrier after
  // phase A, waited for it (ncu 2026-12-07e run 1: 19% of the samples at 8 rows).
  int known_g = 0;
  for (int it = 0; it < walk.count; ++it) {
    ring_wait(p);
    ring_issue<K>(p, walk, s.ring, it + p.stages - 1, wr_stage, tid);
    wr_stage = next_stage(p, wr_stage);
    const int slot = it & (e_tiles - 1);  // it % e_tiles (a power of two)
    const bool epilogue_now = slot == e_tiles - 1 || it == walk.count - 1;
    if (slot == 0 && tid < p.rows) known_g = ld_volatile(p.known + tid);
    // The base logits of this warp's first epilogue pass, requested before phase A.
    BasePrefetch pre{make_uint4(0u, 0u, 0u, 0u), false};
    if (epilogue_now) {
      const LaneSlot q = lane_slot(warp * kWarp + lane, it, slot);
      pre = prefetch_base<kEpl>(p, q.active, q.r, q.v0, q.n);
    }

    // ---- phase A: the bias of this tile's entries for every row, as MMA chains ----
    compute_bias<K>(p, ring_stage<K>(s.ring, rd_stage), e_s, s.staging, slot, width, n_tiles, warp,
                    lane);
    rd_stage = next_stage(p, rd_stage);
    if (!epilogue_now) continue;
    merge_known_bounds(p, s.known_s, known_g, tid);

    // ---- phase B: the epilogue over the staged tiles (epilogue.cuh), lane slots as
    // lane_slot says. (This loop stays in the kernel body: as a function of its own
    // the compiler schedules the whole kernel differently and the register count of
    // some instantiations changes.)
    __syncthreads();
    {
      for (int q0 = warp * kWarp; q0 < p.rows * slots_per_row; q0 += kFusedWarps * kWarp) {
        const int qs = q0 + lane;
        const LaneSlot q = lane_slot(qs, it, slot);
        const bool active = q.active;
        const int x0 = q.x0, v0 = q.v0, n = q.n;
        const int rr = active ? q.r : 0;
        const float t = s.temp[rr];
        const bool noised = t > 0.0f;
        const uint32_t sd = s.seed[rr];
        float lv[kEpl];
#pragma unroll
        for (int i = 0; i < kEpl; ++i) lv[i] = 0.0f;
        if (n > 0)
          load_logits<kEpl>(p, rr, v0, n, s.staging + rr * width + x0, s.cache_row[rr], lv,
                            q0 == warp * kWarp ? pre : BasePrefetch{pre.raw, false});
        MarkovCandidate cand = no_candidate();
        float lo = __int_as_float(static_cast<int>(0xff800000u));  // -inf
        const float k0 = key_value(ld_volatile(s.known_s + rr));
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
          // Pass 0, the slot's cut (epilogue.cuh slot_below): when even the slot's
          // largest logit with the largest noise the sampler draws stays below the
          // row's known bound, no entry of the slot can win; it needs no Philox draw.
          if (slot_below<kEpl>(lv, n, y, t, k0)) {
#pragma unroll
            for (int i = 0; i < kEpl; ++i)
              u[i] = 0.0f, zhi[i] = __int_as_float(static_cast<int>(0xff800000u));  // -inf
          } else {
            // The kEpl draws first, nothing between them, so that their Philox chains
            // interleave; then the brackets, branch-free. (A branch between two draws,
            // the `i < n` of each bracket, cut them into regions the scheduler does not
            // mix: each draw's ten rounds ran as one dependent chain, ncu 2026-12-07d
            // run 1.)
#pragma unroll
            for (int i = 0; i < kEpl; ++i)
              u[i] = philox_uniform_u32(sd, static_cast<uint32_t>(v0 + i + p.id_offset));
#pragma unroll
            for (int i = 0; i < kEpl; ++i) {
              const Bracket bz = score_bracket(lv[i], y, u[i], s.noise_b);
              zhi[i] = bz.hi;
              const bool in = i < n, fine = bracket_ok(lv[i], y, t);
              lo = in && fine ? fmaxf(lo, bz.lo) : lo;
              exact |= in && !fine ? 1u << i : 0u;
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
        if (active && qs % group == 0) {
          if (cand.id != 0x7fffffff) atomicMax(s.best + rr, pack_candidate(cand));
          const float kb = cand.value == cand.value ? fmaxf(lo, cand.value) : lo;
          if (kb > k0 && kb == kb) atomicMax(s.known_s + rr, order_key(kb));
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
          if (queue.count + total > kQueue) flush(queue, s, lane);
          if (total > kQueue) {
            // More than a queue in one pass: score this pass's survivors in rounds.
            int done = 0;
            while (done < total) {
              enqueue_survivors<kEpl, true>(p, queue.slots, surv, incl - cnt - done, rr, v0, lv, u);
              queue.count = total - done < kQueue ? total - done : kQueue;
              flush(queue, s, lane);
              done += kQueue;
            }
          } else {
            enqueue_survivors<kEpl, false>(p, queue.slots, surv, queue.count + incl - cnt, rr, v0,
                                           lv, u);
            queue.count += total;
          }
        }
        __syncwarp();  // a later pass's group leader may be another lane
      }
    }
    // The next iteration's __syncthreads orders these staging reads before new writes.
  }
  flush(queue, s, lane);
  launch_dependents();  // the vocab walk is done: the next step may start its prologue
  __syncthreads();
  step_tail<K>(p, s.best, s.last, tid, warp, lane);
}

// Step 0's embeddings w1[anchor] and zeroed arrival counters.
__global__ void anchor_kernel(const int64_t* anchors, const bf16* w1, int rank, bf16* embeds,
                              uint32_t* arrivals, int* known, unsigned long long* row_best,
                              int arrivals_len) {
  pdl_enter();
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
  pdl_enter();
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
__global__ void cache_fill_kernel(const bf16* gathered, const int64_t* cache_slots,
                                  const int32_t* lengths, int rows, int steps, int width, int vocab,
                                  bf16* cache) {
  pdl_enter();
  const int rj = blockIdx.x;  // r * steps + j
  const int s = blockIdx.y;
  const int j = rj % steps;
  const int64_t slot = ops::step_slot(cache_slots, lengths, rj / steps, j);
  if (slot < 0) return;
  const bf16* src = gathered + (static_cast<int64_t>(s) * rows * steps + rj) * width;
  bf16* dst = cache + (slot * steps + j) * vocab + static_cast<int64_t>(s) * width;
  if constexpr (kVec == 8) {
    for (int x = threadIdx.x; x < width / 8; x += blockDim.x)
      reinterpret_cast<uint4*>(dst)[x] = reinterpret_cast<const uint4*>(src)[x];
  } else {
    for (int x = threadIdx.x; x < width; x += blockDim.x) dst[x] = src[x];
  }
}

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
  launch_kernel(
      "markov_fused_step_kernel", l.kernel,
      LaunchShape{l.grid, dim3(kFusedThreads), static_cast<size_t>(l.smem), stream, l.pdl}, p);
}

FusedStepParams common_params(const MarkovHead& head, const MarkovBatch& batch, MarkovWorkspace& ws,
                              const StepLaunch& l) {
  FusedStepParams p{};
  p.w1 = head.w1;
  p.temperatures = batch.rows.temperatures;
  p.seeds = batch.rows.seeds;
  p.anchor_positions = batch.rows.anchor_positions;
  p.cache_slots = batch.rows.cache_slots;
  p.lengths = batch.rows.lengths;
  p.noise_bound = ws.noise_bound.data();
  p.transform = head.transform;
  p.rows = batch.rows.num_rows;
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
  require(batch.rows.num_rows >= 0 && batch.rows.num_rows <= ws.max_rows(), op,
          "rows " + std::to_string(batch.rows.num_rows) + " not in [0, " +
              std::to_string(ws.max_rows()) + "]");
  require(
      batch.steps >= 1 && batch.steps <= ws.steps(), op,
      "steps " + std::to_string(batch.steps) + " not in [1, " + std::to_string(ws.steps()) + "]");
  require(head.w1 != nullptr, op, "head.w1 must not be null");
  require(batch.rows.anchor_tokens != nullptr && batch.rows.anchor_positions != nullptr &&
              batch.rows.seeds != nullptr && batch.rows.temperatures != nullptr &&
              batch.rows.cache_slots != nullptr && batch.draft_tokens != nullptr &&
              batch.cache != nullptr,
          op, "the batch's row arrays, draft_tokens and cache must not be null");
}

void launch_anchor(const MarkovHead& head, const MarkovBatch& batch, MarkovWorkspace& ws,
                   cudaStream_t stream) {
  launch_kernel("markov_anchor_kernel", anchor_kernel,
                LaunchShape{dim3(batch.rows.num_rows), dim3(128), 0, stream, false},
                batch.rows.anchor_tokens, head.w1, head.markov_rank, ws.embeds.data(),
                ws.arrivals.data(), ws.known.data(), ws.row_best.data(),
                static_cast<int>(ws.arrivals.size()));
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
  plan.draft_vocab = head.draft_vocab;
  plan.topk = head.topk;
  plan.head_type = head.head_type;  // the variants the fused step does not run are refused
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
  if (batch.rows.num_rows == 0) return;

  const StepLaunch l = plan_step(ws, batch.rows.num_rows, head.vocab);
  const int64_t n = batch.steps, v = head.vocab,
                row_k = static_cast<int64_t>(batch.rows.num_rows) * head.markov_rank;
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
  markov_truncate_tokens(batch.rows, batch.steps, batch.draft_tokens, stream);
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
  if (batch.rows.num_rows == 0) return;

  const int s_count = ws_.tp_size(), width = ws_.shard_width(), rows = batch.rows.num_rows;
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
    launch_kernel("markov_pick_kernel", pick_kernel,
                  LaunchShape{dim3(rows), dim3(kWarp), 0, stream}, ws_.packets_recv.data(), s_count,
                  rows, head_.w1, head_.markov_rank, batch.draft_tokens + j, batch.steps,
                  ws_.embeds.data() + (j + 1) * row_k);
  }
  // The cache slices: [rows][steps][width] of every shard -> the full cache.
  for (size_t i = 0; i < local.size(); ++i)
    sends[i] = ws_.shard_cache.data() + shards[i] * shard_cache_len;
  comm_.all_gather(sends.data(), ws_.gathered_cache.data(),
                   static_cast<size_t>(rows) * batch.steps * width * sizeof(bf16), stream);
  const dim3 grid(rows * batch.steps, s_count);
  if (width % 8 == 0 && head_.vocab % 8 == 0 && reinterpret_cast<uintptr_t>(batch.cache) % 16 == 0)
    launch_kernel("markov_cache_fill_kernel", cache_fill_kernel<8>,
                  LaunchShape{dim3(grid), dim3(256), 0, stream}, ws_.gathered_cache.data(),
                  batch.rows.cache_slots, batch.rows.lengths, rows, batch.steps, width, head_.vocab,
                  batch.cache);
  else
    launch_kernel("markov_cache_fill_kernel", cache_fill_kernel<1>,
                  LaunchShape{dim3(grid), dim3(256), 0, stream}, ws_.gathered_cache.data(),
                  batch.rows.cache_slots, batch.rows.lengths, rows, batch.steps, width, head_.vocab,
                  batch.cache);
  markov_truncate_tokens(batch.rows, batch.steps, batch.draft_tokens, stream);
}

}  // namespace sparkdraft::cuda
