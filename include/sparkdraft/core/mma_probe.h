// Inputs that probe the tensor-core instruction against its twin (core/mma.h):
// deterministic 16x16 / 16x8 / 16x8 (A, B, C) blocks from integer-only generators,
// so the same cases come out on every host. Used by the device sweep
// (tests/cuda/test_mma.cu), the recorded fixture that CI checks without a GPU
// (tests/core/test_mma.cpp, tests/fixtures/) and the GPU backend's start-up
// self-test (cuda::mma_self_test).
//
// One case is one m16n8k16 instruction: a[m][k] (row m of A), b[n][k] (column n
// of B, k contiguous), c[m][n] as fp32 bits; d[m][n] = mma_step_bits(c[m][n],
// a[m], b[n]).
#pragma once

#include <cstdint>
#include <cstring>

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/mma.h"

namespace sparkdraft {

struct MmaCase {
  bf16 a[16][16];
  bf16 b[8][16];
  uint32_t c[16][8];
};

// The families of cases (contract.md section 3 and the twin's issue list).
enum class MmaDist : int {
  random_bits = 0,  // any finite bit patterns
  narrow,           // exponents within a few binades of 1
  normal,           // roughly N(0, 1) values, c of the same scale
  c_zero,           // normal values, c = +0 or -0
  cancel,           // products that cancel exactly (and nearly), small c
  tiny,             // tiny and subnormal values, tiny c
  subnormal,        // every term subnormal; subnormal times large
  binade_gap,       // one large term, the others 11 to 30 binades below it
  carry,            // all-ones significands: carries at the truncation point
  overflow,         // sums past the fp32 range, and large terms that cancel
  special,          // inf, NaN, zero mixed in: inf - inf, 0 * inf
  signed_zero,      // +-0 products and +-0 c
  underflow,        // products near 2^-150 with c = +-0 or subnormal: E below -126?
                    // the sign of a sum that truncates to zero
  zero_times_big,   // zeros times large values beside small products
  count
};
inline constexpr int kMmaDistCount = static_cast<int>(MmaDist::count);

inline const char* mma_dist_name(MmaDist d) {
  static const char* const names[] = {
      "random_bits", "narrow", "normal",   "c_zero",  "cancel",      "tiny",      "subnormal",
      "binade_gap",  "carry",  "overflow", "special", "signed_zero", "underflow", "zero_times_big"};
  return names[static_cast<int>(d)];
}

namespace mma_probe_detail {

// splitmix64: integer only, the same stream on every platform.
struct Rng {
  uint64_t s;
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  uint32_t u32() { return static_cast<uint32_t>(next() >> 32); }
  int range(int lo, int hi) {
    return lo + static_cast<int>(u32() % static_cast<uint32_t>(hi - lo + 1));
  }
  bool coin(int one_in) { return u32() % static_cast<uint32_t>(one_in) == 0; }
};

inline bf16 make_bf16(uint32_t sign, int exp_field, uint32_t mant) {
  return bf16{static_cast<uint16_t>((sign << 15) | (static_cast<uint32_t>(exp_field) << 7) |
                                    (mant & 0x7fu))};
}
inline uint32_t make_f32(uint32_t sign, int exp_field, uint32_t mant) {
  return (sign << 31) | (static_cast<uint32_t>(exp_field) << 23) | (mant & 0x7fffffu);
}
inline bf16 bf16_in(Rng& r, int e_lo, int e_hi) {
  return make_bf16(r.u32() & 1u, r.range(e_lo, e_hi), r.u32());
}
inline uint32_t f32_in(Rng& r, int e_lo, int e_hi) {
  return make_f32(r.u32() & 1u, r.range(e_lo, e_hi), r.u32());
}

// A value near N(0, 1) as fp32 bits, from integers: (sum of 4 uniforms - 2) scaled.
inline uint32_t normal_f32(Rng& r, float scale) {
  int64_t s = 0;
  for (int i = 0; i < 4; ++i) s += r.u32() >> 8;  // 24-bit uniforms
  const double x = (static_cast<double>(s) / 16777216.0 - 2.0) * 1.7320508075688772 * scale;
  const float f = static_cast<float>(x);
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline bf16 normal_bf16(Rng& r, float scale) { return to_bf16(bits_f32(normal_f32(r, scale))); }

}  // namespace mma_probe_detail

// Case `index` of family `dist` under `seed`.
inline void make_mma_case(MmaDist dist, uint64_t seed, uint64_t index, MmaCase& out) {
  using namespace mma_probe_detail;
  Rng r{seed * 0x100000001B3ull ^ (static_cast<uint64_t>(dist) << 56) ^
        index * 0x9E3779B97F4A7C15ull};
  r.next();
  auto each = [&](auto&& fa, auto&& fb, auto&& fc) {
    for (int m = 0; m < 16; ++m)
      for (int k = 0; k < 16; ++k) out.a[m][k] = fa(m, k);
    for (int n = 0; n < 8; ++n)
      for (int k = 0; k < 16; ++k) out.b[n][k] = fb(n, k);
    for (int m = 0; m < 16; ++m)
      for (int n = 0; n < 8; ++n) out.c[m][n] = fc(m, n);
  };
  // Products k and k + 8 of every (row, column) cancel exactly: a[m][k + 8] = a[m][k],
  // b[n][k + 8] = -b[n][k].
  auto cancel_pairs = [&]() {
    for (int m = 0; m < 16; ++m)
      for (int k = 0; k < 8; ++k) out.a[m][k + 8] = out.a[m][k];
    for (int n = 0; n < 8; ++n)
      for (int k = 0; k < 8; ++k)
        out.b[n][k + 8] = bf16{static_cast<uint16_t>(out.b[n][k].bits ^ 0x8000u)};
  };
  switch (dist) {
    case MmaDist::random_bits:
      each([&](int, int) { return bf16_in(r, 0, 254); },
           [&](int, int) { return bf16_in(r, 0, 254); },
           [&](int, int) { return f32_in(r, 0, 254); });
      break;
    case MmaDist::narrow:
      each([&](int, int) { return bf16_in(r, 124, 130); },
           [&](int, int) { return bf16_in(r, 124, 130); },
           [&](int, int) { return f32_in(r, 120, 136); });
      break;
    case MmaDist::normal:
      each([&](int, int) { return normal_bf16(r, 1.0f); },
           [&](int, int) { return normal_bf16(r, 1.0f); },
           [&](int, int) { return normal_f32(r, 4.0f); });
      break;
    case MmaDist::c_zero:
      each([&](int, int) { return normal_bf16(r, 1.0f); },
           [&](int, int) { return normal_bf16(r, 0.05f); },
           [&](int, int) { return (r.u32() & 1u) << 31; });
      break;
    case MmaDist::cancel: {
      // Row m: a[m][k + 8] = a[m][k]; column n < 6: b[n][k + 8] = -b[n][k] (exact
      // cancellation), columns 6, 7: the same but one ulp off in one term.
      each([&](int, int) { return normal_bf16(r, 1.0f); },
           [&](int, int) { return normal_bf16(r, 1.0f); },
           [&](int, int) { return r.coin(2) ? (r.u32() & 1u) << 31 : f32_in(r, 90, 130); });
      cancel_pairs();
      for (int n = 6; n < 8; ++n) {
        const int k = r.range(8, 15);
        if ((out.b[n][k].bits & 0x7fffu) != 0) out.b[n][k].bits ^= 1u;
      }
      break;
    }
    case MmaDist::tiny:
      each([&](int, int) { return bf16_in(r, 0, 12); },
           [&](int, int) { return bf16_in(r, 100, 140); },
           [&](int, int) { return r.coin(4) ? 0u : f32_in(r, 0, 20); });
      break;
    case MmaDist::subnormal:
      // Rows 0-7: every a subnormal times b subnormal (all terms far below
      // 2^-126); rows 8-15: subnormal a times large b, subnormal c.
      each([&](int, int) { return make_bf16(r.u32() & 1u, 0, r.u32()); },
           [&](int n, int) {
             return n < 4 ? make_bf16(r.u32() & 1u, 0, r.u32()) : bf16_in(r, 120, 254);
           },
           [&](int, int) { return r.coin(3) ? 0u : make_f32(r.u32() & 1u, 0, r.u32()); });
      break;
    case MmaDist::binade_gap: {
      // Per row m and column n the products have exponent about ea + eb; make
      // the k = 0 term large and the others 11 to 30 binades below it.
      each(
          [&](int, int k) {
            return k == 0 ? bf16_in(r, 127, 127) : bf16_in(r, 127 - r.range(11, 30), 127 - 11);
          },
          [&](int, int) { return bf16_in(r, 127, 127); },
          [&](int, int) { return r.coin(2) ? 0u : f32_in(r, 127 - 30, 127); });
      break;
    }
    case MmaDist::carry:
      // All-ones significands at exponents a few binades apart: the truncated
      // sum carries across binades; c of all-ones significand just below a power of two.
      each([&](int, int) { return make_bf16(r.coin(4) ? 1u : 0u, r.range(120, 127), 0x7fu); },
           [&](int, int) { return make_bf16(r.coin(4) ? 1u : 0u, r.range(120, 127), 0x7fu); },
           [&](int, int) {
             return make_f32(r.coin(3) ? 1u : 0u, r.range(115, 128),
                             r.coin(2) ? 0x7fffffu : r.u32());
           });
      break;
    case MmaDist::overflow:
      each([&](int, int) { return bf16_in(r, 200, 254); },
           [&](int, int) { return bf16_in(r, 60, 130); },
           [&](int, int) {
             return r.coin(2) ? make_f32(r.u32() & 1u, 254, r.coin(2) ? 0x7fffffu : r.u32())
                              : f32_in(r, 0, 254);
           });
      if (r.coin(2)) cancel_pairs();  // huge terms summing to zero or to a small value
      break;
    case MmaDist::special: {
      auto pick = [&](bool small) -> uint32_t {  // bf16 bits
        switch (r.range(0, 9)) {
          case 0: return 0x7f80u;                      // +inf
          case 1: return 0xff80u;                      // -inf
          case 2: return 0x7fc0u | (r.u32() & 0x3fu);  // quiet NaN
          case 3: return 0x7f81u | (r.u32() & 0x3eu);  // signalling-pattern NaN
          case 4: return (r.u32() & 1u) << 15;         // +-0
          default: return small ? normal_bf16(r, 1.0f).bits : bf16_in(r, 1, 254).bits;
        }
      };
      const bool rare = index % 2 == 0;  // half the cases: specials only now and then
      each(
          [&](int, int) {
            return rare && !r.coin(16) ? normal_bf16(r, 1.0f)
                                       : bf16{static_cast<uint16_t>(pick(true))};
          },
          [&](int, int) {
            return rare && !r.coin(16) ? normal_bf16(r, 1.0f)
                                       : bf16{static_cast<uint16_t>(pick(false))};
          },
          [&](int, int) {
            switch (r.range(0, 7)) {
              case 0: return 0x7f800000u;
              case 1: return 0xff800000u;
              case 2: return 0x7fc00000u | (r.u32() & 0x3fffffu);
              default: return normal_f32(r, 1.0f);
            }
          });
      break;
    }
    case MmaDist::signed_zero:
      each(
          [&](int, int) {
            return r.coin(8) ? normal_bf16(r, 1.0f)
                             : bf16{static_cast<uint16_t>((r.u32() & 1u) << 15)};
          },
          [&](int, int) {
            return r.coin(8) ? bf16{static_cast<uint16_t>((r.u32() & 1u) << 15)}
                             : normal_bf16(r, 1.0f);
          },
          [&](int, int) { return r.coin(4) ? normal_f32(r, 1e-3f) : (r.u32() & 1u) << 31; });
      break;
    case MmaDist::underflow:
      // a subnormal (m * 2^-133) times b in [2^-27, 2^-12): products around
      // 2^-160 .. 2^-140; columns 0-3 all positive, 4-7 random signs.
      each([&](int, int) { return make_bf16(r.u32() & 1u, 0, r.u32() | 1u); },
           [&](int n, int) {
             return make_bf16(n < 4 ? 0u : r.u32() & 1u, r.range(100, 115), r.u32());
           },
           [&](int, int) {
             return r.coin(3) ? make_f32(r.u32() & 1u, 0, r.u32() & 0x3ffu) : (r.u32() & 1u) << 31;
           });
      for (int m = 0; m < 8; ++m)  // rows 0-7: a positive, so columns 0-3 sum positive
        for (int k = 0; k < 16; ++k) out.a[m][k].bits &= 0x7fffu;
      break;
    case MmaDist::zero_times_big:
      each(
          [&](int, int k) {
            return k < 4 ? bf16{static_cast<uint16_t>((r.u32() & 1u) << 15)} : normal_bf16(r, 1.0f);
          },
          [&](int, int k) { return k < 4 ? bf16_in(r, 140, 254) : normal_bf16(r, 1e-3f); },
          [&](int, int) { return r.coin(2) ? (r.u32() & 1u) << 31 : normal_f32(r, 1e-6f); });
      break;
    case MmaDist::count: break;
  }
}

// d[m][n] of a case by the twin.
inline void mma_case_twin(const MmaCase& cs, uint32_t d[16][8]) {
  for (int m = 0; m < 16; ++m)
    for (int n = 0; n < 8; ++n) d[m][n] = mma_step_bits(cs.c[m][n], cs.a[m], cs.b[n]);
}

}  // namespace sparkdraft
