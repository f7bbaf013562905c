// The fast chain of cpu/mma_gemm.h. Every step follows core/mma.h's rules
// literally; the argument that each vector operation is exact is written next
// to it. Exponents are kept "biased by 254" (the sum of two bf16 exponent fields):
// a bf16's field counts as max(field, 1) (zero and subnormal: -126), a product's
// PE = fa + fb = pe + 254, c's EC = max(field, 1) + 127 = ec + 254, the floor
// -133 is 121, and E' = E + 254.
#include "sparkdraft/cpu/mma_gemm.h"

#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

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
#define SD_AVX512 __attribute__((target("avx2,avx512f,avx512bw,avx512dq,avx512vl,avx512vpopcntdq")))
#else
#define SD_MMA_AVX2 0
#endif

namespace sparkdraft::cpu {
namespace {

void require(bool ok, const std::string& what) {
  if (!ok) throw InvalidArgument("mma_gemm_rows: " + what);
}

// One step k0 .. k0 + 15 of the chain of a and b (zero-padded past K).
uint32_t step_bits(uint32_t c, const bf16* a, const bf16* b, int k0, int K) {
  if (k0 + kMmaK <= K) return mma_step_bits(c, a + k0, b + k0);
  bf16 pa[kMmaK], pb[kMmaK];
  for (int i = 0; i < kMmaK; ++i) {
    pa[i] = k0 + i < K ? a[k0 + i] : bf16{0};
    pb[i] = k0 + i < K ? b[k0 + i] : bf16{0};
  }
  return mma_step_bits(c, pa, pb);
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

// The exponent (field, biased) given to a zero bf16: any product with a zero
// factor has PE <= 255 + kZeroExp < 121 (never sets E), and a shift count
// E' - PE >= 121 - 2 * kZeroExp >= 32 (its term is 0).
constexpr int kZeroExp = -1000;

// The x rows decoded once per call: per row m and k (padded to whole steps with
// +0): the 8-bit significand, max(field, 1), the sign as a 0 / -1 mask; and per
// step whether any of its 16 values is inf or NaN.
// The AVX-512 kernel also reads sig7 = sig << 7 (its products carry the << 11)
// and, per step, the 16 signs as a bit mask (bit i: value i is negative).
struct XDecoded {
  int steps = 0;
  std::vector<int32_t> sig, sig7, exp, neg;  // [m][steps * 16]
  std::vector<uint32_t> sign_mask;           // [m][steps]
  std::vector<uint8_t> special;              // [m][steps]

  XDecoded(const Args& a) : steps((a.K + kMmaK - 1) / kMmaK) {
    const size_t kp = static_cast<size_t>(steps) * kMmaK;
    sig.assign(kp * a.m_rows, 0);
    sig7.assign(kp * a.m_rows, 0);
    exp.assign(kp * a.m_rows, kZeroExp);
    neg.assign(kp * a.m_rows, 0);
    sign_mask.assign(static_cast<size_t>(steps) * a.m_rows, 0);
    special.assign(static_cast<size_t>(steps) * a.m_rows, 0);
    for (int m = 0; m < a.m_rows; ++m)
      for (int k = 0; k < a.K; ++k) {
        const uint16_t h = a.x[m * a.x_stride + k].bits;
        const size_t i = m * kp + k, ms = static_cast<size_t>(m) * steps + k / kMmaK;
        sig[i] = static_cast<int32_t>(mma_detail::bf16_sig(h));
        sig7[i] = sig[i] << 7;
        exp[i] = (h & 0x7fffu) == 0 ? kZeroExp : mma_detail::bf16_exp(h) + 127;
        neg[i] = (h & 0x8000u) != 0 ? -1 : 0;
        if (neg[i]) sign_mask[ms] |= 1u << (k % kMmaK);
        if ((h & 0x7f80u) == 0x7f80u) special[ms] = 1;
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

// The lane of half h (0, 1) that row r (0..15) of a block of 16 takes: the 16-bit
// decode widens with unpacklo / unpackhi, so half 0 holds rows 0-3 and 8-11, half
// 1 rows 4-7 and 12-15.
constexpr int block_row(int h, int lane) { return (lane < 4 ? lane : lane + 4) + 4 * h; }

// Rows rows[0..15] (padding lanes repeat a real row) against every x row:
// cstate[m][h * 8 + lane] holds the chain's fp32 bits of row block_row(h, lane).
SD_AVX2 void avx2_block(const bf16* const rows[16], const Args& a, const XDecoded& xd,
                        uint32_t* cstate) {
  const int K = a.K;
  const size_t kp = static_cast<size_t>(xd.steps) * kMmaK;
  for (int m = 0; m < 2 * a.m_rows; ++m)
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(cstate + 8 * m), _mm256_setzero_si256());
  const __m256i k7f = _mm256_set1_epi16(0x7f), k80 = _mm256_set1_epi16(0x80),
                kff = _mm256_set1_epi16(0xff);
  const __m256i zero = _mm256_setzero_si256();
  alignas(32) uint16_t pad[16][kMmaK];
  for (int s = 0; s < xd.steps; ++s) {
    const int k0 = s * kMmaK;
    const bf16* src[16];
    for (int j = 0; j < 16; ++j) {
      src[j] = rows[j] + k0;
      if (k0 + kMmaK > K) {
        std::memset(pad[j], 0, sizeof(pad[j]));
        std::memcpy(pad[j], rows[j] + k0, static_cast<size_t>(K - k0) * sizeof(bf16));
        src[j] = reinterpret_cast<const bf16*>(pad[j]);
      }
    }
    // in[0][j] = values 0-7 of rows j, j + 8; in[1][j] = values 8-15.
    __m256i in[2][8], v[kMmaK];
    for (int j = 0; j < 8; ++j)
      for (int q = 0; q < 2; ++q)
        in[q][j] = _mm256_inserti128_si256(
            _mm256_castsi128_si256(
                _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[j] + 8 * q))),
            _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[j + 8] + 8 * q)), 1);
    transpose8x8x2(in[0], v);
    transpose8x8x2(in[1], v + 8);
    // Decode per k in 16-bit lanes, then widen: W1 = sig | PEw << 16 (pmaddwd
    // with (sx, 0) gives sig * sx), W2 = the sign as a 0 / -1 mask.
    __m256i W1[2][kMmaK], W2[2][kMmaK];
    __m256i spec = zero;
    for (int k = 0; k < kMmaK; ++k) {
      const __m256i h = v[k];
      const __m256i f = _mm256_and_si256(_mm256_srli_epi16(h, 7), kff);
      const __m256i is_zero = _mm256_cmpeq_epi16(_mm256_slli_epi16(h, 1), zero);
      const __m256i pe =
          _mm256_sub_epi16(_mm256_max_epi16(f, _mm256_set1_epi16(1)),
                           _mm256_and_si256(is_zero, _mm256_set1_epi16(1 - kZeroExp)));
      const __m256i sig = _mm256_or_si256(_mm256_and_si256(h, k7f),
                                          _mm256_andnot_si256(_mm256_cmpeq_epi16(f, zero), k80));
      const __m256i sg = _mm256_srai_epi16(h, 15);
      W1[0][k] = _mm256_unpacklo_epi16(sig, pe);
      W1[1][k] = _mm256_unpackhi_epi16(sig, pe);
      W2[0][k] = _mm256_unpacklo_epi16(sg, sg);
      W2[1][k] = _mm256_unpackhi_epi16(sg, sg);
      spec = _mm256_or_si256(spec, _mm256_cmpeq_epi16(f, kff));
    }
    const int wspec[2] = {
        _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(spec, spec))),
        _mm256_movemask_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(spec, spec)))};

    for (int m = 0; m < a.m_rows; ++m) {
      const bf16* xrow = a.x + m * a.x_stride;
      for (int h = 0; h < 2; ++h) {
        uint32_t* cm = cstate + 16 * m + 8 * h;
        if (xd.special[static_cast<size_t>(m) * xd.steps + s]) {
          for (int j = 0; j < 8; ++j) cm[j] = step_bits(cm[j], rows[block_row(h, j)], xrow, k0, K);
          continue;
        }
        const __m256i c = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(cm));
        const __m256i d = step8(W1[h], W2[h], xd.sig.data() + m * kp + k0,
                                xd.exp.data() + m * kp + k0, xd.neg.data() + m * kp + k0, c);
        // Rule 7: a lane with inf or NaN in w or c runs the twin's step.
        const __m256i cf = _mm256_and_si256(_mm256_srli_epi32(c, 23), _mm256_set1_epi32(0xff));
        const int special = wspec[h] | _mm256_movemask_ps(_mm256_castsi256_ps(
                                           _mm256_cmpeq_epi32(cf, _mm256_set1_epi32(0xff))));
        if (special != 0) {
          alignas(32) uint32_t nd[8];
          _mm256_store_si256(reinterpret_cast<__m256i*>(nd), d);
          for (int j = 0; j < 8; ++j)
            if ((special >> j) & 1) nd[j] = step_bits(cm[j], rows[block_row(h, j)], xrow, k0, K);
          std::memcpy(cm, nd, sizeof(nd));
        } else {
          _mm256_storeu_si256(reinterpret_cast<__m256i*>(cm), d);
        }
      }
    }
  }
}

void avx2_rows(const Args& a, const XDecoded& xd, int64_t block_begin, int64_t block_end) {
  std::vector<uint32_t> cstate(static_cast<size_t>(a.m_rows) * 16);
  for (int64_t b = block_begin; b < block_end; ++b) {
    const int64_t n0 = b * 16;
    const int valid = static_cast<int>(std::min<int64_t>(16, a.n_rows - n0));
    const bf16* rows[16];
    for (int j = 0; j < 16; ++j) rows[j] = a.w + (n0 + std::min(j, valid - 1)) * a.w_stride;
    avx2_block(rows, a, xd, cstate.data());
    for (int m = 0; m < a.m_rows; ++m)
      for (int h = 0; h < 2; ++h)
        for (int lane = 0; lane < 8; ++lane) {
          const int r = block_row(h, lane);
          if (r < valid)
            a.out[m * a.out_stride + n0 + r] =
                bits_f32(cstate[16 * static_cast<size_t>(m) + 8 * h + lane]);
        }
  }
}

// ---- AVX-512: 16 rows in the 16 int32 lanes of one vector ----------------------
// The same arithmetic as step8 with three changes, each exact:
//   * W1 = (sig << 4) | PEw << 16 and x's operand is sig << 7, so pmaddwd gives
//     sig * sx << 11 directly (sig << 4 <= 4080, sx << 7 <= 32640: both fit int16;
//     the product < 2^27);
//   * the sign: sum_k ((t ^ s_k) - s_k) = sum_k (t ^ s_k) - sum_k s_k, and
//     -sum_k s_k is the number of k where the signs of w and x differ: the
//     popcount of the lane's 16 w sign bits xor x's (one vpopcntd a step, not a
//     subtraction a product). The int32 adds wrap; the final sum is the exact
//     value (< 2^31 in magnitude, as in step8);
//   * rule 6 in fp64: v = the products' sum + c's term (exact, < 2^33), y = v *
//     2^(E - 25) (scalef, exact: |y| in [2^-158, 2^262] or 0), then one
//     conversion to fp32 rounding toward zero (vcvtpd2ps {rz-sae}: truncation of
//     the magnitude, subnormal results kept as multiples of 2^-149) and the two
//     places where the rules differ from the conversion: |y| >= 2^128 gives
//     +-infinity (the conversion gives +-FLT_MAX), and a result that truncated to
//     zero is +0. MXCSR's flush-to-zero would flush the subnormal results: the
//     kernel is not run when FTZ or DAZ is set (mma_gemm_rows_with).

struct Decoded16 {
  __m512i W1[kMmaK], W2[kMmaK], PEw[kMmaK];  // per k, 16 lanes
  __m512i sign_mask;                         // bit k of lane j: w[j][k] < 0
  uint32_t special = 0;                      // lane j: some w[j][k] is inf or NaN
};

// Lanes j: rows rows[j], values k0 .. k0 + 15 (zero-padded past K).
SD_AVX512 inline void decode16(const bf16* const rows[16], int k0, int K, Decoded16& d) {
  alignas(32) uint16_t pad[16][kMmaK];
  const bf16* src[16];
  for (int j = 0; j < 16; ++j) {
    src[j] = rows[j] + k0;
    if (k0 + kMmaK > K) {
      std::memset(pad[j], 0, sizeof(pad[j]));
      std::memcpy(pad[j], rows[j] + k0, static_cast<size_t>(K - k0) * sizeof(bf16));
      src[j] = reinterpret_cast<const bf16*>(pad[j]);
    }
  }
  __m256i in[2][8], v[kMmaK];
  for (int j = 0; j < 8; ++j)
    for (int q = 0; q < 2; ++q)
      in[q][j] = _mm256_inserti128_si256(
          _mm256_castsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src[j] + 8 * q))),
          _mm_loadu_si128(reinterpret_cast<const __m128i*>(src[j + 8] + 8 * q)), 1);
  // v[k]: value k of rows 0..7 (low half) and 8..15 (high half): widened, lane j = row j.
  transpose8x8x2(in[0], v);
  transpose8x8x2(in[1], v + 8);
  const __m256i k7f = _mm256_set1_epi16(0x7f), kff = _mm256_set1_epi16(0xff);
  __m256i fmax = _mm256_setzero_si256();
  __m512i signs = _mm512_setzero_si512();
  for (int k = 0; k < kMmaK; ++k) {
    const __m256i h = v[k];
    const __m256i f = _mm256_and_si256(_mm256_srli_epi16(h, 7), kff);
    // max(field, 1), kZeroExp for +-0; the significand with its leading bit where f != 0
    // (m7 < 0x80: the add is an or).
    const __m256i pe = _mm256_mask_mov_epi16(_mm256_max_epi16(f, _mm256_set1_epi16(1)),
                                             _mm256_testn_epi16_mask(h, _mm256_set1_epi16(0x7fff)),
                                             _mm256_set1_epi16(kZeroExp));
    const __m256i m7 = _mm256_and_si256(h, k7f);
    const __m256i sig =
        _mm256_mask_add_epi16(m7, _mm256_test_epi16_mask(f, f), m7, _mm256_set1_epi16(0x80));
    d.PEw[k] = _mm512_cvtepi16_epi32(pe);
    d.W1[k] = _mm512_or_si512(_mm512_cvtepu16_epi32(_mm256_slli_epi16(sig, 4)),
                              _mm512_slli_epi32(d.PEw[k], 16));
    d.W2[k] = _mm512_cvtepi16_epi32(_mm256_srai_epi16(h, 15));
    // Bit k of each lane: the sign (signs | (W2 & (1 << k))).
    signs = _mm512_ternarylogic_epi32(signs, d.W2[k], _mm512_set1_epi32(1 << k), 0xf8);
    fmax = _mm256_max_epu16(fmax, f);
  }
  d.sign_mask = signs;
  d.special = _mm256_cmpeq_epi16_mask(fmax, kff);
}

// Rule 6 for 8 lanes: fp32 bits (before the two fixes) of (acc + tc) * 2^e, and
// in ovf the lanes whose magnitude is 2^128 or more.
SD_AVX512 inline __m256 finish8(__m256i acc, __m256i tc, __m256i e, __mmask8& ovf) {
  const __m512d v = _mm512_add_pd(_mm512_cvtepi32_pd(acc), _mm512_cvtepi32_pd(tc));
  const __m512d y = _mm512_scalef_pd(v, _mm512_cvtepi32_pd(e));
  ovf = _mm512_cmp_pd_mask(_mm512_abs_pd(y), _mm512_set1_pd(0x1p128), _CMP_GE_OQ);
  return _mm512_cvt_roundpd_ps(y, _MM_FROUND_TO_ZERO | _MM_FROUND_NO_EXC);
}

// One step of one x row for the 16 lanes of d; c = the lanes' fp32 bits; returns
// the new bits (lanes with inf / NaN are fixed by the caller).
SD_AVX512 inline __m512i step16(const Decoded16& d, const int32_t* xs7, const int32_t* xe,
                                const int32_t* xn, uint32_t x_signs, __m512i c) {
  const __m512i kff = _mm512_set1_epi32(0xff);
  // Rule 3, as step8.
  const __m512i cf = _mm512_and_si512(_mm512_srli_epi32(c, 23), kff);
  const __m512i ec =
      _mm512_add_epi32(_mm512_max_epi32(cf, _mm512_set1_epi32(1)), _mm512_set1_epi32(127));
  const __mmask16 c_nonzero = _mm512_test_epi32_mask(c, _mm512_set1_epi32(0x7fffffff));
  const __m512i floor = _mm512_set1_epi32(kMmaMinExp + 254);
  __m512i E = _mm512_mask_max_epi32(floor, c_nonzero, floor, ec);
  __m512i PE[kMmaK];
  for (int k = 0; k < kMmaK; ++k) {
    PE[k] = _mm512_add_epi32(d.PEw[k], _mm512_set1_epi32(xe[k]));
    E = _mm512_max_epi32(E, PE[k]);
  }
  // Rules 4-5: t = (sig * sx << 11) >> (E' - PE), the magnitude truncated (a
  // count of 32 or more gives 0); the sign by the xor and the popcount below.
  __m512i acc = _mm512_setzero_si512();
  for (int k = 0; k < kMmaK; ++k) {
    const __m512i p = _mm512_madd_epi16(d.W1[k], _mm512_set1_epi32(xs7[k]));
    const __m512i t = _mm512_srlv_epi32(p, _mm512_sub_epi32(E, PE[k]));
    acc = _mm512_add_epi32(acc,
                           _mm512_ternarylogic_epi32(t, d.W2[k], _mm512_set1_epi32(xn[k]), 0x96));
  }
  acc = _mm512_add_epi32(acc, _mm512_popcnt_epi32(_mm512_xor_si512(
                                  d.sign_mask, _mm512_set1_epi32(static_cast<int>(x_signs)))));
  // c's term, as step8.
  const __m512i csig = _mm512_mask_or_epi32(
      _mm512_and_si512(c, _mm512_set1_epi32(0x7fffff)), _mm512_test_epi32_mask(cf, cf),
      _mm512_and_si512(c, _mm512_set1_epi32(0x7fffff)), _mm512_set1_epi32(0x800000));
  const __m512i cs = _mm512_srai_epi32(c, 31);
  __m512i tc = _mm512_srlv_epi32(_mm512_slli_epi32(csig, 2), _mm512_sub_epi32(E, ec));
  tc = _mm512_sub_epi32(_mm512_xor_si512(tc, cs), cs);
  // Rule 6 in fp64, 8 lanes at a time.
  const __m512i e_scale = _mm512_sub_epi32(E, _mm512_set1_epi32(279));
  __mmask8 ovf_lo, ovf_hi;
  const __m256 lo = finish8(_mm512_castsi512_si256(acc), _mm512_castsi512_si256(tc),
                            _mm512_castsi512_si256(e_scale), ovf_lo);
  const __m256 hi = finish8(_mm512_extracti64x4_epi64(acc, 1), _mm512_extracti64x4_epi64(tc, 1),
                            _mm512_extracti64x4_epi64(e_scale, 1), ovf_hi);
  __m512i r = _mm512_castps_si512(_mm512_insertf32x8(_mm512_castps256_ps512(lo), hi, 1));
  const __mmask16 ovf = _mm512_kunpackb(ovf_hi, ovf_lo);
  r = _mm512_mask_or_epi32(r, ovf, _mm512_and_si512(r, _mm512_set1_epi32(int(0x80000000u))),
                           _mm512_set1_epi32(0x7f800000));
  // Zero, or truncated to zero: +0.
  return _mm512_maskz_mov_epi32(_mm512_test_epi32_mask(r, _mm512_set1_epi32(0x7fffffff)), r);
}

// Rows rows[0..15] (padding lanes repeat a real row) against every x row:
// cstate[m][j] holds the chain's fp32 bits of row j.
SD_AVX512 void avx512_block(const bf16* const rows[16], const Args& a, const XDecoded& xd,
                            uint32_t* cstate) {
  const int K = a.K;
  const size_t kp = static_cast<size_t>(xd.steps) * kMmaK;
  for (int m = 0; m < a.m_rows; ++m) _mm512_storeu_si512(cstate + 16 * m, _mm512_setzero_si512());
  Decoded16 d;
  for (int s = 0; s < xd.steps; ++s) {
    const int k0 = s * kMmaK;
    decode16(rows, k0, K, d);
    for (int m = 0; m < a.m_rows; ++m) {
      const bf16* xrow = a.x + m * a.x_stride;
      uint32_t* cm = cstate + 16 * m;
      const size_t ms = static_cast<size_t>(m) * xd.steps + s;
      if (xd.special[ms]) {
        for (int j = 0; j < 16; ++j) cm[j] = step_bits(cm[j], rows[j], xrow, k0, K);
        continue;
      }
      const __m512i c = _mm512_loadu_si512(cm);
      const size_t i = m * kp + k0;
      const __m512i r =
          step16(d, xd.sig7.data() + i, xd.exp.data() + i, xd.neg.data() + i, xd.sign_mask[ms], c);
      // Rule 7: a lane with inf or NaN in w or c runs the twin's step.
      const uint32_t special =
          d.special | _mm512_cmpeq_epi32_mask(_mm512_and_si512(c, _mm512_set1_epi32(0x7f800000)),
                                              _mm512_set1_epi32(0x7f800000));
      if (special != 0) {
        alignas(64) uint32_t nd[16];
        _mm512_store_si512(nd, r);
        for (int j = 0; j < 16; ++j)
          if ((special >> j) & 1) nd[j] = step_bits(cm[j], rows[j], xrow, k0, K);
        std::memcpy(cm, nd, sizeof(nd));
      } else {
        _mm512_storeu_si512(cm, r);
      }
    }
  }
}

void avx512_rows(const Args& a, const XDecoded& xd, int64_t block_begin, int64_t block_end) {
  std::vector<uint32_t> cstate(static_cast<size_t>(a.m_rows) * 16);
  for (int64_t b = block_begin; b < block_end; ++b) {
    const int64_t n0 = b * 16;
    const int valid = static_cast<int>(std::min<int64_t>(16, a.n_rows - n0));
    const bf16* rows[16];
    for (int j = 0; j < 16; ++j) rows[j] = a.w + (n0 + std::min(j, valid - 1)) * a.w_stride;
    avx512_block(rows, a, xd, cstate.data());
    for (int m = 0; m < a.m_rows; ++m)
      for (int j = 0; j < valid; ++j)
        a.out[m * a.out_stride + n0 + j] = bits_f32(cstate[16 * static_cast<size_t>(m) + j]);
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
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("avx512f") &&
      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
      __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vpopcntdq");
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

}  // namespace

void mma_gemm_rows_with(MmaGemmKernel kernel, const bf16* w, int64_t w_stride, int n_rows,
                        const bf16* x, int64_t x_stride, int m_rows, int K, float* out,
                        int64_t out_stride, int threads) {
  require(K >= 1 && n_rows >= 0 && m_rows >= 0, "needs K >= 1, n_rows >= 0, m_rows >= 0");
  if (n_rows == 0 || m_rows == 0) return;
  require(w != nullptr && x != nullptr && out != nullptr, "null pointer");
  const Args a{w, w_stride, n_rows, x, x_stride, m_rows, K, out, out_stride};
  if (kernel == MmaGemmKernel::automatic)
    kernel = mma_gemm_has_avx512() && !mxcsr_flushes() ? MmaGemmKernel::avx512
             : mma_gemm_has_avx2()                     ? MmaGemmKernel::avx2
                                                       : MmaGemmKernel::reference;
  require(kernel != MmaGemmKernel::avx2 || mma_gemm_has_avx2(),
          "the AVX2 kernel needs an AVX2 CPU");
  require(kernel != MmaGemmKernel::avx512 || mma_gemm_has_avx512(),
          "the AVX-512 kernel needs AVX-512 F, BW, DQ, VL and VPOPCNTDQ");
  require(kernel != MmaGemmKernel::avx512 || !mxcsr_flushes(),
          "the AVX-512 kernel needs MXCSR without flush-to-zero and denormals-are-zero");
#if SD_MMA_AVX2
  if (kernel == MmaGemmKernel::avx512) {
    const XDecoded xd(a);
    // Each worker thread has its own MXCSR: one that flushes runs the AVX2 kernel
    // (the same bits) on its range.
    parallel_for((n_rows + 15) / 16, threads, [&](int64_t begin, int64_t end) {
      if (mxcsr_flushes())
        avx2_rows(a, xd, begin, end);
      else
        avx512_rows(a, xd, begin, end);
    });
    return;
  }
  if (kernel == MmaGemmKernel::avx2) {
    const XDecoded xd(a);
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

}  // namespace sparkdraft::cpu
