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
#include <immintrin.h>
#define SD_MMA_AVX2 1
#define SD_AVX2 __attribute__((target("avx2")))
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
struct XDecoded {
  int steps = 0;
  std::vector<int32_t> sig, exp, neg;  // [m][steps * 16]
  std::vector<uint8_t> special;        // [m][steps]

  XDecoded(const Args& a) : steps((a.K + kMmaK - 1) / kMmaK) {
    const size_t kp = static_cast<size_t>(steps) * kMmaK;
    sig.assign(kp * a.m_rows, 0);
    exp.assign(kp * a.m_rows, kZeroExp);
    neg.assign(kp * a.m_rows, 0);
    special.assign(static_cast<size_t>(steps) * a.m_rows, 0);
    for (int m = 0; m < a.m_rows; ++m)
      for (int k = 0; k < a.K; ++k) {
        const uint16_t h = a.x[m * a.x_stride + k].bits;
        const size_t i = m * kp + k;
        sig[i] = static_cast<int32_t>(mma_detail::bf16_sig(h));
        exp[i] = (h & 0x7fffu) == 0 ? kZeroExp : mma_detail::bf16_exp(h) + 127;
        neg[i] = (h & 0x8000u) != 0 ? -1 : 0;
        if ((h & 0x7f80u) == 0x7f80u) special[static_cast<size_t>(m) * steps + k / kMmaK] = 1;
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

void mma_gemm_rows_with(MmaGemmKernel kernel, const bf16* w, int64_t w_stride, int n_rows,
                        const bf16* x, int64_t x_stride, int m_rows, int K, float* out,
                        int64_t out_stride, int threads) {
  require(K >= 1 && n_rows >= 0 && m_rows >= 0, "needs K >= 1, n_rows >= 0, m_rows >= 0");
  if (n_rows == 0 || m_rows == 0) return;
  require(w != nullptr && x != nullptr && out != nullptr, "null pointer");
  const Args a{w, w_stride, n_rows, x, x_stride, m_rows, K, out, out_stride};
  if (kernel == MmaGemmKernel::automatic)
    kernel = mma_gemm_has_avx2() ? MmaGemmKernel::avx2 : MmaGemmKernel::reference;
  require(kernel != MmaGemmKernel::avx2 || mma_gemm_has_avx2(),
          "the AVX2 kernel needs an AVX2 CPU");
#if SD_MMA_AVX2
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
