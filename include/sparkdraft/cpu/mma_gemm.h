// A fast CPU form of the tensor-core chain (core/mma.h): many rows of w against a
// few rows of x, every output bit for bit equal to mma_chain(w[n], x[m], K) on every
// input (finite, subnormal, zero, inf, NaN).
//
// How (src/cpu/mma_gemm.cpp): 16 w rows at a time in vector lanes, one 16-wide k
// step after another (the chain's order), each x row's values broadcast; a
// step's 16 x 16 block of w is transposed and decoded once for all x rows.
//   * AVX2, fp32 form (two vectors of 8 fp32 lanes), where every lane's E is in
//     [-100, 100] and no input is inf or NaN: E in 16-bit lanes (core/mma.h
//     rule 3); each term trunc(w * x * 2^(25 - E)) by vcvttps2dq (rule 4: w * x
//     is exact, the scaling by a power of two too, the conversion truncates
//     toward zero), the terms and c's added exactly in int32 (a wrap is checked),
//     the sum converted to fp32 under MXCSR rounding toward zero (set for the
//     kernel, the caller's restored) and scaled back (rule 6).
//   * AVX2, integer form (the other steps): per step and lane, E from the
//     exponents of the nonzero products, c and the floor -133; each product an
//     exact 16-bit integer significand product shifted to units of 2^(E - 25)
//     by one variable right shift (truncation of the magnitude, the sign applied
//     after); the terms add exactly in int32, c's term and that sum in fp64,
//     and the fp64 -> fp32 truncation is done on the bits.
//   * AVX-512 (two vectors of 8 fp64 lanes): E from 16-bit exponent codes, two k
//     a vector; each term truncated by a fused multiply-add rounding toward zero
//     onto a bias of 2^(E + 27) (where the fp64 spacing is 2^(E - 25)), the
//     positive terms added to one biased sum, the negative ones subtracted from
//     another; their exact difference converted to fp32 rounding toward zero,
//     plus the overflow and +0 fixes (rule 6). Not run when MXCSR flushes
//     subnormals: then AVX2.
// A step where any input of a lane is inf or NaN runs mma_step_bits for that lane.
// Without AVX2 (or off x86) every element runs mma_chain. The kernel is chosen at
// run time (automatic: AVX2, else AVX-512, else the reference); all give the same
// bits (tests/cpu/test_mma_gemm.cpp).
#pragma once

#include <cstdint>

#include "sparkdraft/core/bf16.h"

namespace sparkdraft::cpu {

// out[m * out_stride + n] = mma_chain(w + n * w_stride, x + m * x_stride, K) for
// n < n_rows, m < m_rows, bit for bit. Needs K >= 1, n_rows, m_rows >= 0; the n
// rows are split over `threads` threads (results never depend on the count).
void mma_gemm_rows(const bf16* w, int64_t w_stride, int n_rows, const bf16* x, int64_t x_stride,
                   int m_rows, int K, float* out, int64_t out_stride, int threads = 1);

// Which kernel mma_gemm_rows runs (tests and benchmarks pin one).
// automatic: AVX2 where the CPU has it (its fp32 form is the fastest, AVX-512 machines
// included), else AVX-512 (with MXCSR neither flushing to zero nor reading denormals as
// zero), else the reference.
enum class MmaGemmKernel { automatic, reference, avx2, avx512 };
bool mma_gemm_has_avx2();    // this CPU runs the AVX2 kernel
bool mma_gemm_has_avx512();  // this CPU runs the AVX-512 kernel (F, BW, DQ, VL)
void mma_gemm_rows_with(MmaGemmKernel kernel, const bf16* w, int64_t w_stride, int n_rows,
                        const bf16* x, int64_t x_stride, int m_rows, int K, float* out,
                        int64_t out_stride, int threads = 1);

}  // namespace sparkdraft::cpu
