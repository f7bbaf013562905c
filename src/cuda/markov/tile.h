// Every constant of the fused Markov step kernel, defined once, and its dynamic
// shared-memory layout: the kernel carves its memory with the same function the host
// sizes the launch with (plan.cpp fused_step_shape). Included by host code too.
#pragma once

#include <cstdint>

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/hd.h"

namespace sparkdraft::cuda::markov_detail {

inline constexpr int kWarp = 32;  // threads per warp (also the eager kernels')
inline constexpr int kFusedThreads = 256;
inline constexpr int kFusedWarps = kFusedThreads / kWarp;
inline constexpr int kMinRank = 16;  // one k16 step of the tensor-core chain
inline constexpr int kMaxRank = 1024;
inline constexpr int kMaxStages = 4;
inline constexpr int kMaxBlocksPerSm = 2;  // the block table's largest residency
inline constexpr int kMaxEpilogueTiles = 64;

// Vocab entries per ring tile: 64 up to rank 256, then 16384 / rank (a 32 KB
// stage at rank >= 256), always whole 16-entry m-tiles.
SD_HD constexpr int fused_tile_vocab(int rank) { return rank <= 256 ? 64 : 16384 / rank; }

// Entries per lane slot of the fused epilogue: 8 from 16 rows on (16-byte I/O, 8
// interleaved Philox chains), fewer below so that all 8 warps have slots without a
// large staging buffer.
SD_HD constexpr int fused_entries_per_lane(int rows) {
  return rows >= 16 ? 8 : rows >= 4 ? 4 : rows >= 2 ? 2 : 1;
}

// Tiles whose bias is staged before the epilogue runs over them: the smallest power
// of two that gives every thread of the block a slot (rows * width >= entries per
// lane * 256). A row's slots are then a power of two (the epilogue's lane groups).
SD_HD constexpr int fused_epilogue_tiles(int rows, int rank) {
  const int tile_v = fused_tile_vocab(rank);
  int tiles = 1;
  while (tiles < kMaxEpilogueTiles &&
         rows * tiles * tile_v < fused_entries_per_lane(rows) * kFusedThreads)
    tiles *= 2;
  return tiles;
}

// Row stride (elements) of the embeddings in shared memory: rank + 8, so that the
// 8 rows of an n-tile fall in different banks for the B fragment loads.
SD_HD constexpr int fused_e_stride(int rank) { return rank + 8; }

// Position of 16-byte chunk c of ring row v: XOR-swizzled by the row (at most 8
// chunks apart), so the 8 rows an ldmatrix phase reads hit 8 different bank groups.
template <int K>
SD_HD int fused_ring_chunk(int v, int c) {
  constexpr int kMask = K / 8 >= 8 ? 7 : K / 8 - 1;
  return c ^ (v & kMask);
}

// Bounds of the Gumbel noise by u: g is non-increasing in u (log and log1p are correctly
// rounded, hence monotone), so g(u) <= g(lowest u of u's bucket). Buckets are the
// top 5 mantissa bits of each binade of u in [2^-32, 1): 1024 of them.
inline constexpr int kNoiseBuckets = 1024;
inline constexpr uint32_t kNoiseBucketBase = 0x2F800000u;  // bits of 2^-32
inline constexpr int kNoiseBucketShift = 18;               // 23 - 5 mantissa bits
SD_HD int noise_bucket(float u) {
  return static_cast<int>((f32_bits(u) - kNoiseBucketBase) >> kNoiseBucketShift);
}

// The matching lower bound: every u of bucket b lies below the lowest u of bucket
// b + 1, so g(u) >= noise_bound[b + 1]; the last bucket ends at the largest u the
// sampler draws (1 - 2^-24), where g = -2.81, so kNoiseFloor bounds it from below.
inline constexpr float kNoiseFloor = -4.0f;

// The survivor queue of the epilogue (smem.cuh Survivor): entries per warp, bytes each.
inline constexpr int kQueue = 16;
inline constexpr int kSurvivorBytes = 16;

SD_HD int align16(int bytes) { return (bytes + 15) / 16 * 16; }

// Byte offsets of the fused step's dynamic shared memory.
struct FusedSmemLayout {
  int ring;       // [stages][tile_vocab][rank] bf16: the w2 tiles
  int e;          // [rows rounded up to 8][rank + 8] bf16: this step's embeddings
  int staging;    // [rows][epilogue_tiles * tile_vocab] bf16: staged bias
  int best;       // [rows] u64: the block's best per row, packed (epilogue.cuh pack_candidate)
  int cache_row;  // [rows] int64: cache row index, -1 = no store
  int temp;       // [rows] fp32 temperature
  int seed;       // [rows] uint32 step seed
  int last;       // [rows] int32: this block reduces the row
  int known;      // [rows] int32: ordered key of a lower bound of the row's best z
  int noise;      // [kNoiseBuckets + 1] fp32: noise_bound_table(), then kNoiseFloor
  int queue;      // [8 warps][kQueue] survivors waiting for their exact score (smem.cuh)
  int total;
};

SD_HD FusedSmemLayout fused_smem_layout(int rows, int rank, int stages) {
  const int tile_v = fused_tile_vocab(rank);
  const int width = fused_epilogue_tiles(rows, rank) * tile_v;
  FusedSmemLayout l{};
  int off = 0;
  l.ring = off;
  off += stages * fused_tile_vocab(rank) * rank * 2;
  l.e = off;
  off += align16((rows + 7) / 8 * 8 * fused_e_stride(rank) * 2);
  l.staging = off;
  off += align16(rows * width * 2);
  l.best = off;
  off += rows * 8;
  l.cache_row = off;
  off += rows * 8;
  l.temp = off;
  off += align16(rows * 4);
  l.seed = off;
  off += align16(rows * 4);
  l.last = off;
  off += align16(rows * 4);
  l.known = off;
  off += align16(rows * 4);
  l.noise = off;
  off += align16((kNoiseBuckets + 1) * 4);
  l.queue = off;
  off += kFusedWarps * kQueue * kSurvivorBytes;
  l.total = align16(off);
  return l;
}

}  // namespace sparkdraft::cuda::markov_detail
