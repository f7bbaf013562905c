// Host loops whose arithmetic calls std::fma / std::fmaf (core/math.h: exp_law,
// log_law, the double-double steps), compiled a second time for CPUs with FMA.
//
// The library targets the x86-64 baseline (no -mfma), so each such call is a call
// into libm: correctly rounded, but 20-40 cycles, and 17-20% of a large-vocabulary
// verify or Markov sampling row. A function marked SD_FMA_FLATTEN is compiled with
// the FMA instructions enabled and every call in its body inlined, so each std::fma
// becomes one vfmadd: the same correctly rounded result (IEEE fusedMultiplyAdd), the
// same bits. Nothing else changes: the host keeps -ffp-contract=off, so no a * b + c
// is fused that the source does not fuse. has_fma() picks the form: the FMA one where
// the CPU has it, unless a test asked for the baseline form (baseline_only(): the tests
// run both forms and compare their bits, tests/cpu/test_fma_dispatch.cpp).
#pragma once

#include <atomic>

#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
#define SD_FMA_FLATTEN __attribute__((target("fma"), flatten))
#else
// Elsewhere (an FMA is part of the base instruction set, e.g. AArch64) one form serves.
#define SD_FMA_FLATTEN
#endif

namespace sparkdraft::detail {

inline std::atomic<bool>& baseline_only() {
  static std::atomic<bool> only{false};
  return only;
}

inline bool cpu_has_fma() {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  static const bool has = __builtin_cpu_supports("fma");
  return has;
#else
  return false;
#endif
}

inline bool has_fma() { return cpu_has_fma() && !baseline_only().load(std::memory_order_relaxed); }

}  // namespace sparkdraft::detail
