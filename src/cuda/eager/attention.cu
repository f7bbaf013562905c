// Attention over the paged KV cache: ops/attention.h's definition on the tensor
// cores, bit for bit cpu::attention.
//
// Rows. A CTA (8 warps) owns the query rows (tokens x grouped heads) that read one KV
// head (grid x): a piece of at most `tpc` consecutive tokens of one request (grid z:
// the pieces, found on the device by find_piece; the grid is sized to a bound on the
// pieces of a batch of consecutive requests, and a CTA strides over any more). Row i
// is token t0 + i / group, head kvh * group + i % group.
// tpc (host: about tokens / requests, at most 64 / group) bounds the rows to
// mt_max 16-row tiles; each tile gets WQ = 8 / mt_max (2, 4 or 8) warps.
// Chunks. The CTA walks the union of its rows' chunk ranges, or, with `splits` > 1
// (grid y), its y-th contiguous share of that union. Per chunk (64 positions):
//   * K and V land in shared memory by 16-byte cp.async (a ring of 2 to 4 stages);
//     each thread loads pieces of one position (one page lookup). Rows are stored
//     with their 16-byte pieces XOR-swizzled (piece ^ ((j ^ j >> 3) & 7)), so both
//     the strided K reads and the V column reads are free of bank conflicts.
//     Positions >= kv_len or on an unmapped page are zero-filled, columns past
//     head_dim are zero. The row stride (16 KS) and the ring depth are compile-time;
//     every ldmatrix address is a lane-constant offset xor a compile-time constant;
//   * scores: warp q of a tile owns the slots j = WQ * n + q (n < 64 / WQ) for the
//     tile's 16 rows; the Q fragments stay in registers, K comes by ldmatrix; the
//     chains run over the head dim from +0; s = d * scale;
//   * chunk max and sum straight from the mma accumulators in the definition's
//     order: the slot bits 5 .. log2(WQ) are the warp's n bits (n-tile bits in the
//     lane, then xor 2 and xor 1 across the quad, then the pair bit in the lane),
//     and the last log2(WQ) levels combine the tile's warps' partials through
//     shared memory (a named barrier per tile); the max by fmaxf, the definition's
//     up to the sign of a zero maximum, which reaches no output (red_op);
//   * a chunk inside every range of a warp's rows (all but a row's first and last
//     chunks) takes an unmasked copy of the scores-to-p code (the same values);
//   * p = exp_f32(s - m_c) by exp_fast (common/fast_math.cuh: a double fma polynomial,
//     exp_f32 itself on the rare inputs near a float rounding boundary; equal on all
//     2^32 floats);
//   * pb = bf16(p) to shared memory (the only per-element round trip: the P.V
//     A operand needs all 64 slots), then P.V: warp q owns the head-dim n-tiles
//     q, q + WQ, ...; each n-tile's chain (4 steps over the slots) is folded at once
//     into the O accumulator fragments, which stay in registers;
//   * splits == 1: the CTA writes bf16(O / L); splits > 1 (the kFirstFolds
//     instantiation): the first split's CTA folds its own chunks the same way and
//     leaves each row's state (M, L, O) in the row's first workspace unit and the chunk
//     it stopped at in ws_end; every other split's (m_c, l_c, o_c) go to the
//     workspace, and attention_combine_kernel continues the fold from that state per
//     (token, head) in chunk order. The first split's share of the chunks is
//     first_share sixteenths of an even one (the host's kFirstShare).
// Both paths are the definition's sequential fold, so every split gives the same bits.
#include <algorithm>
#include <climits>
#include <cmath>
#include <type_traits>

#include "cuda/kernels.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/cuda/check.h"

#include "cuda/common/common.cuh"
#include "cuda/common/fast_math.cuh"
#include "cuda/common/mma.cuh"
#include "cuda/common/ptx.cuh"

namespace sparkdraft::cuda {
namespace {

constexpr int kChunk = ops::kAttentionChunk;  // 64
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * detail::kWarpSize;
constexpr int kMaxRows = 64;      // rows per CTA: at most 4 row tiles of 16
constexpr int kPLd = kChunk + 8;  // pb row stride (elements): 144 bytes
constexpr int kSms = 132;         // an H100/H200

struct AttnArgs {
  int tokens, heads, kv_heads, head_dim, hdp, ldk, ldq, page_size, max_pages, window, group, tpc;
  int splits, stages, rows_max;
  int page_shift;  // log2(page_size) when a power of two, else -1
  bool causal, vec, qvec, ovec;
  int64_t q_stride, ws_chunks;
  float scale;
  const int32_t* block_tables;
  const int32_t* token_request;
  const int64_t* positions;
  const int64_t* kv_lens;
  int32_t* ws_end;  // splits > 1: per (token, head), the chunk the first split stopped at
  int first_share;  // splits > 1: the first split's share, in sixteenths of an even one
};

// Shared memory carve-up (bytes). The Q staging area is dead once the fragments are
// in registers and shares its bytes with pb and the reduction partials.
struct Smem {
  size_t kv, q, p, redm, reds, lo, hi, ws, qo, span, total;
};
__host__ __device__ inline size_t align128(size_t x) { return (x + 127) / 128 * 128; }
__host__ __device__ inline Smem smem_layout(int ldk, int ldq, int stages, int rows_max) {
  Smem s{};
  s.kv = 0;
  const size_t scratch = align128(sizeof(bf16) * static_cast<size_t>(stages) * 2 * kChunk * ldk);
  s.q = scratch;
  const size_t q_end = s.q + sizeof(bf16) * rows_max * ldq;
  s.p = scratch;
  s.redm = align128(s.p + sizeof(bf16) * rows_max * kPLd);
  s.reds = s.redm + sizeof(float) * 4 * kWarps * 16;
  const size_t p_end = s.reds + sizeof(float) * 4 * kWarps * 16;
  s.ws = align128(q_end > p_end ? q_end : p_end);
  s.qo = s.ws + sizeof(int64_t) * kMaxRows;
  s.lo = s.qo + sizeof(int64_t) * kMaxRows;
  s.hi = s.lo + sizeof(int32_t) * kMaxRows;
  s.span = s.hi + sizeof(int32_t) * kMaxRows;
  s.total = s.span + sizeof(int32_t) * 4;
  return s;
}

// Element offset of (row j, column d) in a swizzled K or V tile (ldk: a multiple of 64).
__device__ __forceinline__ int swz(int j, int d, int ldk) {
  return j * ldk + ((((d >> 3) ^ ((j ^ (j >> 3)) & 7))) << 3) + (d & 7);
}

// ldmatrix x2 (plain and transposed) from a 32-bit shared-memory address.
__device__ __forceinline__ void ldsm_x2(uint32_t r[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}
__device__ __forceinline__ void ldsm_x2_trans(uint32_t r[2], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];\n"
               : "=r"(r[0]), "=r"(r[1])
               : "r"(addr));
}

// pb = bf16(p), the P.V operand, by the hardware conversion alone (cvt.rn: to_bf16's bits but
// for a NaN's payload): a NaN operand gives NaN products whatever its payload, and every
// output's to_bf16 turns a NaN into the rule's, so to_bf16's NaN test would change no output.
__device__ __forceinline__ bf16 to_bf16_operand(float x) {
  unsigned short h;
  asm("cvt.rn.bf16.f32 %0, %1;" : "=h"(h) : "f"(x));
  return bf16{h};
}

// Pieces: each run of consecutive tokens of one request (padding tokens belong to
// none) is cut into pieces of tpc tokens (the last one shorter), numbered in token
// order. find_piece finds piece p: its first token, its length and its request
// (false when there are p pieces or fewer). Every warp computes it alike, 32 tokens
// per step (lane l reads one), kBatch steps' loads issued together: a token starts
// a run when its request differs from the previous token's, and a piece when it is
// not padding and tpc divides its distance to its run's start.
__device__ bool find_piece(const AttnArgs& a, int p, int* t0_out, int* ntok_out, int* req_out) {
  constexpr int kBatch = 8;
  constexpr unsigned kAll = 0xffffffffu;
  const int lane = threadIdx.x % detail::kWarpSize;
  int seen = 0, run = 0, prev = INT_MIN;  // pieces, run start and request before `base`
  for (int base0 = 0; base0 < a.tokens; base0 += kBatch * detail::kWarpSize) {
    int rq[kBatch];
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int t = base0 + k * detail::kWarpSize + lane;
      rq[k] = t < a.tokens ? a.token_request[t] : INT_MIN;
    }
#pragma unroll
    for (int k = 0; k < kBatch; ++k) {
      const int base = base0 + k * detail::kWarpSize, t = base + lane;
      if (base >= a.tokens) break;
      const bool in = t < a.tokens;
      const int r = rq[k];
      int rp = __shfl_up_sync(kAll, r, 1);
      if (lane == 0) rp = prev;
      const unsigned runs = __ballot_sync(kAll, in && r != rp);
      const unsigned upto = runs & (kAll >> (detail::kWarpSize - 1 - lane));
      const int s = upto != 0 ? base + detail::kWarpSize - 1 - __clz(upto) : run;
      unsigned pm = __ballot_sync(kAll, in && r >= 0 && (t - s) % a.tpc == 0);
      const int cnt = __popc(pm);
      if (p < seen + cnt) {
        for (int i = 0; i < p - seen; ++i) pm &= pm - 1;
        const int t0 = base + __ffs(pm) - 1;
        const int req = __shfl_sync(kAll, r, __ffs(pm) - 1);
        int n = 1;  // the piece: up to tpc tokens of req from t0
        for (;;) {
          if (n >= a.tpc) break;
          const int u = t0 + n + lane;
          const bool other = n + lane >= a.tpc || u >= a.tokens || a.token_request[u] != req;
          const unsigned m = __ballot_sync(kAll, other);
          if (m != 0) {
            n += __ffs(m) - 1;
            break;
          }
          n += detail::kWarpSize;
        }
        *t0_out = t0;
        *ntok_out = n;
        *req_out = req;
        return true;
      }
      seen += cnt;
      run = __shfl_sync(kAll, s, detail::kWarpSize - 1);
      prev = __shfl_sync(kAll, r, detail::kWarpSize - 1);
    }
  }
  return false;
}

// The page of this thread's position in chunk c (thread x loads position x / 4 of
// every chunk): the block table's entry, or -1 when the position is at or past kv_len
// (or the page is unmapped). A separate step so that the loop can fetch the next chunk's
// page a whole chunk ahead of its use (the table lookup is a dependent global load).
__device__ __forceinline__ int32_t chunk_page(const AttnArgs& a, const int32_t* table,
                                              int64_t kv_len, int64_t c) {
  const int64_t pos = c * kChunk + threadIdx.x / (kThreads / kChunk);
  if (pos >= kv_len) return -1;
  const uint32_t upos = static_cast<uint32_t>(pos), ps = static_cast<uint32_t>(a.page_size);
  const uint32_t pi = a.page_shift >= 0 ? upos >> a.page_shift : upos / ps;
  return table[pi];
}

// Loads chunk c's K and V (64 positions) into a stage (cp.async, not committed), this
// thread's position on `page` (chunk_page's).
// Thread x loads position x / 4: pieces x % 4, x % 4 + 4, ... of
// its K and V rows (at most 2 * 2 * KS / 4 = KS pieces of 16 bytes). The row stride
// is 16 * KS elements (swizzled_ld of every head dim of the instantiation).
template <int KS>
__device__ __forceinline__ void load_chunk(const AttnArgs& a, const bf16* cache, int32_t page,
                                           int kvh, int64_t c, bf16* ks) {
  constexpr int kPer = kThreads / kChunk;  // threads per position
  static_assert(kPer == 4, "four threads per position");
  constexpr int kLd = 16 * KS;
  const int hd = a.head_dim;
  bf16* vs = ks + kChunk * kLd;
  const int j = threadIdx.x / kPer, sub = threadIdx.x % kPer;
  if (a.vec && hd == 16 * KS) {
    // The instantiation's own head dim: every address one of three bases plus a constant.
    // Piece p = sub + 4 t of the K (or V) row goes to piece p ^ f of its shared row, f =
    // fl + 4 fb; equivalently the shared row's piece (sub ^ fl) + 4 i takes piece
    // sub + 4 (i ^ fb) of the global row, 32 (i + fb) elements past sub * 8 for even i and
    // 32 (i - fb) for odd i.
    constexpr int kIters = 2 * KS / kPer;  // pieces a thread takes of a K row, and of a V row
    const int f = (j ^ (j >> 3)) & 7, fl = f & 3, fb = f >> 2;
    const bf16* base = cache;  // an unmapped position reads nothing (0 bytes: zeros)
    if (page >= 0) {
      const uint32_t upos = static_cast<uint32_t>(c * kChunk + j);
      const uint32_t ps = static_cast<uint32_t>(a.page_size);
      const uint32_t in_page = a.page_shift >= 0 ? upos & (ps - 1) : upos % ps;
      const int64_t slot = static_cast<int64_t>(page) * a.page_size + in_page;
      base = cache + (slot * a.kv_heads + kvh) * (32 * KS);
    }
    const int bytes = page >= 0 ? 16 : 0;
    // Element offsets from base of piece sub + 4 (i ^ fb) (even i, odd i), 0 when unmapped.
    const int even = page >= 0 ? sub * 8 + 32 * fb : 0, odd = page >= 0 ? sub * 8 - 32 * fb : 0;
    const uint32_t dst = smem_u32(ks + j * kLd + ((sub ^ fl) << 3));
#pragma unroll
    for (int i = 0; i < kIters; ++i) {
      const bf16* from = base + (((i & 1) ? odd : even) + 32 * i);
      cp_async_16(dst + 64 * i, from, bytes);                               // K
      cp_async_16(dst + 2 * kChunk * kLd + 64 * i, from + 16 * KS, bytes);  // V
    }
    return;
  }
  const bf16* src = nullptr;
  if (page >= 0) {
    const uint32_t upos = static_cast<uint32_t>(c * kChunk + j);
    const uint32_t ps = static_cast<uint32_t>(a.page_size);
    const uint32_t in_page = a.page_shift >= 0 ? upos & (ps - 1) : upos % ps;
    const int64_t slot = static_cast<int64_t>(page) * a.page_size + in_page;
    src = cache + (slot * a.kv_heads + kvh) * 2 * hd;
  }
  if (a.vec) {
    const int units = hd / 8;  // 16-byte pieces per K (or V) row
    const int f = (j ^ (j >> 3)) & 7;
    const int bytes = src != nullptr ? 16 : 0;
    const bf16* from = src != nullptr ? src + sub * 8 : cache;
    const int step = src != nullptr ? kPer * 8 : 0;
    bf16* krow = ks + j * kLd;
#pragma unroll 1  // unrolled, the addresses cost the <8, 4> kernel spills
    for (int u = sub; u < 2 * units; u += kPer) {
      const bool v = u >= units;
      const int part = v ? u - units : u;
      cp_async_16(krow + (v ? kChunk * kLd : 0) + ((part ^ f) << 3), from, bytes);
      from += step;
    }
  } else {
    for (int u = sub; u < 2 * hd; u += kPer) {
      const bool v = u >= hd;
      const int d = v ? u - hd : u;
      (v ? vs : ks)[swz(j, d, kLd)] = src != nullptr ? src[u] : bf16{0};
    }
  }
}

// The definition's max and sum, one instruction each. The max is fmaxf: ops::attention_max
// (NaN-ignoring, else a > b ? a : b) but for the sign of a zero maximum of +0 and -0, which
// reaches no output: a maximum enters only further maxima and exp of a difference, and
// exp(+-0) = 1, x - (+-0) = x for x != 0. Both are commutative (a NaN result is the one
// canonical NaN), so a tree level may combine its pair in either order.
template <bool kSum>
__device__ __forceinline__ float red_op(float x, float y) {
  if constexpr (kSum)
    return __fadd_rn(x, y);
  else
    return fmaxf(x, y);
}

// The in-warp part of chunk_max / chunk_sum for the row held in v[.][h] (h = 0: row
// g, h = 1: row g + 8): n-tile bits high to low, quad bits 2 and 1, then the pair bit.
// Every lane of the quad gets the value.
template <bool kSum, int NT>
__device__ __forceinline__ float warp_partial(const float (&x)[NT][4], int h) {
  float v[NT][2];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    v[nt][0] = x[nt][2 * h];
    v[nt][1] = x[nt][2 * h + 1];
  }
#pragma unroll
  for (int w = NT / 2; w >= 1; w /= 2)
#pragma unroll
    for (int nt = 0; nt < w; ++nt) {
      v[nt][0] = red_op<kSum>(v[nt][0], v[nt + w][0]);
      v[nt][1] = red_op<kSum>(v[nt][1], v[nt + w][1]);
    }
#pragma unroll
  for (int off = 2; off >= 1; off /= 2)
#pragma unroll
    for (int e = 0; e < 2; ++e)
      v[0][e] = red_op<kSum>(v[0][e], __shfl_xor_sync(0xffffffffu, v[0][e], off));
  return red_op<kSum>(v[0][0], v[0][1]);
}

// The last log2(WQ) levels over the tile's warps' partials part[q] (q < WQ).
template <bool kSum, int WQ>
__device__ __forceinline__ float cross_partial(const float* part) {
  float u[WQ];
#pragma unroll
  for (int q = 0; q < WQ; ++q) u[q] = part[q * 16];
#pragma unroll
  for (int off = WQ / 2; off >= 1; off /= 2)
#pragma unroll
    for (int q = 0; q < off; ++q) u[q] = red_op<kSum>(u[q], u[q + off]);
  return u[0];
}

// One piece (ntok tokens from t0, of request req) of the CTA's KV head and split.
// KS: 16-column k steps of the head dim (hdp <= 16 * KS); WQ: warps per row tile.
template <int KS, int WQ, bool kFirstFolds>
__device__ __forceinline__ void attend_piece(const AttnArgs& a, const bf16* q, const bf16* cache,
                                             bf16* out, float* ws_m, float* ws_l, float* ws_o,
                                             unsigned char* smem_raw, int t0, int ntok, int req) {
  constexpr int NT = 8 / WQ;                   // score n-tiles (8 slots) per warp
  constexpr int NPV = (2 * KS + WQ - 1) / WQ;  // P.V n-tiles (8 columns) per warp
  const int kvh = blockIdx.x, split = blockIdx.y;
  const int hd = a.head_dim, hdp = a.hdp, ldk = a.ldk, ldq = a.ldq, group = a.group;
  const int lane = threadIdx.x % detail::kWarpSize, warp = threadIdx.x / detail::kWarpSize;
  const int g = lane / 4, tq = lane % 4;
  const int tile = warp / WQ, qw = warp % WQ;
  // The CTA folds its chunks itself: with one split (the host launches the other
  // instantiation only then) every CTA, with several (kFirstFolds) the first split's,
  // whose rows' state then goes to the workspace.
  const bool fold_self = kFirstFolds ? split == 0 : true;
  const int R = ntok * group;
  const int mt = (R + 15) / 16;
  const bool computes = tile < mt;

  const Smem L = smem_layout(ldk, ldq, a.stages, a.rows_max);
  bf16* kvs = reinterpret_cast<bf16*>(smem_raw + L.kv);
  bf16* qs = reinterpret_cast<bf16*>(smem_raw + L.q);
  bf16* ps = reinterpret_cast<bf16*>(smem_raw + L.p);
  float* redm = reinterpret_cast<float*>(smem_raw + L.redm);
  float* reds = reinterpret_cast<float*>(smem_raw + L.reds);
  int64_t* row_ws = reinterpret_cast<int64_t*>(smem_raw + L.ws);
  int64_t* row_qo = reinterpret_cast<int64_t*>(smem_raw + L.qo);
  int32_t* row_lo = reinterpret_cast<int32_t*>(smem_raw + L.lo);
  int32_t* row_hi = reinterpret_cast<int32_t*>(smem_raw + L.hi);
  int32_t* span_part = reinterpret_cast<int32_t*>(smem_raw + L.span);

  const int64_t kv_len = a.kv_lens[req];
  const int32_t* table = a.block_tables + static_cast<int64_t>(req) * a.max_pages;

  // Rows: thread i < kMaxRows (warps 0 and 1) owns row i: its range (32-bit: positions
  // fit, check_attention_limits; past R the empty range [0, 0)), its Q offset (-1 past
  // R), with splits its workspace base (chunk c of the row is unit ws + c), and its
  // chunk range [lo / 64, ceil(hi / 64)), whose min and max over the rows each warp
  // reduces (rows past R out of it). Index math once a row, not once a thread.
  if (threadIdx.x < kMaxRows) {
    const int i = threadIdx.x;
    int lo = 0, hi = 0, cb = INT_MAX, ce = INT_MIN;
    int64_t ws = 0, qo = -1;
    if (i < R) {
      const int t = t0 + i / group, h = kvh * group + i % group;
      const ops::AttentionRange rg =
          ops::attention_range(a.positions[t], kv_len, a.window, a.causal);
      lo = static_cast<int>(rg.lo);
      hi = static_cast<int>(rg.hi);
      cb = lo / kChunk;
      ce = (hi + kChunk - 1) / kChunk;
      ws = (static_cast<int64_t>(t) * a.heads + h) * a.ws_chunks - cb;
      qo = static_cast<int64_t>(t) * a.q_stride + static_cast<int64_t>(h) * hd;
    }
    row_lo[i] = lo;
    row_hi[i] = hi;
    row_ws[i] = ws;
    row_qo[i] = qo;
#pragma unroll
    for (int off = detail::kWarpSize / 2; off >= 1; off /= 2) {
      cb = min(cb, __shfl_xor_sync(0xffffffffu, cb, off));
      ce = max(ce, __shfl_xor_sync(0xffffffffu, ce, off));
    }
    if (lane == 0) {
      span_part[2 * warp] = cb;
      span_part[2 * warp + 1] = ce;
    }
  }
  __syncthreads();

  // The CTA's chunks: its share of the union of its rows' chunk ranges (row 0 is
  // always a row: warp 0's partials are real).
  const int cmin = min(span_part[0], span_part[2]), cmax = max(span_part[1], span_part[3]);
  int cbeg, cend;
  if constexpr (kFirstFolds) {
    // The first split: ceil(n first_share / (16 splits)) chunks (at least one of a
    // non-empty union); the rest evenly over the other splits.
    const int n = cmax - cmin;
    const int n0 = min(n, (n * a.first_share + 16 * a.splits - 1) / (16 * a.splits));
    const int per = (n - n0 + a.splits - 2) / (a.splits - 1);
    cbeg = split == 0 ? cmin : cmin + n0 + (split - 1) * per;
    const int want = split == 0 ? cmin + n0 : cbeg + per;
    cend = want < cmax ? want : cmax;
    if (split == 0 && threadIdx.x < R) {
      const int i = threadIdx.x;  // < kMaxRows
      const int t = t0 + i / group, h = kvh * group + i % group;
      a.ws_end[static_cast<int64_t>(t) * a.heads + h] = cend;
    }
  } else {
    const int per = (cmax - cmin + a.splits - 1) / a.splits;
    cbeg = cmin + split * per;
    cend = cbeg + per < cmax ? cbeg + per : cmax;
  }
  if (cbeg >= cend) return;
  const int nchunks = cend - cbeg;

  // Compile-time ring geometry (the host's swizzled_ld and stages_for of every head
  // dim of this instantiation). The first stages' K/V loads go out before Q is
  // staged, so that their latency overlaps it.
  constexpr int kLd = 16 * KS;
  constexpr int kStages = KS <= 4 ? 4 : KS <= 8 ? 3 : 2;
  constexpr int kStageElems = 2 * kChunk * kLd;
  constexpr uint32_t kStageBytes = sizeof(bf16) * kStageElems;
  for (int s = 0; s < kStages - 1; ++s) {
    if (s < nchunks)
      load_chunk<KS>(a, cache, chunk_page(a, table, kv_len, cbeg + s), kvh, cbeg + s,
                     kvs + s * kStageElems);
    cp_async_commit();
  }
  // The page of the next chunk to load (chunk kStages - 1 of the CTA's), fetched one
  // iteration ahead of its load.
  int32_t next_page = kStages - 1 < nchunks ? chunk_page(a, table, kv_len, cbeg + kStages - 1) : -1;

  // Q rows (zero past R and past head_dim), the K/V columns past head_dim of every
  // stage (zero; cp.async never writes them).
  if (a.qvec) {
    // 16 bytes a load, every load of the thread issued before its first store (one
    // memory latency, not one a piece): rows_max * hdp / 8 <= 64 * 16 KS / 8 pieces,
    // at most KS / 2 a thread. Piece u = threadIdx.x + k * kThreads is (row i, piece
    // pc of the row), stepped without a division.
    constexpr int kQPer = KS / 2;
    const int ppr = hdp / 8;  // pieces per row (hd % 8 == 0: a piece is all Q or all pad)
    const int di = kThreads / ppr, dpc = kThreads % ppr;
    int i = threadIdx.x / ppr, pc = threadIdx.x % ppr;
    uint4 v[kQPer];
    int at[kQPer];
#pragma unroll
    for (int k = 0; k < kQPer; ++k) {
      v[k] = make_uint4(0u, 0u, 0u, 0u);
      at[k] = i < a.rows_max ? i * ldq + pc * 8 : -1;
      if (i < R && pc * 8 < hd) v[k] = *reinterpret_cast<const uint4*>(q + row_qo[i] + pc * 8);
      i += di;
      pc += dpc;
      if (pc >= ppr) {
        pc -= ppr;
        ++i;
      }
    }
#pragma unroll
    for (int k = 0; k < kQPer; ++k)
      if (at[k] >= 0) *reinterpret_cast<uint4*>(qs + at[k]) = v[k];
  } else {
    for (int u = threadIdx.x; u < a.rows_max * hdp; u += kThreads) {
      const int i = u / hdp, d = u % hdp;
      qs[i * ldq + d] = i < R && d < hd ? q[row_qo[i] + d] : bf16{0};
    }
  }
  if (hdp > hd)
    for (int u = threadIdx.x; u < a.stages * 2 * kChunk * (hdp - hd); u += kThreads) {
      const int row = u / (hdp - hd), d = hd + u % (hdp - hd);
      kvs[(row / kChunk) * kChunk * ldk + swz(row % kChunk, d, ldk)] = bf16{0};
    }
  __syncthreads();

  // This lane's two rows (g and g + 8 of its tile): their ranges and workspace bases.
  int r[2], lo[2], hi[2];
  int64_t wsb[2] = {0, 0};
  float M[2] = {-INFINITY, -INFINITY}, Lsum[2] = {0.0f, 0.0f};
  bool first[2] = {true, true};
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    r[h] = tile * 16 + g + 8 * h;
    const int rr = r[h] < kMaxRows ? r[h] : 0;
    lo[h] = row_lo[rr];
    hi[h] = row_hi[rr];
    if (!fold_self && r[h] < R) wsb[h] = row_ws[rr];
  }
  uint32_t qf[KS][4];
#pragma unroll
  for (int ks = 0; ks < KS; ++ks)
    if (computes && ks * 16 < hdp)
      ldmatrix_x4(qf[ks], qs + (tile * 16 + lane % 16) * ldq + ks * 16 + (lane / 16) * 8);
  float O[NPV][4];
#pragma unroll
  for (int i = 0; i < NPV; ++i)
#pragma unroll
    for (int e = 0; e < 4; ++e) O[i][e] = 0.0f;

  // Lane-constant shared-memory byte offsets of the ldmatrix rows (swz of ks = 0 and
  // n8 = qw; every other step only xors a compile-time constant into the column):
  //   K (scores, n-tile pair p): row j = WQ * ((2p + m8 / 2) * 8 + lane % 8) + qw
  //     (WQ = 8: j = 8 (lane % 8) + qw), column piece 2k + m8 % 2, swizzled by
  //     f(j) = (j ^ j >> 3) & 7: ((2k + b) ^ f) << 4 = ((b ^ f) << 4) ^ (k << 5);
  //   V (P.V, k step, n-tile qw + WQ i): row 16k + lane % 16, whose f is
  //     f0 ^ (2k & 7) with f0 = (lane & 7) ^ (lane >> 3 & 1), column piece
  //     (qw + WQ i) ^ f = (qw ^ f0) ^ (WQ i) ^ (2k & 7);
  //   pb (A of P.V): row lane % 16, column (lane / 16) * 8 (+ 16 per k step).
  // Row and column parts share one register (the row offset is a multiple of the row
  // bytes 32 KS, every column xor stays below it); the moves keep the compiler from
  // recomputing them from the thread index at every use.
  constexpr int kPairs = NT >= 2 ? NT / 2 : 1;
  uint32_t k_off[kPairs];
#pragma unroll
  for (int pp = 0; pp < kPairs; ++pp) {
    const int m8 = lane / 8;
    const int j = NT == 1 ? WQ * (lane % 8) + qw : WQ * ((2 * pp + m8 / 2) * 8 + lane % 8) + qw;
    const int f = (j ^ (j >> 3)) & 7;
    k_off[pp] = static_cast<uint32_t>(j * kLd * 2) | static_cast<uint32_t>(((m8 % 2) ^ f) << 4);
    asm volatile("mov.b32 %0, %0;" : "+r"(k_off[pp]));
  }
  uint32_t v_off = static_cast<uint32_t>((lane % 16) * kLd * 2 + kChunk * kLd * 2) |
                   static_cast<uint32_t>((qw ^ (lane & 7) ^ ((lane >> 3) & 1)) << 4);
  asm volatile("mov.b32 %0, %0;" : "+r"(v_off));
  bf16* pt = ps + tile * 16 * kPLd;
  const uint32_t pa_addr = smem_u32(pt + (lane % 16) * kPLd + (lane / 16) * 8);
  const uint32_t kv_addr = smem_u32(kvs);

  int stage = 0, nstage = kStages - 1;
  for (int ci = 0; ci < nchunks; ++ci) {
    const int c = static_cast<int>(cbeg) + ci;
    cp_async_wait(kStages - 2);
    __syncthreads();  // this chunk landed; the previous one (and Q) are consumed
    {
      const int nxt = ci + kStages - 1;
      if (nxt < nchunks) {
        load_chunk<KS>(a, cache, next_page, kvh, cbeg + nxt, kvs + nstage * kStageElems);
        if (nxt + 1 < nchunks) next_page = chunk_page(a, table, kv_len, cbeg + nxt + 1);
      }
      cp_async_commit();
    }
    const uint32_t ks_addr = kv_addr + static_cast<uint32_t>(stage) * kStageBytes;
    stage = stage == kStages - 1 ? 0 : stage + 1;
    nstage = nstage == kStages - 1 ? 0 : nstage + 1;
    if (!computes) continue;

    // Live slots of the lane's rows: [l, h) relative to the chunk (empty when the row
    // does not fold this chunk: its range misses [64c, 64c + 64)).
    bool act[2];
    int sl[2], sh[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int l = lo[h] - c * kChunk, u = hi[h] - c * kChunk;
      act[h] = l < kChunk && u > 0;
      sl[h] = act[h] ? (l < 0 ? 0 : l) : 0;
      sh[h] = act[h] ? (u > kChunk ? kChunk : u) : 0;
    }

    // Scores: slots j = WQ * (8 nt + col) + qw, col = the n of the mma tile. At the
    // instantiation's own head dim (hdp = 16 KS, kWhole) every k step runs with no test, so
    // no ldmatrix or mma is predicated (each predicated one cost a test, a warp sync and its
    // address again; 2026-12-06i run 2: attention -0.2% to -3.5% a step); a narrower head
    // dim skips the steps past hdp. The same products either way: k * 16 < hdp holds for
    // every k < KS when hdp = 16 KS.
    float x[NT][4];
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) x[nt][e] = 0.0f;
    auto scores = [&](auto whole) {
      constexpr bool kWhole = decltype(whole)::value;
#pragma unroll
      for (int k = 0; k < KS; ++k) {
        if (kWhole || k * 16 < hdp) {
          if constexpr (NT == 1) {
            uint32_t b[2];
            ldsm_x2(b, ks_addr + (k_off[0] ^ static_cast<uint32_t>(k << 5)));
            mma_bf16_16816(x[0], qf[k], b, x[0]);
          } else {
#pragma unroll
            for (int nt = 0; nt < NT; nt += 2) {
              uint32_t b[4];
              ldmatrix_x4(b, ks_addr + (k_off[nt / 2] ^ static_cast<uint32_t>(k << 5)));
              mma_bf16_16816(x[nt], qf[k], b, x[nt]);
              mma_bf16_16816(x[nt + 1], qf[k], b + 2, x[nt + 1]);
            }
          }
        }
      }
    };
    if (hdp == 16 * KS)
      scores(std::true_type{});
    else
      scores(std::false_type{});
    // From the scores to p, pb and the partial sums, in one of two forms: masked, or
    // (kMasked false) where every slot of both of the lane's rows is live, which is every
    // chunk inside the rows' ranges: the same values with no mask computed. Every warp of
    // a tile holds the same rows, so the form is uniform over the tile's named barriers.
    float* rm = redm + tile * WQ * 16;
    float* rs = reds + tile * WQ * 16;
    const int bar_id = 1 + tile, bar_threads = WQ * detail::kWarpSize;
    float m[2];
    auto to_p = [&](auto masked) {
      constexpr bool kMasked = decltype(masked)::value;
      // Scale, mask (-inf) for the max.
      bool live[NT][4];
      float xm[NT][4];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e / 2;
          const int j = WQ * (nt * 8 + 2 * tq + e % 2) + qw;
          live[nt][e] = !kMasked || (j >= sl[h] && j < sh[h]);
          x[nt][e] = __fmul_rn(x[nt][e], a.scale);
          xm[nt][e] = live[nt][e] ? x[nt][e] : -INFINITY;
        }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float pm = warp_partial<false, NT>(xm, h);
        if (tq == 0) rm[qw * 16 + g + 8 * h] = pm;
      }
      named_barrier(bar_id, bar_threads);
#pragma unroll
      for (int h = 0; h < 2; ++h) m[h] = cross_partial<false, WQ>(rm + g + 8 * h);

      // p, pb to shared memory, the partial sums. exp's argument is +0 on masked slots
      // (their p is +0 whatever exp gives), so they never take exp_fast's rare path.
      // All the lane's fast exps first (straight-line code: their chains overlap), then,
      // rarely, exp_f32 itself for all of them when one is not trusted.
      float arg[NT][4], ex[NT][4];
      bool all_ok = true;
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          arg[nt][e] = live[nt][e] ? __fsub_rn(x[nt][e], m[e / 2]) : 0.0f;
          bool ok;
          ex[nt][e] = exp_fast_try(arg[nt][e], &ok);
          all_ok = all_ok && ok;
        }
      if (!all_ok) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int e = 0; e < 4; ++e) ex[nt][e] = exp_slow(arg[nt][e]);
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt)
#pragma unroll
        for (int e = 0; e < 4; ++e) {
          const int h = e / 2;
          const int j = WQ * (nt * 8 + 2 * tq + e % 2) + qw;
          const float p = live[nt][e] ? ex[nt][e] : 0.0f;
          x[nt][e] = p;
          pt[(g + 8 * h) * kPLd + j] = to_bf16_operand(p);
        }
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float pl = warp_partial<true, NT>(x, h);
        if (tq == 0) rs[qw * 16 + g + 8 * h] = pl;
      }
    };
    const bool full = sl[0] == 0 && sh[0] == kChunk && sl[1] == 0 && sh[1] == kChunk;
    if (__all_sync(0xffffffffu, full))
      to_p(std::false_type{});
    else
      to_p(std::true_type{});
    named_barrier(bar_id, bar_threads);
    // The fold's scalars (ops::attention_fold): lane tq of the quad computes
    // exp(M - M') (tq even) or exp(m_c - M') (tq odd) of row tq / 2, then the quad
    // shares them.
    float lc[2], next[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      lc[h] = cross_partial<true, WQ>(rs + g + 8 * h);
      next[h] = fmaxf(M[h], m[h]);  // red_op<false>'s max
    }
    float fa[2] = {0.0f, 0.0f}, fb[2] = {0.0f, 0.0f};
    if (fold_self) {
      const int hh = tq >> 1;
      const float arg = (tq & 1) != 0 ? __fsub_rn(hh ? m[1] : m[0], hh ? next[1] : next[0])
                                      : __fsub_rn(hh ? M[1] : M[0], hh ? next[1] : next[0]);
      const float ex = exp_fast(arg);
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        const float ea = __shfl_sync(0xffffffffu, ex, (lane & ~3) | (2 * h));
        const float eb = __shfl_sync(0xffffffffu, ex, (lane & ~3) | (2 * h + 1));
        if (!act[h]) continue;
        fa[h] = first[h] ? 0.0f : ea;
        fb[h] = eb;
        const float la = __fmul_rn(Lsum[h], fa[h]);
        const float lb = __fmul_rn(lc[h], fb[h]);
        Lsum[h] = __fadd_rn(la, lb);
        M[h] = next[h];
        first[h] = false;
      }
    } else if (qw == 0 && tq == 0) {
#pragma unroll
      for (int h = 0; h < 2; ++h) {
        if (!act[h]) continue;
        ws_m[wsb[h] + c] = m[h];
        ws_l[wsb[h] + c] = lc[h];
      }
    }

    // With splits: where this chunk's o_c rows of the lane start (its column 2 tq).
    float* o_row[2];
#pragma unroll
    for (int h = 0; h < 2; ++h) o_row[h] = fold_self ? nullptr : ws_o + (wsb[h] + c) * hd + 2 * tq;

    // P.V: the tile's pb as A fragments (4 steps of 16 slots), this warp's n-tiles. WQ
    // divides 2 KS, so every n-tile lies inside the stage's rows (kLd columns) and the
    // test below is true at compile time: no branch keeps the n-tiles' chains apart.
    // An n-tile past head_dim (hdp < 16 KS) reads columns no load wrote; its values
    // reach no output (every store and the last division test d < hd).
    static_assert((2 * KS) % WQ == 0, "WQ divides the P.V n-tiles");
    uint32_t pa[4][4];
#pragma unroll
    for (int k = 0; k < 4; ++k) ldmatrix_x4(pa[k], pa_addr + k * 32);
#pragma unroll
    for (int i = 0; i < NPV; ++i) {
      const int n8 = qw + WQ * i;
      if (n8 < 2 * KS) {
        float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          uint32_t b[2];
          const uint32_t cx = static_cast<uint32_t>(((WQ * i) ^ ((2 * k) & 7)) << 4);
          ldsm_x2_trans(b, ks_addr + k * 16 * kLd * 2 + (v_off ^ cx));
          mma_bf16_16816(acc, pa[k], b, acc);
        }
        if (fold_self) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int h = e / 2;
            if (act[h])
              O[i][e] =
                  ops::attention_fold_value(O[i][e], acc[e], ops::AttentionFold{fa[h], fb[h]});
          }
        } else {
          // The lane's columns d, d + 1 of rows g and g + 8: one 8-byte store each
          // where the head dim is even (then d < hd means d + 1 < hd).
          const int d = n8 * 8 + 2 * tq;
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            if (!act[h] || d >= hd) continue;
            float* dst = o_row[h] + n8 * 8;
            if (a.ovec) {
              *reinterpret_cast<float2*>(dst) = make_float2(acc[2 * h], acc[2 * h + 1]);
            } else {
              dst[0] = acc[2 * h];
              if (d + 1 < hd) dst[1] = acc[2 * h + 1];
            }
          }
        }
      }
    }
  }
  cp_async_wait(0);

  if (!fold_self || !computes) return;
  if constexpr (kFirstFolds) {
    // The first of several splits: each row's state after its chunks (a row none of
    // them reached has none) at the row's first unit, row_ws + lo / 64.
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      if (r[h] >= R || first[h]) continue;
      const int64_t unit = row_ws[r[h]] + row_lo[r[h]] / kChunk;
      if (qw == 0 && tq == 0) {
        ws_m[unit] = M[h];
        ws_l[unit] = Lsum[h];
      }
#pragma unroll
      for (int i = 0; i < NPV; ++i)
#pragma unroll
        for (int e = 2 * h; e < 2 * h + 2; ++e) {
          const int d = (qw + WQ * i) * 8 + 2 * tq + e % 2;
          if (d < hd) ws_o[unit * hd + d] = O[i][e];
        }
    }
  } else {
#pragma unroll
    for (int i = 0; i < NPV; ++i) {
      const int n8 = qw + WQ * i;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = e / 2;
        const int d = n8 * 8 + 2 * tq + e % 2;
        if (r[h] < R && d < hd) {
          const int t = t0 + r[h] / group, hh = kvh * group + r[h] % group;
          out[(static_cast<int64_t>(t) * a.heads + hh) * hd + d] =
              to_bf16(__fdiv_rn(O[i][e], Lsum[h]));
        }
      }
    }
  }
}

// Grid: x the KV head, y the split, z the pieces p = blockIdx.z, blockIdx.z + gridDim.z,
// ... The host sizes z to a bound on the pieces of a batch whose requests' tokens are
// consecutive (requests + (tokens - requests) / tpc); any other layout still gets every
// piece. Pieces are the slowest grid dimension so that the CTAs the bound overcounts
// (they find no piece and exit) are the last ones the GPU schedules, not interleaved
// with the real ones. With no split, the CTAs also write the zeros of the padding
// tokens (stride gridDim.z). kFirstFolds: the instantiation for splits > 1.
template <int KS, int WQ, bool kFirstFolds>
__global__ void __launch_bounds__(kThreads, KS <= 4 || (KS == 8 && WQ >= 4) ? 2 : 1)
    attention_chunk_kernel(AttnArgs a, const bf16* q, const bf16* cache, bf16* out, float* ws_m,
                           float* ws_l, float* ws_o) {
  pdl_enter();
  extern __shared__ __align__(128) unsigned char smem_raw[];
  if (a.splits == 1 && blockIdx.y == 0) {
    const int width = a.group * a.head_dim;
    for (int t = blockIdx.z; t < a.tokens; t += gridDim.z)
      if (a.token_request[t] < 0) {
        bf16* o = out + (static_cast<int64_t>(t) * a.heads + blockIdx.x * a.group) * a.head_dim;
        for (int i = threadIdx.x; i < width; i += kThreads) o[i] = bf16{0};
      }
  }
  for (int p = blockIdx.z;; p += gridDim.z) {
    int t0 = 0, ntok = 0, req = 0;
    if (!find_piece(a, p, &t0, &ntok, &req)) break;
    attend_piece<KS, WQ, kFirstFolds>(a, q, cache, out, ws_m, ws_l, ws_o, smem_raw, t0, ntok, req);
    __syncthreads();  // the next piece reuses the shared memory
  }
}

// The rest of the fold, one block per (token, head): from the first split's state (its
// M, L and O at the row's first unit, covering the row's chunks before ws_end) or,
// where that split reached none of the row's chunks, from the empty state; then the
// stored chunk partials in chunk order. The fold's
// running max M_c = max_f32(M_{c-1}, m_c) is a prefix max: max_f32 keeps the later of
// two equal operands and ignores NaN, so any order-preserving tree gives the
// sequential bits. Per tile of kCombineThreads chunks, thread i takes chunk i: the
// prefix max (warp shuffles, then the warps' totals), then its a = exp(M_{c-1} - M_c)
// (0 for the first chunk) and b = exp(m_c - M_c), all in parallel. The cheap rest of
// the fold (L, and O per column) runs sequentially in chunk order, with the o_c loads
// of kBatch chunks issued together first (left to the compiler, the loads trickled in
// a few at a time and the combine was latency-bound: 20 us for one request of
// qwen3-8b, 40 us for 8). kPer: the columns a thread folds (head dims up to 128: one,
// so twice the chunks' loads fit in flight).
constexpr int kCombineThreads = 128;
constexpr int kCombineWarps = kCombineThreads / detail::kWarpSize;

template <int kPer, int kBatch>
__global__ void __launch_bounds__(kCombineThreads, 8)
    attention_combine_kernel(AttnArgs a, const float* ws_m, const float* ws_l, const float* ws_o,
                             bf16* out) {
  pdl_enter();
  __shared__ float a_s[kCombineThreads], b_s[kCombineThreads], l_s[kCombineThreads];
  __shared__ float warp_max[kCombineWarps];
  const int t = blockIdx.x, h = blockIdx.y;
  const int hd = a.head_dim;
  const int lane = threadIdx.x % detail::kWarpSize, warp = threadIdx.x / detail::kWarpSize;
  bf16* o = out + (static_cast<int64_t>(t) * a.heads + h) * hd;
  const int req = a.token_request[t];
  if (req < 0) {
    for (int d = threadIdx.x; d < hd; d += kCombineThreads) o[d] = bf16{0};
    return;
  }
  const ops::AttentionRange rg =
      ops::attention_range(a.positions[t], a.kv_lens[req], a.window, a.causal);
  const int64_t cb = rg.lo / kChunk, ce = (rg.hi + kChunk - 1) / kChunk;
  const int64_t base = (static_cast<int64_t>(t) * a.heads + h) * a.ws_chunks;
  float O[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) O[k] = 0.0f;
  float M = -INFINITY, L = 0.0f;  // M: the running max before the tile
  const int64_t end = a.ws_end[static_cast<int64_t>(t) * a.heads + h];
  const int64_t cs = end < cb ? cb : end > ce ? ce : end;  // the first chunk left to fold
  if (cs > cb) {
    M = ws_m[base];
    L = ws_l[base];
#pragma unroll
    for (int k = 0; k < kPer; ++k) {
      const int d = threadIdx.x + k * kCombineThreads;
      if (d < hd) O[k] = ws_o[base * hd + d];
    }
  }
  for (int64_t c0 = cs; c0 < ce; c0 += kCombineThreads) {
    const int n = static_cast<int>(ce - c0 < kCombineThreads ? ce - c0 : kCombineThreads);
    const float* oc = ws_o + (base + (c0 - cb)) * hd;
    // kBatch chunks' o_c loaded at once (independent loads in flight), then folded in
    // chunk order; the tile's first batch goes out before the prefix max, whose loads
    // and barriers it does not depend on.
    float v[kBatch][kPer];
    auto load_batch = [&](int c1) {
#pragma unroll
      for (int u = 0; u < kBatch; ++u)
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
          const int d = threadIdx.x + k * kCombineThreads;
          v[u][k] = c1 + u < n && d < hd ? oc[static_cast<int64_t>(c1 + u) * hd + d] : 0.0f;
        }
    };
    load_batch(0);
    const int i = threadIdx.x;
    const float m = i < n ? ws_m[base + (c0 - cb) + i] : -INFINITY;
    const float l = i < n ? ws_l[base + (c0 - cb) + i] : 0.0f;
    // Inclusive prefix max of the tile (earlier operand first).
    float p = m;
#pragma unroll
    for (int off = 1; off < detail::kWarpSize; off *= 2) {
      const float q = __shfl_up_sync(0xffffffffu, p, off);
      if (lane >= off) p = ops::attention_max(q, p);
    }
    __syncthreads();  // the previous tile's a_s, b_s, l_s and warp_max are consumed
    if (lane == detail::kWarpSize - 1) warp_max[warp] = p;
    __syncthreads();
    float before = M;  // the max of everything before this warp
    for (int w = 0; w < warp; ++w) before = ops::attention_max(before, warp_max[w]);
    const float incl = ops::attention_max(before, p);
    float prev = __shfl_up_sync(0xffffffffu, incl, 1);
    if (lane == 0) prev = before;
    if (i < n) {
      a_s[i] = c0 + i == cb ? 0.0f : exp_fast(__fsub_rn(prev, incl));
      b_s[i] = exp_fast(__fsub_rn(m, incl));
      l_s[i] = l;
    }
    float tile_max = M;
    for (int w = 0; w < kCombineWarps; ++w) tile_max = ops::attention_max(tile_max, warp_max[w]);
    __syncthreads();
    M = tile_max;
    for (int c1 = 0; c1 < n; c1 += kBatch) {
      if (c1 > 0) load_batch(c1);
#pragma unroll
      for (int u = 0; u < kBatch; ++u) {
        const int c = c1 + u;
        if (c >= n) break;
        const float fa = a_s[c], fb = b_s[c];
        L = __fadd_rn(__fmul_rn(L, fa), __fmul_rn(l_s[c], fb));
#pragma unroll
        for (int k = 0; k < kPer; ++k) {
          const int d = threadIdx.x + k * kCombineThreads;
          if (d < hd) O[k] = ops::attention_fold_value(O[k], v[u][k], ops::AttentionFold{fa, fb});
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const int d = threadIdx.x + k * kCombineThreads;
    if (d < hd) o[d] = to_bf16(__fdiv_rn(O[k], L));
  }
}

int padded_head_dim(int hd) { return (hd + 15) / 16 * 16; }
// The K/V row stride: 16 KS of the instantiation that runs hdp (the kernel's
// compile-time kLd).
int swizzled_ld(int hdp) { return hdp <= 64 ? 64 : hdp <= 128 ? 128 : 256; }
// Ring stages: 4 x 16 KB at head dim 64, 3 x 32 KB at 128 (two CTAs per SM), 2 x 64 KB
// at 256.
int stages_for(int hdp) { return hdp <= 64 ? 4 : hdp <= 128 ? 3 : 2; }
int ctas_per_sm(int hdp) { return hdp <= 128 ? 2 : 1; }
// With splits, the first split's share of the chunks in sixteenths of an even share
// (its CTAs fold each chunk into their state as they go, the others store partials).
// Measured on an H100 (gpu-log 2026-12-05e, runs 2-3): 8, 12, 20 and 24 were all slower
// than an even share at 8 requests of both presets.
constexpr int kFirstShare = 16;
// Chunks of the context (the split heuristic's bound for a full range).
int64_t context_chunks(const ops::AttentionParams& p) {
  return (p.max_kv_len + kChunk - 1) / kChunk;
}

// The splits of the context for pieces of tpc tokens: none where the pieces x KV heads
// already fill three quarters of a wave of CTAs, else as many as still fit in one wave
// (a second, partial wave costs more than the CTAs it adds), at most the chunks one CTA's
// rows can span (a causal window: the window plus the piece's other tokens).
int splits_for(const ops::AttentionParams& p, int tpc) {
  const int64_t pieces = std::max<int64_t>(p.requests, (p.tokens + tpc - 1) / tpc);
  const int64_t units = pieces * p.kv_heads;
  const int64_t kTargetCtas = static_cast<int64_t>(kSms) * ctas_per_sm(padded_head_dim(p.head_dim));
  if (4 * units >= 3 * kTargetCtas) return 1;
  int64_t span = context_chunks(p);
  if (p.causal && p.window > 0)
    span = std::min<int64_t>(span,
                             (static_cast<int64_t>(p.window) + tpc + 2 * kChunk - 2) / kChunk + 1);
  const int64_t want = kTargetCtas / units;
  return static_cast<int>(std::max<int64_t>(1, std::min<int64_t>({want, span, 65535})));
}

// Tokens per CTA piece (any value gives the same bits): about the batch's tokens per
// request, at most kMaxRows rows; halved where the context would be split and the half
// piece still has more than one 16-row tile, so that more pieces (each reading its KV
// head's chunks, the other piece's reads of them mostly from L2) take the place of
// splits, whose chunk partials go through memory and the combine. Measured (gpu-log
// 2026-12-06d run 2, H100, the step's timeline): muse (group 8) at 8 requests 2 pieces
// of 32 rows a request and no split instead of 56 rows and 2 splits, attention 715 ->
// 507 us a step (the combine gone), the step -4.7%; at one request 158 -> 150 us; but
// qwen3-8b (group 4) with half pieces of one tile 494 -> 577 us at 8 requests.
int tokens_per_piece(const ops::AttentionParams& p) {
  const int group = p.heads / p.kv_heads;
  const int most = std::max(1, kMaxRows / group);
  const int avg = p.requests > 0 ? (p.tokens + p.requests - 1) / p.requests : 1;
  const int tpc = std::max(1, std::min(most, avg));
  const int half = (tpc + 1) / 2;
  if (half * group > 16 && splits_for(p, tpc) > 1) return half;
  return tpc;
}
int row_tiles(const ops::AttentionParams& p) {
  return (tokens_per_piece(p) * (p.heads / p.kv_heads) + 15) / 16;
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
  require(p.kv_heads <= 65535, op, "kv_heads must be <= 65535, got " + std::to_string(p.kv_heads));
  require(p.heads <= 65535, op, "heads must be <= 65535 (grid y), got " + std::to_string(p.heads));
  require(static_cast<int64_t>(p.max_pages) * p.page_size <= INT32_MAX, op,
          "max_pages * page_size must fit in 32 bits (positions are 32-bit on the device)");
}

int attention_splits(const ops::AttentionParams& p) {
  check_attention_limits(p);
  return splits_for(p, tokens_per_piece(p));
}

int attention_tokens_per_piece(const ops::AttentionParams& p) {
  check_attention_limits(p);
  return tokens_per_piece(p);
}

size_t attention_workspace_bytes(const ops::AttentionParams& p, int splits) {
  check_attention_limits(p);
  if (splits <= 0) splits = attention_splits(p);
  if (splits == 1) return 0;
  const int64_t units = static_cast<int64_t>(p.tokens) * p.heads * chunk_slots(p);
  return static_cast<size_t>(units) * (2 + static_cast<size_t>(p.head_dim)) * sizeof(float) +
         static_cast<size_t>(p.tokens) * p.heads * sizeof(int32_t);  // ws_end
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
  a.ldk = swizzled_ld(a.hdp);
  a.ldq = a.hdp + 8;
  a.page_size = p.page_size;
  a.page_shift = -1;
  for (int sh = 0; sh < 31; ++sh)
    if ((1 << sh) == p.page_size) a.page_shift = sh;
  a.max_pages = p.max_pages;
  a.window = p.window;
  a.group = p.heads / p.kv_heads;
  a.tpc = tokens_per_piece(p);
  a.rows_max = row_tiles(p) * 16;
  a.splits = splits;
  a.stages = stages_for(a.hdp);
  a.causal = p.causal;
  a.vec = p.head_dim % 8 == 0 && reinterpret_cast<uintptr_t>(cache) % 16 == 0;
  a.qvec = p.head_dim % 8 == 0 && p.q_stride % 8 == 0 && reinterpret_cast<uintptr_t>(q) % 16 == 0;
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
  a.ovec = p.head_dim % 2 == 0 && reinterpret_cast<uintptr_t>(ws_o) % 8 == 0;
  a.ws_end = needed ? reinterpret_cast<int32_t*>(ws_o + units * p.head_dim) : nullptr;
  a.first_share = kFirstShare;

  const size_t smem = smem_layout(a.ldk, a.ldq, a.stages, a.rows_max).total;
  // Pieces of a batch whose requests' tokens are consecutive: at most one per request
  // plus one per tpc tokens (the kernel strides over any more).
  // A request with n tokens has ceil(n / tpc) = 1 + floor((n - 1) / tpc) pieces, so a
  // batch has at most requests + floor((tokens - requests) / tpc); grid z is at most
  // 65535 (the kernel strides over any more).
  const int64_t pieces = std::min<int64_t>(
      {p.tokens,
       static_cast<int64_t>(p.requests) + std::max<int64_t>(0, p.tokens - p.requests) / a.tpc,
       65535});
  const dim3 grid(static_cast<unsigned>(p.kv_heads), static_cast<unsigned>(splits),
                  static_cast<unsigned>(std::max<int64_t>(1, pieces)));
  // The shared memory limit is raised outside graph capture (an eager call, such as
  // the warm-up every captured step gets first, sets it for the device; capture
  // only records the launch).
  cudaStreamCaptureStatus capturing = cudaStreamCaptureStatusNone;
  SD_CUDA_CHECK(cudaStreamIsCapturing(stream, &capturing));
  const int ks = a.hdp <= 64 ? 4 : a.hdp <= 128 ? 8 : 16;
  const int mt = a.rows_max / 16;
  const int wq = mt == 1 ? 8 : mt == 2 ? 4 : 2;
  auto launch = [&](auto kernel) {
    // The most any head dim of this instantiation (hdp <= 16 * ks) needs.
    const int hmax = 16 * ks;
    const size_t most = smem_layout(swizzled_ld(hmax), hmax + 8, stages_for(hmax), kMaxRows).total;
    if (capturing == cudaStreamCaptureStatusNone)
      SD_CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                         static_cast<int>(most)));
    launch_kernel("attention_chunk_kernel", kernel,
                  LaunchShape{dim3(grid), dim3(kThreads), static_cast<size_t>(smem), stream}, a, q,
                  cache, out, ws_m, ws_l, ws_o);
  };
  auto by_wq = [&](auto ks_tag) {
    constexpr int KS = decltype(ks_tag)::value;
    if (splits > 1) {
      switch (wq) {
        case 8: launch(attention_chunk_kernel<KS, 8, true>); break;
        case 4: launch(attention_chunk_kernel<KS, 4, true>); break;
        default: launch(attention_chunk_kernel<KS, 2, true>); break;
      }
    } else {
      switch (wq) {
        case 8: launch(attention_chunk_kernel<KS, 8, false>); break;
        case 4: launch(attention_chunk_kernel<KS, 4, false>); break;
        default: launch(attention_chunk_kernel<KS, 2, false>); break;
      }
    }
  };
  switch (ks) {
    case 4: by_wq(std::integral_constant<int, 4>{}); break;
    case 8: by_wq(std::integral_constant<int, 8>{}); break;
    default: by_wq(std::integral_constant<int, 16>{}); break;
  }
  if (splits > 1) {
    const dim3 cgrid(static_cast<unsigned>(p.tokens), static_cast<unsigned>(p.heads));
    static_assert(kAttentionMaxHeadDim <= 2 * kCombineThreads, "two columns a thread at most");
    const LaunchShape shape{dim3(cgrid), dim3(kCombineThreads), 0, stream};
    if (p.head_dim <= kCombineThreads)
      launch_kernel("attention_combine_kernel", attention_combine_kernel<1, 32>, shape, a, ws_m,
                    ws_l, ws_o, out);
    else
      launch_kernel("attention_combine_kernel", attention_combine_kernel<2, 16>, shape, a, ws_m,
                    ws_l, ws_o, out);
  }
}

}  // namespace sparkdraft::cuda
