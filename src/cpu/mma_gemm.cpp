// The fast chain of cpu/mma_gemm.h. Every step follows core/mma.h's rules
// literally; the argument that each vector operation is exact is written next
// to it. Two kernels: AVX2 (fp32 terms truncated by vcvttps2dq where the step's
// exponents allow, else integer terms; below) and AVX-512 (fp64 terms truncated
// by fused multiply-adds rounding toward zero, further below). They
// share the set-up and the tail: the rows in blocks of 16 (block_rows), a step's
// values zero-padded past K (StepSources), a lane with inf / NaN on the twin's
// step (twin_lanes), the per-step x flags (XSteps). The AVX2 kernel also reads
// packed weights (MmaPacked, at the end: built once, read as one stream); the
// others run on a packed weight's rows unpacked a block at a time.
#include "sparkdraft/cpu/mma_gemm.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#if defined(__linux__)
#include <sys/mman.h>
#endif

#include "common/parallel.h"
#include "sparkdraft/core/mma.h"
#include "sparkdraft/error.h"

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
// GCC 12 warns inside its own avx512fintrin.h (the _mm512_undefined_* operands of
// the unmasked forms) when those are inlined here: a false positive.
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#endif
#include <immintrin.h>
#define SD_MMA_AVX2 1
#define SD_AVX2 __attribute__((target("avx2")))
#define SD_AVX512 __attribute__((target("avx2,avx512f,avx512bw,avx512dq,avx512vl")))
#else
#define SD_MMA_AVX2 0
#endif

namespace sparkdraft::cpu {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw InvalidArgument("mma_gemm_rows: " + what);
}

struct Args {
  const bf16* w;
  int64_t w_stride;
  int n_rows;
  const bf16* x;
  int64_t x_stride;
  int m_rows;
  int K;
  float* out;
  int64_t out_stride;
};

void reference_rows(const Args& a, int64_t n_begin, int64_t n_end) {
  for (int64_t n = n_begin; n < n_end; ++n)
    for (int m = 0; m < a.m_rows; ++m)
      a.out[m * a.out_stride + n] = mma_chain(a.w + n * a.w_stride, a.x + m * a.x_stride, a.K);
}

#if SD_MMA_AVX2

// ---- Shared by the vector kernels ------------------------------------------------

// A step's 16 values k0 .. k0 + 15 of each of 16 rows: src[j] points at row j's
// values, or, in the step that runs past K, at a zero-padded copy in pad.
struct StepSources {
  const bf16* src[16];
  alignas(32) uint16_t pad[16][kMmaK];
  StepSources() = default;
  // src may point into pad: a copy would point into its source's pad.
  StepSources(const StepSources&) = delete;
  StepSources& operator=(const StepSources&) = delete;
  // A packed step (MmaPacked: value k of row j at ps[16 k + j]) unpacked into pad.
  void unpack(const uint16_t* ps) {
    for (int j = 0; j < 16; ++j) {
      for (int k = 0; k < kMmaK; ++k) pad[j][k] = ps[16 * k + j];
      src[j] = reinterpret_cast<const bf16*>(pad[j]);
    }
  }
  StepSources(const bf16* const rows[16], int k0, int K) {
    for (int j = 0; j < 16; ++j) {
      src[j] = rows[j] + k0;
      if (k0 + kMmaK > K) {
        std::memset(pad[j], 0, sizeof(pad[j]));
        std::memcpy(pad[j], rows[j] + k0, static_cast<size_t>(K - k0) * sizeof(bf16));
        src[j] = reinterpret_cast<const bf16*>(pad[j]);
      }
    }
  }
};

// Rule 7: lane j of `lanes` (bit j) runs the twin's step from c[j] on the w row
// src.src[lane_row[j]] (its step's 16 values) and x row xrow's values k0 .. k0 +
// 15 (+0 past K).
inline void twin_lanes(uint32_t lanes, uint32_t* c, const StepSources& src, const int* lane_row,
                       const bf16* xrow, int k0, int K) {
  bf16 pad[kMmaK];
  const bf16* xs = xrow + k0;
  if (k0 + kMmaK > K) {
    for (int i = 0; i < kMmaK; ++i) pad[i] = k0 + i < K ? xrow[k0 + i] : bf16{0};
    xs = pad;
  }
  for (int j = 0; j < 16; ++j)
    if ((lanes >> j) & 1) c[j] = mma_step_bits(c[j], src.src[lane_row[j]], xs);
}

// Per x row m and step: whether any of its 16 values is inf or NaN (that step
// of that row runs the twin's step on every lane).
struct XSteps {
  int steps = 0;
  std::vector<uint8_t> special;  // [m][steps]
  explicit XSteps(const Args& a) : steps((a.K + kMmaK - 1) / kMmaK) {
    special.assign(static_cast<size_t>(steps) * a.m_rows, 0);
    for (int m = 0; m < a.m_rows; ++m)
      for (int k = 0; k < a.K; ++k)
        if ((a.x[m * a.x_stride + k].bits & 0x7f80u) == 0x7f80u)
          special[static_cast<size_t>(m) * steps + k / kMmaK] = 1;
  }
  bool at(int m, int s) const { return special[static_cast<size_t>(m) * steps + s] != 0; }
};

// Block b's results: bits[m * 16 + lane] holds the chain of row b * 16 +
// lane_row[lane] against x row m; the real rows go to out.
inline void store_block(const Args& a, int64_t b, const int (&lane_row)[16], const uint32_t* bits) {
  const int64_t n0 = b * 16;
  const int valid = static_cast<int>(std::min<int64_t>(16, a.n_rows - n0));
  for (int m = 0; m < a.m_rows; ++m)
    for (int lane = 0; lane < 16; ++lane)
      if (lane_row[lane] < valid)
        a.out[m * a.out_stride + n0 + lane_row[lane]] =
            bits_f32(bits[16 * static_cast<size_t>(m) + lane]);
}

// Blocks [block_begin, block_end) of 16 w rows, the last one's padding lanes
// repeating its last real row: run(rows, bits) leaves in bits[m * 16 + lane] the
// chain's fp32 bits of row rows[lane_row[lane]] against x row m; the real rows
// go to out.
template <class Run>
void block_rows(const Args& a, int64_t block_begin, int64_t block_end, const int (&lane_row)[16],
                Run&& run) {
  std::vector<uint32_t> bits(static_cast<size_t>(a.m_rows) * 16);
  for (int64_t b = block_begin; b < block_end; ++b) {
    const int64_t n0 = b * 16;
    const int valid = static_cast<int>(std::min<int64_t>(16, a.n_rows - n0));
    const bf16* rows[16];
    for (int j = 0; j < 16; ++j) rows[j] = a.w + (n0 + std::min(j, valid - 1)) * a.w_stride;
    run(rows, bits.data());
    store_block(a, b, lane_row, bits.data());
  }
}

// ---- AVX2: 16 rows in two vectors of 8 int32 lanes ---------------------------------
// Exponents are kept "biased by 254" (the sum of two bf16 exponent fields): a
// bf16's field counts as max(field, 1) (zero and subnormal: -126), a product's
// PE = fa + fb = pe + 254, c's EC = max(field, 1) + 127 = ec + 254, the floor
// -133 is 121, and E' = E + 254.

// The exponent (field, biased) given to a zero bf16: any product with a zero
// factor has PE <= 255 + kZeroExp < 121 (never sets E), and a shift count
// E' - PE >= 121 - 2 * kZeroExp >= 32 (its term is 0).
constexpr int kZeroExp = -1000;

// The x rows decoded once per call: per row m and k (padded to whole steps with
// +0): the 8-bit significand, max(field, 1) (kZeroExp for +-0), the sign as a 0 /
// -1 mask; for the fp32 form (avx2_fast_exp / avx2_fast_terms) the value as fp32 and max(field, 1)
// - 127 (kZeroExp - 127 for +-0) in both 16-bit halves of a dword.
struct XInt : XSteps {
  std::vector<int32_t> sig, exp, neg;  // [m][steps * 16]
  std::vector<float> val;              // [m][steps * 16]
  std::vector<uint32_t> exp2;          // [m][steps * 16]

  explicit XInt(const Args& a) : XSteps(a) {
    const size_t kp = static_cast<size_t>(steps) * kMmaK;
    sig.assign(kp * a.m_rows, 0);
    exp.assign(kp * a.m_rows, kZeroExp);
    neg.assign(kp * a.m_rows, 0);
    val.assign(kp * a.m_rows, 0.0f);
    exp2.assign(kp * a.m_rows, static_cast<uint16_t>(kZeroExp) * 0x10001u);
    for (int m = 0; m < a.m_rows; ++m)
      for (int k = 0; k < a.K; ++k) {
        const uint16_t h = a.x[m * a.x_stride + k].bits;
        const size_t i = m * kp + k;
        sig[i] = static_cast<int32_t>(mma_detail::bf16_sig(h));
        exp[i] = (h & 0x7fffu) == 0 ? kZeroExp : mma_detail::bf16_exp(h) + 127;
        neg[i] = (h & 0x8000u) != 0 ? -1 : 0;
        val[i] = to_f32(a.x[m * a.x_stride + k]);
        exp2[i] = static_cast<uint16_t>(exp[i] - 127) * 0x10001u;
      }
  }
};

// Bits of fp32(v * 2^(E' - 254 - 25)) truncated toward zero (mma_detail::to_f32_trunc)
// for 4 lanes: v an exact integer in fp64 (|v| < 2^33), E' in int64 lanes.
SD_AVX2 inline __m256i finish4(__m256d v, __m256i e64) {
  // 2^(E - 25) = 2^(E' - 279): E' in [121, 510] gives a normal fp64 scale, and
  // y = v * scale is exact (|v| < 2^33 has at most 33 significant bits; |y| lies
  // in [2^-158, 2^262], inside the fp64 normal range).
  const __m256d scale = _mm256_castsi256_pd(
      _mm256_slli_epi64(_mm256_add_epi64(e64, _mm256_set1_epi64x(1023 - 279)), 52));
  const __m256d y = _mm256_mul_pd(v, scale);
  const __m256i yb = _mm256_castpd_si256(y);
  const __m256i mag = _mm256_and_si256(yb, _mm256_set1_epi64x(0x7fffffffffffffffll));
  // Normal fp32 range: the fp64 exponent rebiased (1023 -> 127) and the top 23 of
  // the 52 fraction bits (the cut drops the rest: truncation of the magnitude).
  const __m256i r =
      _mm256_sub_epi64(_mm256_srli_epi64(mag, 29), _mm256_set1_epi64x(int64_t{1023 - 127} << 23));
  const __m256i ovf =
      _mm256_cmpgt_epi64(r, _mm256_set1_epi64x((int64_t{255} << 23) - 1));  // exponent > 127
  const __m256i sub =
      _mm256_cmpgt_epi64(_mm256_set1_epi64x(int64_t{1} << 23), r);  // below 2^-126 (or 0)
  // Subnormal: |y| / 2^-149 < 2^23 exactly, truncated by the conversion.
  const __m256i subv = _mm256_cvtepi32_epi64(
      _mm256_cvttpd_epi32(_mm256_mul_pd(_mm256_castsi256_pd(mag), _mm256_set1_pd(0x1p149))));
  __m256i res = _mm256_blendv_epi8(r, subv, sub);
  res = _mm256_blendv_epi8(res, _mm256_set1_epi64x(0x7f800000), ovf);
  // The sign only on a nonzero magnitude: zero, or truncated to zero, is +0.
  const __m256i nz = _mm256_cmpgt_epi64(res, _mm256_setzero_si256());
  const __m256i sign =
      _mm256_and_si256(_mm256_srli_epi64(yb, 32), _mm256_set1_epi64x(0x80000000ll));
  return _mm256_or_si256(res, _mm256_and_si256(sign, nz));
}

// One step of one x row for 8 lanes: W1[k] = sig | PEw << 16 (PEw = max(field, 1),
// or kZeroExp for a zero), W2[k] = the sign as a 0 / -1 mask; c = the lanes'
// fp32 bits; returns the new bits (lanes with inf / NaN are fixed by the caller).
SD_AVX2 inline __m256i step8(const __m256i* W1, const __m256i* W2, const int32_t* xs,
                             const int32_t* xe, const int32_t* xn, __m256i c) {
  const __m256i kff = _mm256_set1_epi32(0xff);
  // Rule 3: E' = max(121, EC if c != 0, PE of each nonzero product). A zero
  // factor has exponent kZeroExp, so its PE is below 121 and never the max.
  const __m256i cf = _mm256_and_si256(_mm256_srli_epi32(c, 23), kff);
  const __m256i ec =
      _mm256_add_epi32(_mm256_max_epi32(cf, _mm256_set1_epi32(1)), _mm256_set1_epi32(127));
  const __m256i c_zero = _mm256_cmpeq_epi32(_mm256_and_si256(c, _mm256_set1_epi32(0x7fffffff)),
                                            _mm256_setzero_si256());
  __m256i E =
      _mm256_max_epi32(_mm256_set1_epi32(kMmaMinExp + 254), _mm256_andnot_si256(c_zero, ec));
  __m256i PE[kMmaK];
  for (int k = 0; k < kMmaK; ++k) {
    PE[k] = _mm256_add_epi32(_mm256_srai_epi32(W1[k], 16), _mm256_set1_epi32(xe[k]));
    E = _mm256_max_epi32(E, PE[k]);
  }
  // Rules 4-5: T = (P << 11) >> (E' - PE) in units of 2^(E - 25): P = sig * sx <=
  // 65025 exact (pmaddwd; the exponent half meets 0), P << 11 < 2^27; the shift
  // truncates the magnitude, a count of 32 or more gives 0 (a zero product has a
  // count of at least 121 - 2 * kZeroExp); then the sign. |sum| <= 16 * 65025 * 2^11 < 2^31.
  __m256i acc = _mm256_setzero_si256();
  for (int k = 0; k < kMmaK; ++k) {
    const __m256i p = _mm256_madd_epi16(W1[k], _mm256_set1_epi32(xs[k]));
    const __m256i t = _mm256_srlv_epi32(_mm256_slli_epi32(p, 11), _mm256_sub_epi32(E, PE[k]));
    const __m256i sg = _mm256_xor_si256(W2[k], _mm256_set1_epi32(xn[k]));
    acc = _mm256_add_epi32(acc, _mm256_sub_epi32(_mm256_xor_si256(t, sg), sg));
  }
  // c's term: sig << 2 >> (E' - EC) (< 2^26; 0 for c = 0), with c's sign.
  const __m256i csig =
      _mm256_or_si256(_mm256_and_si256(c, _mm256_set1_epi32(0x7fffff)),
                      _mm256_andnot_si256(_mm256_cmpeq_epi32(cf, _mm256_setzero_si256()),
                                          _mm256_set1_epi32(0x800000)));
  const __m256i cs = _mm256_srai_epi32(c, 31);
  __m256i tc = _mm256_srlv_epi32(_mm256_slli_epi32(csig, 2), _mm256_sub_epi32(E, ec));
  tc = _mm256_sub_epi32(_mm256_xor_si256(tc, cs), cs);
  // Rule 6 per half: the two int32 parts add exactly in fp64.
  const __m256i lo = finish4(_mm256_add_pd(_mm256_cvtepi32_pd(_mm256_castsi256_si128(acc)),
                                           _mm256_cvtepi32_pd(_mm256_castsi256_si128(tc))),
                             _mm256_cvtepi32_epi64(_mm256_castsi256_si128(E)));
  const __m256i hi = finish4(_mm256_add_pd(_mm256_cvtepi32_pd(_mm256_extracti128_si256(acc, 1)),
                                           _mm256_cvtepi32_pd(_mm256_extracti128_si256(tc, 1))),
                             _mm256_cvtepi32_epi64(_mm256_extracti128_si256(E, 1)));
  // Low dwords of lo and hi: [l0 l1 h0 h1 | l2 l3 h2 h3] -> lanes 0..7.
  return _mm256_permute4x64_epi64(
      _mm256_castps_si256(_mm256_shuffle_ps(_mm256_castsi256_ps(lo), _mm256_castsi256_ps(hi),
                                            _MM_SHUFFLE(2, 0, 2, 0))),
      _MM_SHUFFLE(3, 1, 2, 0));
}

// 8 x 8 transposes of 16-bit values inside each 128-bit half: in[j] = row j's 8
// values (low half) and row j + 8's (high half); out[k] = value k of rows 0..7
// (low half) and of rows 8..15 (high half).
SD_AVX2 inline void transpose8x8x2(const __m256i* in, __m256i* out) {
  const __m256i t0 = _mm256_unpacklo_epi16(in[0], in[1]), t1 = _mm256_unpackhi_epi16(in[0], in[1]);
  const __m256i t2 = _mm256_unpacklo_epi16(in[2], in[3]), t3 = _mm256_unpackhi_epi16(in[2], in[3]);
  const __m256i t4 = _mm256_unpacklo_epi16(in[4], in[5]), t5 = _mm256_unpackhi_epi16(in[4], in[5]);
  const __m256i t6 = _mm256_unpacklo_epi16(in[6], in[7]), t7 = _mm256_unpackhi_epi16(in[6], in[7]);
  const __m256i u0 = _mm256_unpacklo_epi32(t0, t2), u1 = _mm256_unpackhi_epi32(t0, t2);
  const __m256i u2 = _mm256_unpacklo_epi32(t1, t3), u3 = _mm256_unpackhi_epi32(t1, t3);
  const __m256i u4 = _mm256_unpacklo_epi32(t4, t6), u5 = _mm256_unpackhi_epi32(t4, t6);
  const __m256i u6 = _mm256_unpacklo_epi32(t5, t7), u7 = _mm256_unpackhi_epi32(t5, t7);
  out[0] = _mm256_unpacklo_epi64(u0, u4), out[1] = _mm256_unpackhi_epi64(u0, u4);
  out[2] = _mm256_unpacklo_epi64(u1, u5), out[3] = _mm256_unpackhi_epi64(u1, u5);
  out[4] = _mm256_unpacklo_epi64(u2, u6), out[5] = _mm256_unpackhi_epi64(u2, u6);
  out[6] = _mm256_unpacklo_epi64(u3, u7), out[7] = _mm256_unpackhi_epi64(u3, u7);
}

// The fp32 form of one step of one x row for all 16 lanes, where it is exact,
// in two parts: avx2_fast_exp (rule 3: E, and whether every lane's E is in the
// form's range) and avx2_fast_terms (rules 4-6); either returns false where the
// form does not apply, and then nothing has changed (the caller runs step8).
// The block runs the first part for all its x rows of a step before the second
// (their work is independent, and E is on the critical path of each row; with
// the row copies below this order measured faster, without them no different:
// docs/mma-twin.md, 2026-12-04 later). Needs
// MXCSR rounding toward zero with neither flush-to-zero nor denormals-are-zero
// (Mxcsr below). code[k]: w's exponents as in step8 (max(field, 1), kZeroExp
// for +-0) in 16-bit lanes, row j in word j; wv[h][k]: w as fp32 in lane order
// kAvx2LaneRow (half h); xv, xe2: x's values and exponent pairs from k0; cm: the
// lanes' fp32 bits (c), which get the result.
//   * Rule 3 in 16-bit lanes, 16 lanes a vector, as E'' = E + 127: a product's
//     code[k] + xe2 is pe + 127 (below 0 for a zero factor), c's exponent field
//     is ec + 127 (zero and subnormal c: -127). The form is taken only where every
//     lane's E'' is in [27, 227], i.e. E in [-100, 100] (c inf or NaN gives 255:
//     not taken); there the floor -133 and a zero or subnormal c (at most -126)
//     cannot be the max, so they are left out. s = 2^(25 - E) and 2^(E - 25) are
//     then normal fp32 numbers.
//   * Rules 4-5: the term of a product is trunc(w * x * s) (vcvttps2dq: truncation
//     toward zero of either sign), in units of 2^(E - 25). w * x is exact (16
//     significant bits) unless it is below 2^-126 (its term is then 0 either
//     way: |w x s| < 2^(-126 + 125)) or past 2^127 (impossible: a nonzero
//     product has pe <= E <= 100); times s it is below 2^27 (pe <= E), exact, or
//     below 2^-126 and so below 1 (term 0). A zero product gives 0. c's term is
//     trunc(c * s) the same way (|c| < 2^(E + 1): below 2^26). The product terms
//     add exactly in int32 (|sum| <= 16 * 65025 * 2^11 < 2^31); adding c's term
//     may wrap, which is checked (then not taken).
//   * Rule 6: the exact int32 sum converted to fp32 rounding toward zero (MXCSR),
//     times 2^(E - 25): exact, because |sum| >= 1 gives at least 2^(E - 25) >=
//     2^-125 (no subnormal result) and at most 2^(31 + 75) (no overflow); a zero
//     sum gives +0.
SD_AVX2 inline bool avx2_fast_exp(const __m256i* code, const uint32_t* xe2, const uint32_t* cm,
                                  int16_t* E_out) {
  const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cm));
  const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cm + 8));
  // c's exponent field in word j (row j): the pack undoes kAvx2LaneRow's order.
  const __m256i cf =
      _mm256_packus_epi32(_mm256_and_si256(_mm256_srli_epi32(c0, 23), _mm256_set1_epi32(0xff)),
                          _mm256_and_si256(_mm256_srli_epi32(c1, 23), _mm256_set1_epi32(0xff)));
  __m256i pe[kMmaK];
  for (int k = 0; k < kMmaK; ++k)
    pe[k] = _mm256_add_epi16(code[k], _mm256_set1_epi32(static_cast<int>(xe2[k])));
  for (int n = kMmaK / 2; n >= 1; n /= 2)
    for (int i = 0; i < n; ++i) pe[i] = _mm256_max_epi16(pe[i], pe[i + n]);
  const __m256i E = _mm256_max_epi16(cf, pe[0]);  // E''
  const __m256i out = _mm256_or_si256(_mm256_cmpgt_epi16(E, _mm256_set1_epi16(100 + 127)),
                                      _mm256_cmpgt_epi16(_mm256_set1_epi16(-100 + 127), E));
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(E_out), E);
  return _mm256_testz_si256(out, out) != 0;
}

// The rest of the fp32 form's step (rules 4-6) from E'' (avx2_fast_exp, all
// lanes in range); false (nothing changed) where c's term makes the sum wrap.
SD_AVX2 inline bool avx2_fast_terms(const __m256 (*wv)[kMmaK], const float* xv, __m256i E,
                                    uint32_t* cm) {
  const __m256i zero = _mm256_setzero_si256();
  const __m256i c0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cm));
  const __m256i c1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cm + 8));
  // s = 2^(25 - E): fp32 exponent field 152 - E = 279 - E''; in kAvx2LaneRow's order.
  const __m256i sw = _mm256_sub_epi16(_mm256_set1_epi16(279), E);
  const __m256i s_bits[2] = {_mm256_slli_epi32(_mm256_unpacklo_epi16(sw, zero), 23),
                             _mm256_slli_epi32(_mm256_unpackhi_epi16(sw, zero), 23)};
  const __m256 s[2] = {_mm256_castsi256_ps(s_bits[0]), _mm256_castsi256_ps(s_bits[1])};
  __m256i acc[2] = {zero, zero};
  for (int k = 0; k < kMmaK; ++k) {
    const __m256 x = _mm256_set1_ps(xv[k]);
    for (int h = 0; h < 2; ++h) {
      acc[h] = _mm256_add_epi32(
          acc[h], _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_mul_ps(wv[h][k], x), s[h])));
      // One chain per half, in registers (GCC would otherwise regroup the integer
      // adds into a tree and spill the terms).
      __asm__("" : "+x"(acc[h]));
    }
  }
  const __m256i c[2] = {c0, c1};
  __m256i sum[2], wrap = zero;
  for (int h = 0; h < 2; ++h) {
    const __m256i tc = _mm256_cvttps_epi32(_mm256_mul_ps(_mm256_castsi256_ps(c[h]), s[h]));
    sum[h] = _mm256_add_epi32(acc[h], tc);
    wrap = _mm256_or_si256(
        wrap, _mm256_and_si256(_mm256_xor_si256(acc[h], sum[h]), _mm256_xor_si256(tc, sum[h])));
  }
  if (_mm256_movemask_ps(_mm256_castsi256_ps(wrap)) != 0) return false;
  for (int h = 0; h < 2; ++h) {
    // 2^(E - 25): exponent field E - 25 + 127 = 254 - (152 - E).
    const __m256 inv_s =
        _mm256_castsi256_ps(_mm256_sub_epi32(_mm256_set1_epi32(254 << 23), s_bits[h]));
    _mm256_storeu_ps(reinterpret_cast<float*>(cm + 8 * h),
                     _mm256_mul_ps(_mm256_cvtepi32_ps(sum[h]), inv_s));
  }
  return true;
}

// MXCSR for avx2_fast_terms while in scope: rounding toward zero, no flush to
// zero, no denormals-are-zero, exceptions masked; the caller's value restored.
struct Mxcsr {
  unsigned saved;
  Mxcsr() : saved(_mm_getcsr()) { _mm_setcsr(0x7f80u); }
  ~Mxcsr() { _mm_setcsr(saved); }
  Mxcsr(const Mxcsr&) = delete;
  Mxcsr& operator=(const Mxcsr&) = delete;
};

// The row of a block of 16 that lane i of the AVX2 kernel holds (half h = i / 8,
// lane i % 8): the 16-bit decode widens with unpacklo / unpackhi, so half 0
// holds rows 0-3 and 8-11, half 1 rows 4-7 and 12-15.
constexpr int kAvx2LaneRow[16] = {0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15};

// A step's 16 x 16 values: v[k] = value k of rows 0-7 (low half), 8-15 (high).
SD_AVX2 inline void load_step16(const StepSources& src, __m256i* v) {
  // in[0][j] = values 0-7 of rows j, j + 8; in[1][j] = values 8-15.
  __m256i in[2][8];
  for (int j = 0; j < 8; ++j)
    for (int q = 0; q < 2; ++q)
      in[q][j] = _mm256_inserti128_si256(
          _mm256_castsi128_si256(
              _mm_loadu_si128(reinterpret_cast<const __m128i*>(src.src[j] + 8 * q))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(src.src[j + 8] + 8 * q)), 1);
  transpose8x8x2(in[0], v);
  transpose8x8x2(in[1], v + 8);
}

// PEw of 16 values in 16-bit lanes: max(field, 1), kZeroExp for +-0.
SD_AVX2 inline __m256i w_code(__m256i h) {
  const __m256i h2 = _mm256_slli_epi16(h, 1);  // the sign dropped
  return _mm256_blendv_epi8(_mm256_max_epi16(_mm256_srli_epi16(h2, 8), _mm256_set1_epi16(1)),
                            _mm256_set1_epi16(kZeroExp),
                            _mm256_cmpeq_epi16(h2, _mm256_setzero_si256()));
}

// step8's form of a step's 16 rows (the rare path, so decoded from the rows
// again): W1 = sig | PEw << 16 (pmaddwd with (sx, 0) gives sig * sx), W2 = the
// sign as a 0 / -1 mask; half h in kAvx2LaneRow's order.
SD_AVX2 __attribute__((noinline)) void int_form_step16(const StepSources& src, __m256i (*W1)[kMmaK],
                                                       __m256i (*W2)[kMmaK]) {
  __m256i v[kMmaK];
  load_step16(src, v);
  const __m256i zero = _mm256_setzero_si256();
  for (int k = 0; k < kMmaK; ++k) {
    const __m256i h = v[k];
    const __m256i f = _mm256_and_si256(_mm256_srli_epi16(h, 7), _mm256_set1_epi16(0xff));
    const __m256i sig =
        _mm256_or_si256(_mm256_and_si256(h, _mm256_set1_epi16(0x7f)),
                        _mm256_andnot_si256(_mm256_cmpeq_epi16(f, zero), _mm256_set1_epi16(0x80)));
    const __m256i sg = _mm256_srai_epi16(h, 15);
    const __m256i pe = w_code(h);
    W1[0][k] = _mm256_unpacklo_epi16(sig, pe);
    W1[1][k] = _mm256_unpackhi_epi16(sig, pe);
    W2[0][k] = _mm256_unpacklo_epi16(sg, sg);
    W2[1][k] = _mm256_unpackhi_epi16(sg, sg);
  }
}

// The AVX2 kernel reads a block's 16 rows through copies of kChunk values of
// each (8 steps). With a row stride that is a multiple of 4 KiB (K = 4096 or
// 12288), the 16 rows' lines fall into one set of the L1 cache (8 ways): read
// 32 bytes a step, every line was evicted before its second half was read, and
// prefetches were evicted before use. Each step copies two rows of the next
// chunk (each line read once, whole) and prefetches the same two rows of the
// chunk after it; the steps read the current chunk's copy (contiguous, and
// apart from the other copy in the low 12 address bits). Past K a copy holds
// zeros (the chain's padding), so every step reads whole steps from it.
constexpr int kChunk = 128;
struct RowChunks {
  alignas(64) uint16_t buf[2][16][kChunk + 48];
  // Copies values k0 .. k0 + kChunk - 1 of row j into buf[b][j] (zeros past K).
  SD_AVX2 void fill(int b, int j, const bf16* row, int k0, int K) {
    const int n = std::min(kChunk, K - k0);
    if (n == kChunk) {
      for (int c = 0; c < kChunk; c += 16)
        _mm256_store_si256(reinterpret_cast<__m256i*>(buf[b][j] + c),
                           _mm256_loadu_si256(reinterpret_cast<const __m256i*>(row + k0 + c)));
      return;
    }
    std::memset(buf[b][j], 0, kChunk * sizeof(bf16));
    std::memcpy(buf[b][j], row + k0, static_cast<size_t>(n) * sizeof(bf16));
  }
};
static_assert(kChunk == 8 * kMmaK, "two rows of the next chunk a step");

// A packed block's steps are read kPackAhead steps (4 KB) ahead of use.
constexpr int kPackAhead = 8;

// One block of 16 w rows against every x row: bits[m][i] holds the chain's fp32
// bits of row kAvx2LaneRow[i]. The rows are rows[0..15] (kPacked false: read
// through RowChunks) or the packed block pk (MmaPacked::block; rows unused). Runs
// under Mxcsr (avx2_rows); not inlined, so that no floating-point operation moves
// across the MXCSR change.
template <bool kPacked>
SD_AVX2 __attribute__((noinline)) void avx2_block(const bf16* const rows[16], const uint16_t* pk,
                                                  const Args& a, const XInt& xd, int16_t* E,
                                                  uint8_t* fast, uint32_t* bits) {
  const int K = a.K;
  const size_t kp = static_cast<size_t>(xd.steps) * kMmaK;
  for (int m = 0; m < 2 * a.m_rows; ++m)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(bits + 8 * m), _mm256_setzero_si256());
  const __m256i kff = _mm256_set1_epi16(0xff);
  const __m256i zero = _mm256_setzero_si256();
  RowChunks chunks;
  if constexpr (!kPacked)
    for (int j = 0; j < 16; ++j) chunks.fill(0, j, rows[j], 0, K);
  for (int s = 0; s < xd.steps; ++s) {
    const int k0 = s * kMmaK;
    // The step's rows for the rare paths (int_form_step16, twin_lanes): the row
    // copies, or the packed step unpacked when first needed.
    StepSources src;
    const uint16_t* ps = nullptr;
    __m256i v[kMmaK];
    if constexpr (kPacked) {
      ps = pk + static_cast<int64_t>(s) * 256;
      if (s + kPackAhead < xd.steps)
        for (int q = 0; q < 256; q += 32)
          _mm_prefetch(reinterpret_cast<const char*>(ps + kPackAhead * 256 + q), _MM_HINT_T0);
      for (int k = 0; k < kMmaK; ++k)
        v[k] = _mm256_load_si256(reinterpret_cast<const __m256i*>(ps + 16 * k));
    } else {
      // Two rows of the next chunk copied, the same two of the chunk after it
      // prefetched (one prefetch a line: 32 values).
      const int t = s % 8, next = (k0 / kChunk + 1) * kChunk;
      for (int j = 2 * t; j < 2 * t + 2; ++j) {
        if (next < K) chunks.fill((k0 / kChunk + 1) & 1, j, rows[j], next, K);
        if (next + kChunk < K)
          for (int q = 0; q < kChunk; q += 32)
            _mm_prefetch(reinterpret_cast<const char*>(rows[j] + next + kChunk + q), _MM_HINT_T1);
      }
      for (int j = 0; j < 16; ++j)
        src.src[j] = reinterpret_cast<const bf16*>(chunks.buf[(k0 / kChunk) & 1][j] + k0 % kChunk);
      load_step16(src, v);
    }
    bool have_src = !kPacked;
    auto step_src = [&]() -> const StepSources& {
      if (!have_src) {
        src.unpack(ps);
        have_src = true;
      }
      return src;
    };
    // Per k in 16-bit lanes: PEw = max(field, 1), kZeroExp for +-0; w as fp32 (the
    // bf16 bits on top, widened in kAvx2LaneRow's order).
    __m256i code[kMmaK];
    __m256 wv[2][kMmaK];
    __m256i fmax = zero;
    for (int k = 0; k < kMmaK; ++k) {
      const __m256i h = v[k];
      const __m256i f = _mm256_srli_epi16(_mm256_slli_epi16(h, 1), 8);  // the field
      code[k] = w_code(h);
      wv[0][k] = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, h));
      wv[1][k] = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, h));
      fmax = _mm256_max_epu16(fmax, f);
    }
    const __m256i spec = _mm256_cmpeq_epi16(fmax, kff);
    const uint32_t wspec =
        static_cast<uint32_t>(
            _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(spec, spec)))) |
        static_cast<uint32_t>(
            _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(spec, spec))))
            << 8;
    // step8's form, decoded (again from the rows) when some x row needs it.
    __m256i W1[2][kMmaK], W2[2][kMmaK];
    bool int_form = false;

    // Rule 3 of the fp32 form for every x row first.
    for (int m = 0; m < a.m_rows; ++m)
      fast[m] = wspec == 0 && !xd.at(m, s) &&
                avx2_fast_exp(code, xd.exp2.data() + m * kp + k0, bits + 16 * m, E + 16 * m);
    for (int m = 0; m < a.m_rows; ++m) {
      const bf16* xrow = a.x + m * a.x_stride;
      uint32_t* cm = bits + 16 * m;
      if (xd.at(m, s)) {
        twin_lanes(0xffffu, cm, step_src(), kAvx2LaneRow, xrow, k0, K);
        continue;
      }
      const size_t i = m * kp + k0;
      if (fast[m] &&
          avx2_fast_terms(wv, xd.val.data() + i,
                          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(E + 16 * m)), cm))
        continue;
      if (!int_form) {
        int_form_step16(step_src(), W1, W2);
        int_form = true;
      }
      alignas(32) uint32_t c_old[16];
      uint32_t special = wspec;
      for (int h = 0; h < 2; ++h) {
        const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cm + 8 * h));
        _mm256_store_si256(reinterpret_cast<__m256i*>(c_old + 8 * h), c);
        const __m256i d =
            step8(W1[h], W2[h], xd.sig.data() + i, xd.exp.data() + i, xd.neg.data() + i, c);
        // Rule 7: a lane with inf or NaN in c runs the twin's step (as one in w).
        const __m256i cf = _mm256_and_si256(_mm256_srli_epi32(c, 23), _mm256_set1_epi32(0xff));
        special |= static_cast<uint32_t>(_mm256_movemask_ps(
                       _mm256_castsi256_ps(_mm256_cmpeq_epi32(cf, _mm256_set1_epi32(0xff)))))
                   << (8 * h);
        _mm256_storeu_si256(reinterpret_cast<__m256i*>(cm + 8 * h), d);
      }
      if (special != 0) {
        for (int j = 0; j < 16; ++j)
          if ((special >> j) & 1) cm[j] = c_old[j];
        twin_lanes(special, cm, step_src(), kAvx2LaneRow, xrow, k0, K);
      }
    }
  }
}

void avx2_rows(const Args& a, const XInt& xd, int64_t block_begin, int64_t block_end) {
  const Mxcsr mxcsr;
  std::vector<int16_t> E(16 * static_cast<size_t>(a.m_rows));  // per x row: avx2_fast_exp's E
  std::vector<uint8_t> fast(static_cast<size_t>(a.m_rows));
  block_rows(a, block_begin, block_end, kAvx2LaneRow,
             [&](const bf16* const rows[16], uint32_t* bits) {
               avx2_block<false>(rows, nullptr, a, xd, E.data(), fast.data(), bits);
             });
}

// The same on slice `slice` of packed blocks (a.w unused, a.K the slice's length).
void avx2_packed_rows(const MmaPacked& w, int slice, const Args& a, const XInt& xd,
                      int64_t block_begin, int64_t block_end) {
  const Mxcsr mxcsr;
  std::vector<int16_t> E(16 * static_cast<size_t>(a.m_rows));
  std::vector<uint8_t> fast(static_cast<size_t>(a.m_rows));
  std::vector<uint32_t> bits(static_cast<size_t>(a.m_rows) * 16);
  for (int64_t b = block_begin; b < block_end; ++b) {
    avx2_block<true>(nullptr, w.block(b, slice), a, xd, E.data(), fast.data(), bits.data());
    store_block(a, b, kAvx2LaneRow, bits.data());
  }
}

// ---- AVX-512: the terms truncated by fp64 fused multiply-adds -------------------
// 16 rows in two vectors of 8 fp64 lanes (lane j: row j). Per step and x row:
//   * rule 3 in 16-bit lanes, two k a vector: a product's code is
//     code(pe) = 16 (pe + 1050) = the w part 16 max(field, 1) (kWZeroCode for +-0)
//     plus the x part 16 (max(field, 1) + 796) (0 for +-0): a zero factor keeps
//     the sum below kFloorCode, so zero products never set E. E's code starts at
//     c's (kFloorCode for c = 0, at least kSubCode: a subnormal c counts at -126)
//     and takes the max of the 16 products' codes. code(E) is the top 16 bits of
//     the fp64 bits of bias = 2^(E + 27), so the bias is a word permute.
//   * rules 4-5: the exact sum of the truncated terms is held as A - B, A and B
//     starting at the bias, A adding the positive terms, B subtracting the
//     negative ones, each by one fused multiply-add rounding toward zero. A and B
//     stay in [2^(E + 27), 2^(E + 28)) (the terms add less than 16 * 2^(E + 2) +
//     2^(E + 1) < 2^(E + 27)), where the fp64 spacing is 2^(E - 25): so the
//     product (exact inside the fma), a multiple of the spacing added to a
//     nonnegative value below 2^(E + 2), rounded toward zero, adds exactly the
//     term truncated toward zero (rule 4), and A - B is exact (Sterbenz). Which of
//     w+ (w where w > 0, else 0) and w- goes to A follows the sign of x; zero
//     products add nothing. c's term enters the same way: A = bias + max(c, 0),
//     B = bias - min(c, 0), rounded toward zero (|c| < 2^(E + 1)).
//   * rule 6: A - B (exact, |sum| < 2^(E + 7)) converted to fp32 rounding toward
//     zero (vcvtpd2ps {rz-sae}: the magnitude truncated, subnormal results kept
//     as multiples of 2^-149), then back to fp64 (exact) as the next step's c.
//     Where the rules differ from the conversion: |sum| >= 2^128 gives +-infinity
//     (the conversion gives +-FLT_MAX; possible only where E > 121, checked on
//     E's code), and a result that truncated to zero is +0: a -0 inside the chain
//     acts as +0 (a zero c counts nowhere), so the sign is cleared once, on the
//     chain's result. MXCSR's flush-to-zero or denormals-are-zero would flush
//     subnormal weights and results: the kernel is not run when either is set
//     (mma_gemm_rows_with).

constexpr int16_t kWZeroCode = -8192;                 // w = +-0: + any x part < kFloorCode
constexpr int16_t kFloorCode = 16 * (-133 + 1050);    // E's floor
constexpr int16_t kSubCode = 16 * (-126 + 1050);      // a subnormal c
constexpr int16_t kOverflowCode = 16 * (121 + 1050);  // E above this: the sum may reach 2^128
constexpr int kFma64Rz = _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC;
// Word permutes: word 3 of each fp64 lane of c (lanes 0-7, then 8-15) into both
// words of dword j; E's word 2j into word 3 of fp64 lane j (kBiasWords[0]) or
// lane j - 8 (kBiasWords[1]).
alignas(64) constexpr int16_t kCWords[32] = {3,  3,  7,  7,  11, 11, 15, 15, 19, 19, 23,
                                             23, 27, 27, 31, 31, 35, 35, 39, 39, 43, 43,
                                             47, 47, 51, 51, 55, 55, 59, 59, 63, 63};
alignas(64) constexpr int16_t kBiasWords[2][32] = {
    {0, 0, 0, 0, 0, 0, 0, 2,  0, 0, 0, 4,  0, 0, 0, 6,
     0, 0, 0, 8, 0, 0, 0, 10, 0, 0, 0, 12, 0, 0, 0, 14},
    {0, 0, 0, 16, 0, 0, 0, 18, 0, 0, 0, 20, 0, 0, 0, 22,
     0, 0, 0, 24, 0, 0, 0, 26, 0, 0, 0, 28, 0, 0, 0, 30}};

// The x rows decoded once per call, per row m and k (padded to whole steps with
// +0): the value in fp64; where in Fma16::w (bytes) the w rows whose products go
// to A (w+ for x >= +0, w- for x <= -0) and to B (the other) are; and per pair of
// k (2i, 2i + 1) the two codes' x parts as one dword.
struct XFma : XSteps {
  std::vector<double> v;        // [m][steps * 16]
  std::vector<int32_t> w_at;    // [m][steps * 16][2]: A's, B's
  std::vector<uint32_t> code2;  // [m][steps * 8]

  explicit XFma(const Args& a) : XSteps(a) {
    const size_t kp = static_cast<size_t>(steps) * kMmaK;
    v.assign(kp * a.m_rows, 0.0);
    w_at.assign(2 * kp * a.m_rows, 0);
    code2.assign(kp / 2 * a.m_rows, 0);
    for (int m = 0; m < a.m_rows; ++m)
      for (int k = 0; k < static_cast<int>(kp); ++k) {  // the padding is +0
        const bf16 x = k < a.K ? a.x[m * a.x_stride + k] : bf16{0};
        const size_t i = m * kp + k;
        v[i] = static_cast<double>(to_f32(x));  // exact (subnormal bf16 included)
        const int32_t at = static_cast<int32_t>(sizeof(__m512d) * 4 * (k % kMmaK)),
                      half = static_cast<int32_t>(sizeof(__m512d) * 2);
        w_at[2 * i] = at + ((x.bits & 0x8000u) != 0 ? half : 0);
        w_at[2 * i + 1] = at + ((x.bits & 0x8000u) != 0 ? 0 : half);
        const uint32_t code =
            (x.bits & 0x7fffu) == 0
                ? 0u
                : static_cast<uint32_t>(16 * (std::max((x.bits >> 7) & 0xff, 1) + 796));
        code2[i / 2] |= code << (16 * (k % 2));
      }
  }
};

// One step's 16 rows decoded for fma_step.
struct alignas(64) Fma16 {
  __m512d w[kMmaK][4];      // per k: w+ of rows 0-7, of rows 8-15, then w- of both
  __m512i code[kMmaK / 2];  // per pair i: dword j = w parts of (w[j][2i], w[j][2i + 1])
  uint32_t special = 0;     // lane j: some w[j][k] is inf or NaN
};

SD_AVX512 inline void decode_fma16(const bf16* const rows[16], int k0, int K, Fma16& d) {
  const StepSources src(rows, k0, K);
  // z[j]: row j's 8 dwords (values 2i, 2i + 1) in the low half, row j + 8's in the high.
  __m512i z[8], t[8];
  for (int j = 0; j < 8; ++j)
    z[j] = _mm512_inserti64x4(
        _mm512_castsi256_si512(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(src.src[j]))),
        _mm256_loadu_si256(reinterpret_cast<const __m256i*>(src.src[j + 8])), 1);
  // 8 x 8 dword transposes inside each 256-bit half: t[i] lane j = dword i of row j.
  {
    __m512i p[8], q[8];
    for (int j = 0; j < 4; ++j) {
      p[2 * j] = _mm512_unpacklo_epi32(z[2 * j], z[2 * j + 1]);
      p[2 * j + 1] = _mm512_unpackhi_epi32(z[2 * j], z[2 * j + 1]);
    }
    for (int j = 0; j < 2; ++j) {
      q[4 * j] = _mm512_unpacklo_epi64(p[4 * j], p[4 * j + 2]);          // dwords 0, 4
      q[4 * j + 1] = _mm512_unpackhi_epi64(p[4 * j], p[4 * j + 2]);      // 1, 5
      q[4 * j + 2] = _mm512_unpacklo_epi64(p[4 * j + 1], p[4 * j + 3]);  // 2, 6
      q[4 * j + 3] = _mm512_unpackhi_epi64(p[4 * j + 1], p[4 * j + 3]);  // 3, 7
    }
    const __m512i lo = _mm512_setr_epi64(0, 1, 8, 9, 4, 5, 12, 13);
    const __m512i hi = _mm512_setr_epi64(2, 3, 10, 11, 6, 7, 14, 15);
    for (int i = 0; i < 4; ++i) {
      t[i] = _mm512_permutex2var_epi64(q[i], lo, q[4 + i]);
      t[i + 4] = _mm512_permutex2var_epi64(q[i], hi, q[4 + i]);
    }
  }
  const __m512d zero = _mm512_setzero_pd();
  __m512i fmax = _mm512_setzero_si512();
  for (int i = 0; i < kMmaK / 2; ++i) {
    // 16 * field in each 16-bit half; the w part: 16 max(field, 1), kWZeroCode for +-0.
    const __m512i f16 = _mm512_and_si512(_mm512_srli_epi16(t[i], 3), _mm512_set1_epi16(0x0ff0));
    d.code[i] = _mm512_mask_max_epi16(_mm512_set1_epi16(kWZeroCode),
                                      _mm512_test_epi16_mask(t[i], _mm512_set1_epi16(0x7fff)), f16,
                                      _mm512_set1_epi16(16));
    fmax = _mm512_max_epu16(fmax, f16);
    // The values as fp32 (bf16 bits on top: exact), then fp64 (exact), split by sign.
    const __m512 v32[2] = {_mm512_castsi512_ps(_mm512_slli_epi32(t[i], 16)),
                           _mm512_castsi512_ps(_mm512_and_si512(
                               t[i], _mm512_set1_epi32(static_cast<int>(0xffff0000u))))};
    for (int e = 0; e < 2; ++e) {
      __m512d* w = d.w[2 * i + e];
      const __m512d v_lo = _mm512_cvtps_pd(_mm512_castps512_ps256(v32[e]));
      const __m512d v_hi = _mm512_cvtps_pd(_mm512_extractf32x8_ps(v32[e], 1));
      w[0] = _mm512_max_pd(v_lo, zero);
      w[1] = _mm512_max_pd(v_hi, zero);
      w[2] = _mm512_min_pd(v_lo, zero);
      w[3] = _mm512_min_pd(v_hi, zero);
    }
  }
  const __m512i spec = _mm512_movm_epi16(_mm512_cmpeq_epi16_mask(fmax, _mm512_set1_epi16(0x0ff0)));
  d.special = _mm512_test_epi32_mask(spec, spec);
}

// One step of one x row (xv, xa, xc: its values, w places and codes from k0) for
// the 16 lanes of d: c[0], c[1] hold lanes 0-7, 8-15 of the chain and get the
// step's results (lanes with inf / NaN are fixed by the caller). Returns the
// lanes set to +-infinity by overflow.
SD_AVX512 inline uint32_t fma_step(const Fma16& d, const double* xv, const int32_t* xa,
                                   const uint32_t* xc, __m512d* c) {
  // c's code: the fp64 exponent field of word 3 of each lane, into both words
  // of dword j; code(ec) = 16 field + 432, at least kSubCode; kFloorCode for c = 0.
  const __m512i c_words = _mm512_permutex2var_epi16(
      _mm512_castpd_si512(c[0]), _mm512_loadu_si512(kCWords), _mm512_castpd_si512(c[1]));
  const __m512i c_field = _mm512_and_si512(c_words, _mm512_set1_epi16(0x7ff0));
  __m512i E = _mm512_mask_max_epi16(
      _mm512_set1_epi16(kFloorCode), _mm512_test_epi16_mask(c_words, _mm512_set1_epi16(0x7ff0)),
      _mm512_add_epi16(c_field, _mm512_set1_epi16(432)), _mm512_set1_epi16(kSubCode));
  __m512i pe[kMmaK / 2];  // the products' codes, pairs of k; their max as a tree
  for (int i = 0; i < kMmaK / 2; ++i)
    pe[i] = _mm512_add_epi16(d.code[i], _mm512_set1_epi32(static_cast<int>(xc[i])));
  for (int n = kMmaK / 4; n >= 1; n /= 2)
    for (int i = 0; i < n; ++i) pe[i] = _mm512_max_epi16(pe[i], pe[i + n]);
  E = _mm512_max_epi16(E, pe[0]);
  E = _mm512_max_epi16(E, _mm512_srli_epi32(E, 16));  // lane j's E: the low word of dword j
  const __mmask32 big = _mm512_cmpgt_epi16_mask(E, _mm512_set1_epi16(kOverflowCode));
  // bias = 2^(E + 27): code(E) as the top word of each fp64 lane, the rest 0.
  const __m512d bias[2] = {_mm512_castsi512_pd(_mm512_maskz_permutexvar_epi16(
                               0x88888888u, _mm512_loadu_si512(kBiasWords[0]), E)),
                           _mm512_castsi512_pd(_mm512_maskz_permutexvar_epi16(
                               0x88888888u, _mm512_loadu_si512(kBiasWords[1]), E))};
  // Two sums per half (even and odd k: shorter dependency chains); c's term in
  // the even one.
  const __m512d zero = _mm512_setzero_pd();
  __m512d A[2][2], B[2][2];
  for (int h = 0; h < 2; ++h) {
    A[0][h] = _mm512_add_round_pd(bias[h], _mm512_max_pd(c[h], zero), kFma64Rz);
    B[0][h] = _mm512_sub_round_pd(bias[h], _mm512_min_pd(c[h], zero), kFma64Rz);
    A[1][h] = bias[h];
    B[1][h] = bias[h];
  }
  const char* w0 = reinterpret_cast<const char*>(d.w);
#pragma GCC unroll 16
  for (int k = 0; k < kMmaK; ++k) {
    const __m512d x = _mm512_set1_pd(xv[k]);
    // The positive products (w+ or w-, as x's sign says) to A, the negative ones from B.
    const __m512d* wa = reinterpret_cast<const __m512d*>(w0 + xa[2 * k]);
    const __m512d* wb = reinterpret_cast<const __m512d*>(w0 + xa[2 * k + 1]);
    A[k % 2][0] = _mm512_fmadd_round_pd(wa[0], x, A[k % 2][0], kFma64Rz);
    A[k % 2][1] = _mm512_fmadd_round_pd(wa[1], x, A[k % 2][1], kFma64Rz);
    B[k % 2][0] = _mm512_fnmadd_round_pd(wb[0], x, B[k % 2][0], kFma64Rz);
    B[k % 2][1] = _mm512_fnmadd_round_pd(wb[1], x, B[k % 2][1], kFma64Rz);
  }
  uint32_t overflow = 0;
  for (int h = 0; h < 2; ++h) {
    // Each difference is exact (Sterbenz), and so is their sum (multiples of
    // 2^(E - 25) below 2^(E + 8) in magnitude).
    const __m512d sum =
        _mm512_add_pd(_mm512_sub_pd(A[0][h], B[0][h]), _mm512_sub_pd(A[1][h], B[1][h]));
    c[h] = _mm512_cvtps_pd(_mm512_cvt_roundpd_ps(sum, kFma64Rz));
    if (big != 0) {
      const __mmask8 o =
          _mm512_cmp_pd_mask(_mm512_abs_pd(sum), _mm512_set1_pd(0x1p128), _CMP_GE_OQ);
      c[h] = _mm512_mask_or_pd(c[h], o, _mm512_set1_pd(std::numeric_limits<double>::infinity()),
                               _mm512_and_pd(sum, _mm512_set1_pd(-0.0)));
      overflow |= static_cast<uint32_t>(o) << (8 * h);
    }
  }
  return overflow;
}

// The lanes of c that hold inf or NaN.
SD_AVX512 inline uint32_t nonfinite_lanes(const __m512d* c) {
  return static_cast<uint32_t>(_mm512_fpclass_pd_mask(c[0], 0x99)) |
         static_cast<uint32_t>(_mm512_fpclass_pd_mask(c[1], 0x99)) << 8;
}

constexpr int kLaneRow[16] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};

// Rows rows[0..15] against every x row: bits[m][j] gets the chain's fp32 bits of
// row j. state: 16 doubles per x row; nonfinite: one flag per x row (its chain
// may hold inf / NaN).
SD_AVX512 void avx512_block(const bf16* const rows[16], const Args& a, const XFma& xd,
                            double* state, uint8_t* nonfinite, uint32_t* bits) {
  const int K = a.K;
  const size_t kp = static_cast<size_t>(xd.steps) * kMmaK;
  std::fill(state, state + 16 * static_cast<size_t>(a.m_rows), 0.0);
  std::fill(nonfinite, nonfinite + a.m_rows, uint8_t{0});
  Fma16 d;
  for (int s = 0; s < xd.steps; ++s) {
    const int k0 = s * kMmaK;
    decode_fma16(rows, k0, K, d);
    for (int m = 0; m < a.m_rows; ++m) {
      double* cm = state + 16 * m;
      uint32_t twin = 0xffffu;  // the lanes that run the twin's step
      alignas(64) uint32_t c_bits[16];
      if (!xd.at(m, s)) {
        __m512d c[2] = {_mm512_loadu_pd(cm), _mm512_loadu_pd(cm + 8)};
        twin = d.special;
        if (nonfinite[m]) {
          const uint32_t nf = nonfinite_lanes(c);
          twin |= nf;
          nonfinite[m] = nf != 0;
        }
        if (twin != 0)
          for (int j = 0; j < 16; ++j) c_bits[j] = f32_bits(static_cast<float>(cm[j]));
        const size_t i = m * kp + k0;
        if (fma_step(d, xd.v.data() + i, xd.w_at.data() + 2 * i, xd.code2.data() + i / 2, c) != 0)
          nonfinite[m] = 1;
        _mm512_storeu_pd(cm, c[0]);
        _mm512_storeu_pd(cm + 8, c[1]);
      } else {
        for (int j = 0; j < 16; ++j) c_bits[j] = f32_bits(static_cast<float>(cm[j]));
      }
      if (twin != 0) {
        twin_lanes(twin, c_bits, StepSources(rows, k0, K), kLaneRow, a.x + m * a.x_stride, k0, K);
        for (int j = 0; j < 16; ++j)
          if ((twin >> j) & 1) {
            cm[j] = static_cast<double>(bits_f32(c_bits[j]));
            if ((c_bits[j] & 0x7f800000u) == 0x7f800000u) nonfinite[m] = 1;
          }
      }
    }
  }
  // Rule 6: a result that truncated to zero is +0.
  for (size_t i = 0; i < 16 * static_cast<size_t>(a.m_rows); ++i) {
    const uint32_t u = f32_bits(static_cast<float>(state[i]));
    bits[i] = u == 0x80000000u ? 0u : u;
  }
}

void avx512_rows(const Args& a, const XFma& xd, int64_t block_begin, int64_t block_end) {
  std::vector<double> state(16 * static_cast<size_t>(a.m_rows));
  std::vector<uint8_t> nonfinite(static_cast<size_t>(a.m_rows));
  block_rows(a, block_begin, block_end, kLaneRow, [&](const bf16* const rows[16], uint32_t* bits) {
    avx512_block(rows, a, xd, state.data(), nonfinite.data(), bits);
  });
}

// A packed block's slice (steps x 256 words) from its 16 rows (slice starts).
SD_AVX2 void pack_steps_avx2(const bf16* const rows[16], int len, int steps, uint16_t* out) {
  for (int t = 0; t < steps; ++t) {
    const StepSources src(rows, t * kMmaK, len);
    __m256i v[kMmaK];
    load_step16(src, v);
    for (int k = 0; k < kMmaK; ++k)
      _mm256_store_si256(reinterpret_cast<__m256i*>(out + static_cast<int64_t>(t) * 256 + 16 * k),
                         v[k]);
  }
}

#endif  // SD_MMA_AVX2

}  // namespace

bool mma_gemm_has_avx2() {
#if SD_MMA_AVX2
  static const bool has = __builtin_cpu_supports("avx2");
  return has;
#else
  return false;
#endif
}

bool mma_gemm_has_avx512() {
#if SD_MMA_AVX2
  static const bool has = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("avx512bw") &&
                          __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl");
  return has;
#else
  return false;
#endif
}

namespace {

// MXCSR's flush-to-zero or denormals-are-zero (set by some other code of the
// process, e.g. a library built with -ffast-math): the AVX-512 kernel's fp32
// conversion would flush subnormal results, so it is not run then.
bool mxcsr_flushes() {
#if SD_MMA_AVX2
  return (_mm_getcsr() & 0x8040u) != 0;
#else
  return false;
#endif
}

// The kernel `kernel` names (automatic: the fastest this CPU runs), refused where
// this CPU cannot run it.
MmaGemmKernel resolve_kernel(MmaGemmKernel kernel) {
  if (kernel == MmaGemmKernel::automatic)
    // AVX2 first: its fp32 form is faster than the AVX-512 kernel where both run (one qwen3-8b
    // propose's GEMMs on the H200 host's Xeon: 1774 ms against 2062 ms, docs/mma-twin.md).
    kernel = mma_gemm_has_avx2()                         ? MmaGemmKernel::avx2
             : mma_gemm_has_avx512() && !mxcsr_flushes() ? MmaGemmKernel::avx512
                                                         : MmaGemmKernel::reference;
  require(kernel != MmaGemmKernel::avx2 || mma_gemm_has_avx2(),
          "the AVX2 kernel needs an AVX2 CPU");
  require(kernel != MmaGemmKernel::avx512 || mma_gemm_has_avx512(),
          "the AVX-512 kernel needs AVX-512 F, BW, DQ and VL");
  require(kernel != MmaGemmKernel::avx512 || !mxcsr_flushes(),
          "the AVX-512 kernel needs MXCSR without flush-to-zero and denormals-are-zero");
  return kernel;
}

}  // namespace

void mma_gemm_rows_with(MmaGemmKernel kernel, const bf16* w, int64_t w_stride, int n_rows,
                        const bf16* x, int64_t x_stride, int m_rows, int K, float* out,
                        int64_t out_stride, int threads) {
  require(K >= 1 && n_rows >= 0 && m_rows >= 0, "needs K >= 1, n_rows >= 0, m_rows >= 0");
  if (n_rows == 0 || m_rows == 0) return;
  require(w != nullptr && x != nullptr && out != nullptr, "null pointer");
  const Args a{w, w_stride, n_rows, x, x_stride, m_rows, K, out, out_stride};
  kernel = resolve_kernel(kernel);
#if SD_MMA_AVX2
  if (kernel == MmaGemmKernel::avx512) {
    const XFma xd(a);
    // Each worker thread has its own MXCSR: one that flushes runs the AVX2 kernel
    // (the same bits) on its range.
    parallel_for((n_rows + 15) / 16, threads, [&](int64_t begin, int64_t end) {
      if (mxcsr_flushes())
        avx2_rows(a, XInt(a), begin, end);
      else
        avx512_rows(a, xd, begin, end);
    });
    return;
  }
  if (kernel == MmaGemmKernel::avx2) {
    const XInt xd(a);
    parallel_for((n_rows + 15) / 16, threads,
                 [&](int64_t begin, int64_t end) { avx2_rows(a, xd, begin, end); });
    return;
  }
#endif
  parallel_for(n_rows, threads, [&](int64_t begin, int64_t end) { reference_rows(a, begin, end); });
}

void mma_gemm_rows(const bf16* w, int64_t w_stride, int n_rows, const bf16* x, int64_t x_stride,
                   int m_rows, int K, float* out, int64_t out_stride, int threads) {
  mma_gemm_rows_with(MmaGemmKernel::automatic, w, w_stride, n_rows, x, x_stride, m_rows, K, out,
                     out_stride, threads);
}

// ---- Packed weights -----------------------------------------------------------------

void MmaPacked::Free::operator()(uint16_t* p) const { std::free(p); }

MmaPacked::MmaPacked(const bf16* w, int64_t w_stride, int n_rows, int K, int slices, int threads)
    : source_(w), source_stride_(w_stride), n_rows_(n_rows), K_(K), slices_(slices), steps_(0) {
  require(w != nullptr, "MmaPacked: null weight");
  require(n_rows >= 1 && K >= 1 && slices >= 1 && K % slices == 0,
          "MmaPacked: needs n_rows >= 1, K >= 1 and K a multiple of slices >= 1");
  require(w_stride >= K, "MmaPacked: needs w_stride >= K");
  const int len = K / slices;
  steps_ = (len + kMmaK - 1) / kMmaK;
  words_ = blocks() * slices_ * static_cast<int64_t>(steps_) * 256;
  // Large copies on 2 MB pages where the kernel gives them on request (transparent
  // huge pages in madvise mode): a 1 GB lm_head is then 512 page faults, not 262144.
  const size_t bytes = static_cast<size_t>(words_) * 2;
  const size_t align = bytes >= (size_t{4} << 20) ? size_t{2} << 20 : 64;
  data_.reset(
      static_cast<uint16_t*>(std::aligned_alloc(align, (bytes + align - 1) / align * align)));
  if (!data_)
    throw InvalidArgument("MmaPacked: cannot allocate " + std::to_string(bytes) +
                          " bytes for the packed weight");
#if defined(__linux__)
  if (align > 64) madvise(data_.get(), (bytes + align - 1) / align * align, MADV_HUGEPAGE);
#endif
  parallel_for(blocks(), threads, [&](int64_t begin, int64_t end) {
    for (int64_t b = begin; b < end; ++b) {
      const int valid = static_cast<int>(std::min<int64_t>(16, n_rows - b * 16));
      for (int s = 0; s < slices; ++s) {
        const bf16* rows[16];
        for (int j = 0; j < 16; ++j)
          rows[j] =
              w + (b * 16 + std::min(j, valid - 1)) * w_stride + static_cast<int64_t>(s) * len;
        uint16_t* out = data_.get() + (b * slices + s) * static_cast<int64_t>(steps_) * 256;
#if SD_MMA_AVX2
        if (mma_gemm_has_avx2()) {
          pack_steps_avx2(rows, len, steps_, out);
          continue;
        }
#endif
        for (int t = 0; t < steps_; ++t)
          for (int k = 0; k < kMmaK; ++k)
            for (int j = 0; j < 16; ++j) {
              const int kk = t * kMmaK + k;
              out[static_cast<int64_t>(t) * 256 + 16 * k + j] = kk < len ? rows[j][kk].bits : 0;
            }
      }
    }
  });
}

namespace {

// Block b's slice s unpacked into rows[16][len].
void unpack_block(const MmaPacked& w, int64_t b, int s, bf16* rows) {
  const int len = w.slice_len();
  const uint16_t* p = w.block(b, s);
  for (int j = 0; j < 16; ++j)
    for (int kk = 0; kk < len; ++kk)
      rows[static_cast<int64_t>(j) * len + kk].bits = p[(kk / kMmaK) * 256 + 16 * (kk % kMmaK) + j];
}

}  // namespace

void mma_gemm_packed_with(MmaGemmKernel kernel, const MmaPacked& w, int slice, const bf16* x,
                          int64_t x_stride, int m_rows, float* out, int64_t out_stride,
                          int threads) {
  require(slice >= 0 && slice < w.slices(),
          "mma_gemm_packed: slice " + std::to_string(slice) + " of " + std::to_string(w.slices()));
  require(m_rows >= 0, "needs m_rows >= 0");
  if (m_rows == 0) return;
  require(x != nullptr && out != nullptr, "null pointer");
  const int len = w.slice_len();
  const Args a{nullptr, 0, w.n_rows(), x, x_stride, m_rows, len, out, out_stride};
  kernel = resolve_kernel(kernel);
#if SD_MMA_AVX2
  if (kernel == MmaGemmKernel::avx2) {
    const XInt xd(a);
    parallel_for(w.blocks(), threads, [&](int64_t begin, int64_t end) {
      avx2_packed_rows(w, slice, a, xd, begin, end);
    });
    return;
  }
#endif
  // The other kernels on the rows, unpacked a block at a time.
  parallel_for(w.blocks(), threads, [&](int64_t begin, int64_t end) {
    std::vector<bf16> rows(16 * static_cast<size_t>(len));
    for (int64_t b = begin; b < end; ++b) {
      unpack_block(w, b, slice, rows.data());
      Args ab = a;
      ab.w = rows.data();
      ab.w_stride = len;
      ab.n_rows = static_cast<int>(std::min<int64_t>(16, w.n_rows() - b * 16));
      ab.out = out + b * 16;
#if SD_MMA_AVX2
      if (kernel == MmaGemmKernel::avx512) {
        // Each worker thread has its own MXCSR: one that flushes runs the AVX2 kernel.
        if (mxcsr_flushes())
          avx2_rows(ab, XInt(ab), 0, 1);
        else
          avx512_rows(ab, XFma(ab), 0, 1);
        continue;
      }
#endif
      reference_rows(ab, 0, ab.n_rows);
    }
  });
}

void mma_gemm_packed(const MmaPacked& w, int slice, const bf16* x, int64_t x_stride, int m_rows,
                     float* out, int64_t out_stride, int threads) {
  mma_gemm_packed_with(MmaGemmKernel::automatic, w, slice, x, x_stride, m_rows, out, out_stride,
                       threads);
}

void MmaPackedSet::add(const bf16* w, int64_t w_stride, int n_rows, int K, int slices,
                       int threads) {
  if (find(w, w_stride, n_rows, K, slices) != nullptr) return;
  packed_.emplace(w, std::make_unique<MmaPacked>(w, w_stride, n_rows, K, slices, threads));
}

const MmaPacked* MmaPackedSet::find(const bf16* w, int64_t w_stride, int n_rows, int K,
                                    int slices) const {
  const auto [first, last] = packed_.equal_range(w);
  for (auto it = first; it != last; ++it) {
    const MmaPacked& p = *it->second;
    if (p.source_stride() == w_stride && p.n_rows() == n_rows && p.K() == K && p.slices() == slices)
      return &p;
  }
  return nullptr;
}

const MmaPacked* MmaPackedSet::lookup(const bf16* w, int64_t w_stride, int n_rows, int K,
                                      int slices) const {
  const MmaPacked* p = find(w, w_stride, n_rows, K, slices);
  if (p == nullptr) ++misses_;
  return p;
}

int64_t MmaPackedSet::bytes() const {
  int64_t n = 0;
  for (const auto& [w, p] : packed_) n += p->bytes();
  return n;
}

}  // namespace sparkdraft::cpu
