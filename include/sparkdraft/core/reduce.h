// The canonical fp32 reduction order (contract.md section 3), written once.
//
// Every fp32 reduction of the contract that is not a matrix product (an RMSNorm's
// sum of squares; the products are tensor-core chains, core/mma.h) sums n terms in
// this one order, on the CPU reference, the eager kernels and the fused kernels alike:
//
//   * 32 lanes. Element i belongs to chunk c = i / 8 (8 elements = one 16-byte
//     bf16 load), and chunk c to lane c % 32.
//   * Each lane starts at +0.0f and accumulates its own elements in increasing
//     i with one explicit fma per term: acc = fma(x_i, y_i, acc).
//   * The 32 lane sums are combined by a butterfly: for off = 16, 8, 4, 2, 1,
//     p[l] = p[l] + p[l + off]; the result is p[0]. (An xor-shuffle warp
//     reduction computes exactly this: fp32 addition is commutative.)
//
// A warp that loads 16 bytes per lane per iteration follows it directly.
#pragma once

#include <cmath>

#include "sparkdraft/core/hd.h"

namespace sparkdraft {

inline constexpr int kReduceLanes = 32;
inline constexpr int kReduceChunk = 8;

SD_HD float fma_f32(float a, float b, float c) {
#if SD_ON_DEVICE
  return __fmaf_rn(a, b, c);
#else
  return std::fmaf(a, b, c);
#endif
}

// One lane's partial sum: term(i) returns the pair (x_i, y_i) as x*y via the
// two out-parameters. Lane `lane` owns chunks lane, lane+32, lane+64, ...
template <class Term>
SD_HD float canonical_lane_partial(int lane, int n, Term term) {
  float acc = 0.0f;
  for (int c = lane; c * kReduceChunk < n; c += kReduceLanes) {
    const int begin = c * kReduceChunk;
    const int end = begin + kReduceChunk < n ? begin + kReduceChunk : n;
    for (int i = begin; i < end; ++i) {
      float x, y;
      term(i, x, y);
      acc = fma_f32(x, y, acc);
    }
  }
  return acc;
}

// The butterfly over 32 lane partials (modifies p). Host side of the warp
// xor-shuffle reduction.
SD_HD float canonical_combine(float* p) {
  for (int off = kReduceLanes / 2; off > 0; off /= 2)
    for (int l = 0; l < off; ++l) p[l] = p[l] + p[l + off];
  return p[0];
}

// The whole canonical reduction on one thread (the CPU reference).
template <class Term>
SD_HD float canonical_sum(int n, Term term) {
  float p[kReduceLanes];
  for (int l = 0; l < kReduceLanes; ++l) p[l] = canonical_lane_partial(l, n, term);
  return canonical_combine(p);
}

// Dot product of two fp32 sequences given by loaders, in the canonical order.
template <class LoadA, class LoadB>
SD_HD float canonical_dot(int n, LoadA a, LoadB b) {
  return canonical_sum(n, [&](int i, float& x, float& y) {
    x = a(i);
    y = b(i);
  });
}

// The fixed tree of contract.md section 6 over n >= 1 fp32 partials p[0..n) (the TP
// all-reduce over ranks, the canonical K slices): adjacent pairs, level by level,
//   n = 2: p0+p1;  n = 4: (p0+p1)+(p2+p3);  n = 8: ((p0+p1)+(p2+p3))+((p4+p5)+(p6+p7));
// at a level with an odd count the last term rises to the next level unchanged
// (n = 3: (p0+p1)+p2). Overwrites p; returns the sum.
SD_HD float canonical_tree_sum(float* p, int n) {
  for (int width = n; width > 1; width = (width + 1) / 2) {
    for (int i = 0; 2 * i + 1 < width; ++i) p[i] = p[2 * i] + p[2 * i + 1];
    if (width % 2 == 1) p[width / 2] = p[width - 1];
  }
  return p[0];
}

#if defined(__CUDACC__)
// Device: combine the 32 lane partials of a full warp (every lane gets the result).
__device__ __forceinline__ float warp_canonical_combine(float lane_partial) {
  for (int off = kReduceLanes / 2; off > 0; off /= 2)
    lane_partial = __fadd_rn(lane_partial, __shfl_xor_sync(0xffffffffu, lane_partial, off));
  return lane_partial;
}
#endif

}  // namespace sparkdraft
