// Attention over the paged KV cache: ops/attention.h's definition on the tensor
// cores, bit for bit cpu::attention.
//
// Rows. A CTA owns the query rows of up to kMaxRows = 64 (tokens x grouped heads)
// that read one KV head: a piece of at most 64 / group consecutive tokens of one
// request (grid x: one CTA per token; only the first token of each piece runs, the
// others exit), and one KV head (grid y). Row i is token t0 + i / group, head
// kvh * group + i % group.
// Chunks. The CTA walks the union of its rows' chunk ranges, or, with `splits` > 1
// (grid z), its z-th contiguous share of that union. Per chunk (64 positions):
//   * K and V of the 64 positions land in shared memory by 16-byte cp.async (a ring
//     of 2 or 3 stages, so that 1 or 2 chunks are in flight while one is computed);
//     positions >= kv_len or on an unmapped page are zero-filled, the columns past
//     head_dim are zero;
//   * scores: mma.m16n8k16 chains, A = query rows (ldmatrix), B = K rows
//     (ldmatrix; k = the head dimension, contiguous), chained over the head dim from
//     +0; warp w owns positions 16w .. 16w+15 for every row tile; s = d * scale;
//   * one warp per row: lane l holds slots l and l + 32, the chunk max and sum in the
//     definition's order (pair, then xor butterfly 16 .. 1), p = exp_f32(s - m),
//     pb = bf16(p) to shared memory, then the fold's scalars (lane 0);
//   * P.V: chains over the 64 positions (4 steps), A = pb rows (ldmatrix), B = V
//     (ldmatrix.trans: k = positions); warp w owns head-dim columns 16w, 16w + 64, ...
//   * splits == 1: the fold runs in registers (O) and shared memory (M, L) and the CTA
//     writes bf16(O / L); splits > 1: (m_c, l_c, o_c) go to the workspace and
//     attention_combine_kernel folds them per (token, head) in chunk order.
// Both paths are the definition's sequential fold, so every split gives the same bits.
#include <algorithm>
#include <cmath>

#include "sparkdraft/core/math.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/kernels.h"

#include "cuda/common/mma.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/eager/common.cuh"

namespace sparkdraft::cuda {
namespace {

constexpr int kChunk = ops::kAttentionChunk;  // 64
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * detail::kWarpSize;
constexpr int kMaxRows = 64;      // rows per CTA: 4 row tiles of 16
constexpr int kPLd = kChunk + 8;  // pb row stride (elements): 144 bytes
constexpr int kTargetCtas = 132;  // one wave on an H100/H200

struct AttnArgs {
  int tokens, heads, kv_heads, head_dim, hdp, ld, page_size, max_pages, window, group, tpc;
  int splits, stages;
  bool causal, vec;
  int64_t q_stride, ws_chunks;
  float scale;
  const int32_t* block_tables;
  const int32_t* token_request;
  const int64_t* positions;
  const int64_t* kv_lens;
};

// Shared memory carve-up (bytes; every section 16-byte aligned).
struct Smem {
  size_t q, kv, s, p, lo, hi, cb, ce, m, l, fa, fb, act, first, total;
};
__host__ __device__ inline size_t align16(size_t x) { return (x + 15) / 16 * 16; }
__host__ __device__ inline Smem smem_layout(int ld, int stages) {
  Smem s{};
  size_t at = 0;
  s.q = at;
  at = align16(at + sizeof(bf16) * kMaxRows * ld);
  s.kv = at;
  at = align16(at + sizeof(bf16) * static_cast<size_t>(stages) * 2 * kChunk * ld);
  s.s = at;
  at = align16(at + sizeof(float) * kMaxRows * kChunk);
  s.p = at;
  at = align16(at + sizeof(bf16) * kMaxRows * kPLd);
  s.lo = at;
  s.hi = s.lo + sizeof(int64_t) * kMaxRows;
  s.cb = s.hi + sizeof(int64_t) * kMaxRows;
  s.ce = s.cb + sizeof(int64_t) * kMaxRows;
  s.m = s.ce + sizeof(int64_t) * kMaxRows;
  s.l = s.m + sizeof(float) * kMaxRows;
  s.fa = s.l + sizeof(float) * kMaxRows;
  s.fb = s.fa + sizeof(float) * kMaxRows;
  s.act = s.fb + sizeof(float) * kMaxRows;
  s.first = s.act + sizeof(int) * kMaxRows;
  s.total = align16(s.first + sizeof(int) * kMaxRows);
  return s;
}

// The piece of consecutive same-request tokens that starts at t, or 0 tokens when t
// does not start one.
__device__ int piece_at(const AttnArgs& a, int t, int* req_out) {
  const int req = a.token_request[t];
  *req_out = req;
  if (req < 0) return 0;
  int seg = t;
  while (seg > 0 && a.token_request[seg - 1] == req) --seg;
  if ((t - seg) % a.tpc != 0) return 0;
  int n = 1;
  while (n < a.tpc && t + n < a.tokens && a.token_request[t + n] == req) ++n;
  return n;
}

// Loads chunk c's K and V (64 positions) into stage `st` (cp.async, not committed).
__device__ void load_chunk(const AttnArgs& a, const bf16* cache, const int32_t* table,
                           int64_t kv_len, int kvh, int64_t c, bf16* kv_stage) {
  const int hd = a.head_dim, ld = a.ld;
  bf16* ks = kv_stage;
  bf16* vs = kv_stage + kChunk * ld;
  if (a.vec) {
    const int units = hd / 8;  // 16-byte pieces per K (or V) row
    const int total = kChunk * 2 * units;
    for (int u = threadIdx.x; u < total; u += kThreads) {
      const int part = u % units, kv = (u / units) % 2, j = u / (2 * units);
      const int64_t pos = c * kChunk + j;
      const bf16* src = cache;
      int bytes = 0;
      if (pos < kv_len) {
        const int32_t page = table[pos / a.page_size];
        if (page >= 0) {
          const int64_t slot = static_cast<int64_t>(page) * a.page_size + pos % a.page_size;
          src = cache + (slot * a.kv_heads + kvh) * 2 * hd + kv * hd + part * 8;
          bytes = 16;
        }
      }
      cp_async_16((kv ? vs : ks) + j * ld + part * 8, src, bytes);
    }
  } else {
    const int total = kChunk * 2 * hd;
    for (int u = threadIdx.x; u < total; u += kThreads) {
      const int d = u % hd, kv = (u / hd) % 2, j = u / (2 * hd);
      const int64_t pos = c * kChunk + j;
      bf16 v{0};
      if (pos < kv_len) {
        const int32_t page = table[pos / a.page_size];
        if (page >= 0) {
          const int64_t slot = static_cast<int64_t>(page) * a.page_size + pos % a.page_size;
          v = cache[(slot * a.kv_heads + kvh) * 2 * hd + kv * hd + d];
        }
      }
      (kv ? vs : ks)[j * ld + d] = v;
    }
  }
}

// kNp: 16-column groups of the head dim per warp in P.V (head_dim padded to 16
// is at most 64 * kNp).
template <int kNp>
__global__ void __launch_bounds__(kThreads)
    attention_chunk_kernel(AttnArgs a, const bf16* q, const bf16* cache, bf16* out, float* ws_m,
                           float* ws_l, float* ws_o) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  const int t0 = blockIdx.x, kvh = blockIdx.y, split = blockIdx.z;
  const int hd = a.head_dim, hdp = a.hdp, ld = a.ld, group = a.group;
  const int lane = threadIdx.x % detail::kWarpSize, warp = threadIdx.x / detail::kWarpSize;
  const int g = lane / 4, tq = lane % 4;
  const bool fold_self = a.splits == 1;

  int req = -1;
  const int ntok = piece_at(a, t0, &req);
  if (ntok == 0) {
    if (req < 0 && fold_self && split == 0) {  // padding token: zeros
      bf16* o = out + (static_cast<int64_t>(t0) * a.heads + kvh * group) * hd;
      for (int i = threadIdx.x; i < group * hd; i += kThreads) o[i] = bf16{0};
    }
    return;
  }
  const int R = ntok * group;
  const int mt = (R + 15) / 16;

  const Smem L = smem_layout(ld, a.stages);
  bf16* qs = reinterpret_cast<bf16*>(smem_raw + L.q);
  bf16* kvs = reinterpret_cast<bf16*>(smem_raw + L.kv);
  float* ss = reinterpret_cast<float*>(smem_raw + L.s);
  bf16* ps = reinterpret_cast<bf16*>(smem_raw + L.p);
  int64_t* row_lo = reinterpret_cast<int64_t*>(smem_raw + L.lo);
  int64_t* row_hi = reinterpret_cast<int64_t*>(smem_raw + L.hi);
  int64_t* row_cb = reinterpret_cast<int64_t*>(smem_raw + L.cb);
  int64_t* row_ce = reinterpret_cast<int64_t*>(smem_raw + L.ce);
  float* row_m = reinterpret_cast<float*>(smem_raw + L.m);
  float* row_l = reinterpret_cast<float*>(smem_raw + L.l);
  float* row_fa = reinterpret_cast<float*>(smem_raw + L.fa);
  float* row_fb = reinterpret_cast<float*>(smem_raw + L.fb);
  int* row_act = reinterpret_cast<int*>(smem_raw + L.act);
  int* row_first = reinterpret_cast<int*>(smem_raw + L.first);

  const int64_t kv_len = a.kv_lens[req];
  const int32_t* table = a.block_tables + static_cast<int64_t>(req) * a.max_pages;

  // Rows: ranges, fold state; Q rows (zero past R and past head_dim); zero the K/V
  // pad columns of every stage.
  for (int i = threadIdx.x; i < kMaxRows; i += kThreads) {
    if (i < R) {
      const int t = t0 + i / group;
      const ops::AttentionRange rg =
          ops::attention_range(a.positions[t], kv_len, a.window, a.causal);
      row_lo[i] = rg.lo;
      row_hi[i] = rg.hi;
      row_cb[i] = rg.lo / kChunk;
      row_ce[i] = (rg.hi + kChunk - 1) / kChunk;
    }
    row_m[i] = -INFINITY;
    row_l[i] = 0.0f;
    row_first[i] = 1;
  }
  for (int u = threadIdx.x; u < kMaxRows * hdp; u += kThreads) {
    const int i = u / hdp, d = u % hdp;
    bf16 v{0};
    if (i < R && d < hd) {
      const int t = t0 + i / group, h = kvh * group + i % group;
      v = q[static_cast<int64_t>(t) * a.q_stride + static_cast<int64_t>(h) * hd + d];
    }
    qs[i * ld + d] = v;
  }
  if (hdp > hd)
    for (int u = threadIdx.x; u < a.stages * 2 * kChunk * (hdp - hd); u += kThreads) {
      const int row = u / (hdp - hd), d = hd + u % (hdp - hd);
      kvs[row * ld + d] = bf16{0};
    }
  __syncthreads();

  // The CTA's chunks: its share of the union of its rows' chunk ranges.
  int64_t cmin = row_cb[0], cmax = row_ce[0];
  for (int i = 1; i < R; ++i) {
    cmin = row_cb[i] < cmin ? row_cb[i] : cmin;
    cmax = row_ce[i] > cmax ? row_ce[i] : cmax;
  }
  const int64_t span = cmax - cmin;
  const int64_t per = (span + a.splits - 1) / a.splits;
  const int64_t cbeg = cmin + split * per;
  const int64_t cend = cbeg + per < cmax ? cbeg + per : cmax;
  if (cbeg >= cend) return;
  const int nchunks = static_cast<int>(cend - cbeg);

  const int stage_elems = 2 * kChunk * ld;
  for (int s = 0; s < a.stages - 1; ++s) {
    if (s < nchunks) load_chunk(a, cache, table, kv_len, kvh, cbeg + s, kvs + s * stage_elems);
    cp_async_commit();
  }

  float O[4][kNp][2][4];
#pragma unroll
  for (int mi = 0; mi < 4; ++mi)
#pragma unroll
    for (int np = 0; np < kNp; ++np)
#pragma unroll
      for (int nt = 0; nt < 2; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) O[mi][np][nt][e] = 0.0f;

  for (int ci = 0; ci < nchunks; ++ci) {
    const int64_t c = cbeg + ci;
    cp_async_wait(a.stages - 2);
    __syncthreads();
    {
      const int nxt = ci + a.stages - 1;
      if (nxt < nchunks)
        load_chunk(a, cache, table, kv_len, kvh, cbeg + nxt, kvs + (nxt % a.stages) * stage_elems);
      cp_async_commit();
    }
    const bf16* ks = kvs + (ci % a.stages) * stage_elems;
    const bf16* vs = ks + kChunk * ld;

    // Scores: warp w, positions 16w .. 16w+15 (two n8 tiles), every row tile.
    {
      float acc[4][2][4];
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) acc[mi][nt][e] = 0.0f;
      const int n0 = warp * 16;
      for (int k0 = 0; k0 < hdp; k0 += 16) {
        uint32_t b[4];
        {
          const int mi8 = lane / 8;
          const int n = n0 + (mi8 / 2) * 8 + lane % 8, k = k0 + (mi8 % 2) * 8;
          ldmatrix_x4(b, ks + n * ld + k);
        }
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
          if (mi < mt) {
            uint32_t af[4];
            const int mi8 = lane / 8;
            const int r = mi * 16 + (mi8 % 2) * 8 + lane % 8, k = k0 + (mi8 / 2) * 8;
            ldmatrix_x4(af, qs + r * ld + k);
            mma_bf16_16816(acc[mi][0], af, b, acc[mi][0]);
            mma_bf16_16816(acc[mi][1], af, b + 2, acc[mi][1]);
          }
        }
      }
#pragma unroll
      for (int mi = 0; mi < 4; ++mi) {
        if (mi < mt) {
#pragma unroll
          for (int nt = 0; nt < 2; ++nt) {
            const int col = n0 + nt * 8 + 2 * tq, r = mi * 16 + g;
            ss[r * kChunk + col] = __fmul_rn(acc[mi][nt][0], a.scale);
            ss[r * kChunk + col + 1] = __fmul_rn(acc[mi][nt][1], a.scale);
            ss[(r + 8) * kChunk + col] = __fmul_rn(acc[mi][nt][2], a.scale);
            ss[(r + 8) * kChunk + col + 1] = __fmul_rn(acc[mi][nt][3], a.scale);
          }
        }
      }
    }
    __syncthreads();

    // Softmax of the chunk, one warp per row.
    for (int i = warp; i < mt * 16; i += kWarps) {
      bf16* pr = ps + i * kPLd;
      const bool active = i < R && c >= row_cb[i] && c < row_ce[i];
      if (!active) {
        pr[lane] = bf16{0};
        pr[lane + 32] = bf16{0};
        if (lane == 0) row_act[i] = 0;
        continue;
      }
      const int64_t pos0 = c * kChunk + lane, pos1 = pos0 + 32;
      const bool u0 = pos0 >= row_lo[i] && pos0 < row_hi[i];
      const bool u1 = pos1 >= row_lo[i] && pos1 < row_hi[i];
      const float s0 = ss[i * kChunk + lane], s1 = ss[i * kChunk + lane + 32];
      float m = ops::attention_max(u0 ? s0 : -INFINITY, u1 ? s1 : -INFINITY);
      for (int off = 16; off > 0; off /= 2)
        m = ops::attention_max(m, __shfl_xor_sync(0xffffffffu, m, off));
      const float p0 = u0 ? exp_f32(__fsub_rn(s0, m)) : 0.0f;
      const float p1 = u1 ? exp_f32(__fsub_rn(s1, m)) : 0.0f;
      pr[lane] = to_bf16(p0);
      pr[lane + 32] = to_bf16(p1);
      float l = __fadd_rn(p0, p1);
      for (int off = 16; off > 0; off /= 2) l = __fadd_rn(l, __shfl_xor_sync(0xffffffffu, l, off));
      if (lane == 0) {
        const int t = t0 + i / group, h = kvh * group + i % group;
        if (fold_self) {
          float M = row_m[i], Lr = row_l[i];
          const ops::AttentionFold f = ops::attention_fold(M, Lr, m, l, row_first[i] != 0);
          row_m[i] = M;
          row_l[i] = Lr;
          row_fa[i] = f.a;
          row_fb[i] = f.b;
          row_first[i] = 0;
        } else {
          const int64_t unit =
              (static_cast<int64_t>(t) * a.heads + h) * a.ws_chunks + (c - row_cb[i]);
          ws_m[unit] = m;
          ws_l[unit] = l;
        }
        row_act[i] = 1;
      }
    }
    __syncthreads();

    // P.V: warp w, head-dim columns 16 * (w + 4 np) .. +15, every row tile.
#pragma unroll
    for (int np = 0; np < kNp; ++np) {
      const int d0 = (warp + kWarps * np) * 16;
      if (d0 < hdp) {
#pragma unroll
        for (int mi = 0; mi < 4; ++mi) {
          if (mi < mt) {
            float acc[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
#pragma unroll
            for (int k0 = 0; k0 < kChunk; k0 += 16) {
              const int mi8 = lane / 8;
              uint32_t af[4], b[4];
              ldmatrix_x4(af,
                          ps + (mi * 16 + (mi8 % 2) * 8 + lane % 8) * kPLd + k0 + (mi8 / 2) * 8);
              ldmatrix_x4_trans(b, vs + (k0 + (mi8 % 2) * 8 + lane % 8) * ld + d0 + (mi8 / 2) * 8);
              mma_bf16_16816(acc[0], af, b, acc[0]);
              mma_bf16_16816(acc[1], af, b + 2, acc[1]);
            }
#pragma unroll
            for (int nt = 0; nt < 2; ++nt)
#pragma unroll
              for (int e = 0; e < 4; ++e) {
                const int r = mi * 16 + g + (e / 2) * 8;
                const int d = d0 + nt * 8 + 2 * tq + e % 2;
                if (r < R && d < hd && row_act[r]) {
                  if (fold_self) {
                    const ops::AttentionFold f{row_fa[r], row_fb[r]};
                    O[mi][np][nt][e] = ops::attention_fold_value(O[mi][np][nt][e], acc[nt][e], f);
                  } else {
                    const int t = t0 + r / group, h = kvh * group + r % group;
                    const int64_t unit =
                        (static_cast<int64_t>(t) * a.heads + h) * a.ws_chunks + (c - row_cb[r]);
                    ws_o[unit * hd + d] = acc[nt][e];
                  }
                }
              }
          }
        }
      }
    }
  }
  cp_async_wait(0);

  if (!fold_self) return;
  __syncthreads();  // row_l final
#pragma unroll
  for (int np = 0; np < kNp; ++np) {
    const int d0 = (warp + kWarps * np) * 16;
    if (d0 < hdp) {
#pragma unroll
      for (int mi = 0; mi < 4; ++mi)
#pragma unroll
        for (int nt = 0; nt < 2; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int r = mi * 16 + g + (e / 2) * 8;
            const int d = d0 + nt * 8 + 2 * tq + e % 2;
            if (mi < mt && r < R && d < hd) {
              const int t = t0 + r / group, h = kvh * group + r % group;
              out[(static_cast<int64_t>(t) * a.heads + h) * hd + d] =
                  to_bf16(__fdiv_rn(O[mi][np][nt][e], row_l[r]));
            }
          }
    }
  }
}

// The fold of the stored chunk partials, one block per (token, head). The chunks' m
// and l are staged in shared memory (tiles of kCombineTile chunks) and the loop is
// unrolled so that the o loads of several chunks are in flight; the fold itself is
// the definition's sequential one.
constexpr int kCombineTile = 512;

__global__ void __launch_bounds__(kThreads)
    attention_combine_kernel(AttnArgs a, const float* ws_m, const float* ws_l, const float* ws_o,
                             bf16* out) {
  __shared__ float m_s[kCombineTile], l_s[kCombineTile];
  const int t = blockIdx.x, h = blockIdx.y;
  const int hd = a.head_dim;
  bf16* o = out + (static_cast<int64_t>(t) * a.heads + h) * hd;
  const int req = a.token_request[t];
  if (req < 0) {
    for (int d = threadIdx.x; d < hd; d += kThreads) o[d] = bf16{0};
    return;
  }
  const ops::AttentionRange rg =
      ops::attention_range(a.positions[t], a.kv_lens[req], a.window, a.causal);
  const int64_t cb = rg.lo / kChunk, ce = (rg.hi + kChunk - 1) / kChunk;
  const int64_t base = (static_cast<int64_t>(t) * a.heads + h) * a.ws_chunks;
  constexpr int kPer = kAttentionMaxHeadDim / kThreads;
  float O[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) O[k] = 0.0f;
  float M = -INFINITY, L = 0.0f;
  for (int64_t c0 = cb; c0 < ce; c0 += kCombineTile) {
    const int n = static_cast<int>(ce - c0 < kCombineTile ? ce - c0 : kCombineTile);
    __syncthreads();  // the previous tile is consumed
    for (int i = threadIdx.x; i < n; i += kThreads) {
      m_s[i] = ws_m[base + (c0 - cb) + i];
      l_s[i] = ws_l[base + (c0 - cb) + i];
    }
    __syncthreads();
#pragma unroll 8
    for (int i = 0; i < n; ++i) {
      const ops::AttentionFold f = ops::attention_fold(M, L, m_s[i], l_s[i], c0 + i == cb);
      const float* oc = ws_o + (base + (c0 - cb) + i) * hd;
#pragma unroll
      for (int k = 0; k < kPer; ++k) {
        const int d = threadIdx.x + k * kThreads;
        if (d < hd) O[k] = ops::attention_fold_value(O[k], oc[d], f);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int d = threadIdx.x + k * kThreads;
    if (d < hd) o[d] = to_bf16(__fdiv_rn(O[k], L));
  }
}

int padded_head_dim(int hd) { return (hd + 15) / 16 * 16; }
int stages_for(int hdp) { return hdp <= 128 ? 3 : 2; }
// Chunks of the context (the split heuristic's bound for a full range).
int64_t context_chunks(const ops::AttentionParams& p) {
  return (p.max_kv_len + kChunk - 1) / kChunk;
}

// Workspace slots per (token, head): the most chunks one query can fold, counted
// from its first chunk (lo / 64). A causal window w reads at most w positions, so
// at most ceil((w - 1) / 64) + 1 chunks; otherwise the whole context.
int64_t chunk_slots(const ops::AttentionParams& p) {
  const int64_t all = context_chunks(p);
  if (p.causal && p.window > 0)
    return std::min<int64_t>(all, (static_cast<int64_t>(p.window) - 1 + kChunk - 1) / kChunk + 1);
  return all;
}

}  // namespace

void check_attention_limits(const ops::AttentionParams& p) {
  using detail::require;
  const char* op = "attention";
  p.check();
  require(p.head_dim <= kAttentionMaxHeadDim, op,
          "head_dim must be in [1, " + std::to_string(kAttentionMaxHeadDim) + "], got " +
              std::to_string(p.head_dim));
  require(p.heads / p.kv_heads <= kAttentionMaxGroup, op,
          "heads / kv_heads must be <= " + std::to_string(kAttentionMaxGroup) + ", got " +
              std::to_string(p.heads / p.kv_heads));
  require(p.kv_heads <= 65535, op,
          "kv_heads must be <= 65535 (grid y), got " + std::to_string(p.kv_heads));
  require(p.heads <= 65535, op, "heads must be <= 65535 (grid y), got " + std::to_string(p.heads));
}

int attention_splits(const ops::AttentionParams& p) {
  check_attention_limits(p);
  const int group = p.heads / p.kv_heads;
  const int tpc = kAttentionMaxGroup / group;  // tokens per CTA
  const int64_t pieces = std::max<int64_t>(p.requests, (p.tokens + tpc - 1) / tpc);
  const int64_t units = pieces * p.kv_heads;
  // Enough CTAs already (three quarters of a wave or more): no split, no workspace.
  if (4 * units >= 3 * kTargetCtas) return 1;
  // The most chunks one CTA's rows can span (a causal window: the window plus the
  // piece's other tokens).
  int64_t span = context_chunks(p);
  if (p.causal && p.window > 0)
    span = std::min<int64_t>(span,
                             (static_cast<int64_t>(p.window) + tpc + 2 * kChunk - 2) / kChunk + 1);
  const int64_t want = (kTargetCtas + units - 1) / units;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({want, span, 65535})));
}

size_t attention_workspace_bytes(const ops::AttentionParams& p, int splits) {
  check_attention_limits(p);
  if (splits <= 0) splits = attention_splits(p);
  if (splits == 1) return 0;
  const int64_t units = static_cast<int64_t>(p.tokens) * p.heads * chunk_slots(p);
  return static_cast<size_t>(units) * (2 + static_cast<size_t>(p.head_dim)) * sizeof(float);
}

void attention(const ops::AttentionParams& p, const bf16* q, const bf16* cache, bf16* out,
               void* workspace, size_t workspace_bytes, cudaStream_t stream, int splits) {
  using detail::require;
  const char* op = "attention";
  check_attention_limits(p);
  require(splits >= 0 && splits <= 65535, op,
          "splits must be in [0, 65535] (0 = the launcher's pick), got " + std::to_string(splits));
  if (splits == 0) splits = attention_splits(p);
  const size_t needed = attention_workspace_bytes(p, splits);
  if (p.tokens == 0) return;
  require(q != nullptr && cache != nullptr && out != nullptr, op,
          "q, cache and out must not be null");
  require(needed == 0 || (workspace != nullptr && workspace_bytes >= needed), op,
          "workspace of " + std::to_string(workspace_bytes) + " bytes, " + std::to_string(needed) +
              " needed (attention_workspace_bytes)");
  require(reinterpret_cast<uintptr_t>(workspace) % alignof(float) == 0, op,
          "workspace must be 4-byte aligned");

  AttnArgs a{};
  a.tokens = p.tokens;
  a.heads = p.heads;
  a.kv_heads = p.kv_heads;
  a.head_dim = p.head_dim;
  a.hdp = padded_head_dim(p.head_dim);
  a.ld = a.hdp + 8;
  a.page_size = p.page_size;
  a.max_pages = p.max_pages;
  a.window = p.window;
  a.group = p.heads / p.kv_heads;
  a.tpc = kAttentionMaxGroup / a.group;
  a.splits = splits;
  a.stages = stages_for(a.hdp);
  a.causal = p.causal;
  a.vec = p.head_dim % 8 == 0 && reinterpret_cast<uintptr_t>(cache) % 16 == 0;
  a.q_stride = p.q_stride;
  a.ws_chunks = chunk_slots(p);
  a.scale = ops::attention_scale(p.head_dim);
  a.block_tables = p.block_tables;
  a.token_request = p.token_request;
  a.positions = p.positions;
  a.kv_lens = p.kv_lens;

  const int64_t units = static_cast<int64_t>(p.tokens) * p.heads * a.ws_chunks;
  float* ws_m = needed ? static_cast<float*>(workspace) : nullptr;
  float* ws_l = needed ? ws_m + units : nullptr;
  float* ws_o = needed ? ws_l + units : nullptr;

  const size_t smem = smem_layout(a.ld, a.stages).total;
  const dim3 grid(static_cast<unsigned>(p.tokens), static_cast<unsigned>(p.kv_heads),
                  static_cast<unsigned>(splits));
  // The shared memory limit is raised outside graph capture (an eager call, such as
  // the warm-up every captured step gets first, sets it for the device; capture
  // only records the launch).
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  SD_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
  const int np = (a.hdp / 16 + kWarps - 1) / kWarps;
  auto launch = [&](auto kernel) {
    // The most any head dim of this instantiation (hdp <= 64 * np) needs.
    const size_t most = smem_layout(64 * np + 8, stages_for(64 * np)).total;
    if (capturing == cudaStreamCaptureStatusNone)
      SD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(most)));
    kernel<<<grid, kThreads, smem, stream>>>(a, q, cache, out, ws_m, ws_l, ws_o);
    SD_CHECK_LAUNCH();
  };
  switch (np) {
    case 1: launch(attention_chunk_kernel<1>); break;
    case 2: launch(attention_chunk_kernel<2>); break;
    case 3: launch(attention_chunk_kernel<3>); break;
    default: launch(attention_chunk_kernel<4>); break;
  }
  if (splits > 1) {
    const dim3 cgrid(static_cast<unsigned>(p.tokens), static_cast<unsigned>(p.heads));
    attention_combine_kernel<<<cgrid, kThreads, 0, stream>>>(a, ws_m, ws_l, ws_o, out);
    SD_CHECK_LAUNCH();
  }
}

}  // namespace sparkdraft::cuda
