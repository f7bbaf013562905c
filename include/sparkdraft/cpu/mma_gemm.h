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
//
// Packed weights (MmaPacked, mma_gemm_packed): the same chains on w copied once
// into the order the AVX2 kernel reads, so that a step's 16 x 16 block is 16
// aligned loads from one stream instead of 16 row reads and two transposes (a
// qwen3-8b propose's GEMMs about 20% faster on one Zen 3 core:
// docs/mma-twin.md). Backends that keep their weights (the CPU backend) pack
// them at load.
#pragma once

#include <atomic>
#include <cstdint>
#include <map>
#include <memory>

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

// w [n_rows, K] (row stride w_stride) packed: K cut into `slices` equal slices
// (ops::GemmParams::k_slices; K % slices == 0), each padded with +0 to whole
// 16-wide steps; the rows in blocks of 16 (a last partial block repeats its last
// row); per block, slice and step, its 16 x 16 values k-major: value k of rows
// 0..15 in 16 consecutive words (512 bytes a step, 64-byte aligned). Holds a
// copy: w may go after the constructor (which splits the blocks over `threads`).
// source() and source_stride() name what it was packed from (MmaPackedSet's key;
// never read again).
class MmaPacked {
 public:
  MmaPacked(const bf16* w, int64_t w_stride, int n_rows, int K, int slices = 1, int threads = 1);
  int n_rows() const { return n_rows_; }
  int K() const { return K_; }
  int slices() const { return slices_; }
  int slice_len() const { return K_ / slices_; }
  int steps() const { return steps_; }  // per slice
  int64_t blocks() const { return (n_rows_ + 15) / 16; }
  const bf16* source() const { return source_; }
  int64_t source_stride() const { return source_stride_; }
  int64_t bytes() const { return static_cast<int64_t>(words_) * 2; }
  // Block b's slice s: steps() x 16 x 16 words.
  const uint16_t* block(int64_t b, int s) const {
    return data_.get() + (b * slices_ + s) * static_cast<int64_t>(steps_) * 256;
  }

 private:
  struct Free {
    void operator()(uint16_t* p) const;
  };
  const bf16* source_;
  int64_t source_stride_;
  int n_rows_, K_, slices_, steps_;
  int64_t words_;
  std::unique_ptr<uint16_t[], Free> data_;
};

// out[m * out_stride + n] = mma_chain(w's row n, values slice * len .. (slice + 1)
// * len - 1, x + m * x_stride, len) for n < w.n_rows(), m < m_rows (len =
// w.slice_len()): bit for bit mma_gemm_rows on that slice of the source.
void mma_gemm_packed(const MmaPacked& w, int slice, const bf16* x, int64_t x_stride, int m_rows,
                     float* out, int64_t out_stride, int threads = 1);
// The same with the kernel pinned (the AVX-512 kernel and the reference run on the
// rows unpacked a block at a time).
void mma_gemm_packed_with(MmaGemmKernel kernel, const MmaPacked& w, int slice, const bf16* x,
                          int64_t x_stride, int m_rows, float* out, int64_t out_stride,
                          int threads = 1);

// Packed weights found by the GEMM they serve: cpu::gemm (cpu/ops.h) looks its
// (w, row stride, N, K, k_slices) up; a GEMM whose weight is not here runs
// mma_gemm_rows (the same bits, slower), and misses() counts those.
class MmaPackedSet {
 public:
  // Packs w unless an entry with these arguments is here.
  void add(const bf16* w, int64_t w_stride, int n_rows, int K, int slices, int threads = 1);
  const MmaPacked* find(const bf16* w, int64_t w_stride, int n_rows, int K, int slices) const;
  // find(), counting a miss.
  const MmaPacked* lookup(const bf16* w, int64_t w_stride, int n_rows, int K, int slices) const;
  size_t size() const { return packed_.size(); }
  int64_t bytes() const;
  int64_t misses() const { return misses_.load(); }

 private:
  std::multimap<const bf16*, std::unique_ptr<MmaPacked>> packed_;
  mutable std::atomic<int64_t> misses_{0};
};

}  // namespace sparkdraft::cpu
