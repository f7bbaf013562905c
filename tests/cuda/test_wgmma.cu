// wgmma against the tensor-core twin (contract.md section 3: a kernel may use wgmma only
// if a test proves it gives the bits of the m16n8k16 chain on the device).
//
// One CTA of one warpgroup per tile runs wgmma.mma_async.m64nNk16.f32.bf16.bf16
// (N = 8, 64, 128, 160, 192, 224 and 256: every form common/wgmma.cuh has; A from shared memory,
// and for N 8, 64 and 256 also from registers; B from shared memory, no swizzle) with the
// accumulator started from a nonzero C, and chains of S = 1 or 4 consecutive k16 wgmmas into the
// same accumulator (K = 16 S). Every output is compared bit for bit with the twin's chain
// (core/mma.h: step s adds k = 16s .. 16s+15 to step s-1's result) and with an mma.sync.m16n8k16
// chain over the same data on the device.
//
// The inputs are the mma probe's cases (core/mma_probe.h), every family, so both
// probes are fed identically: tile t, step s takes the A of cases
// (t S + s) G + i (rows 16i .. 16i+15, i < 4) and the B of cases (t S + s) G + j
// (columns 8j .. 8j+7, j < N/8), G = max(4, N/8); C block (i, j) is the c of case
// (t S) G + j. The blocks i == j of a one-step tile are the probe's own cases; the
// others pair an A and a B of the same family.
// First, small integers (exact in any order) validate the fragment and descriptor
// layouts. SPARKDRAFT_WGMMA_SEED overrides the seed; SPARKDRAFT_WGMMA_DIFFS=<file>
// writes the differences found (see the sweep).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include "cuda/common/mma.cuh"
#include "cuda/common/ptx.cuh"
#include "cuda/common/wgmma.cuh"
#include "cuda/gpu_test_util.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/mma.h"
#include "sparkdraft/core/mma_probe.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"

namespace sparkdraft {
namespace {

using cuda::DeviceBuffer;

// ---- device ---------------------------------------------------------------------------

__global__ void wgmma_compiled_kernel(int* out) { *out = cuda::wgmma_compiled() ? 1 : 0; }

__device__ __forceinline__ uint32_t ld_pair(const bf16* p) {
  return *reinterpret_cast<const uint32_t*>(p);
}

// Element (r, k) of a K-major operand with K / 8 core matrices per 8 rows, in bf16
// elements: core matrix (r / 8, k / 8) at ((r / 8) * K/8 + k / 8) * 64, its row r % 8
// at 8 (r % 8). So LBO (next core matrix in K) = 128 bytes, SBO (next 8 rows) = K/8 *
// 128 bytes.
__device__ __forceinline__ int core_index(int r, int k, int kc) {
  return ((r / 8) * kc + k / 8) * 64 + (r % 8) * 8 + k % 8;
}

template <int N>
__device__ __forceinline__ void wg_ss(float* d, uint64_t da, uint64_t db) {
  if constexpr (N == 8)
    cuda::wgmma_m64n8k16_ss(d, da, db);
  else if constexpr (N == 64)
    cuda::wgmma_m64n64k16_ss(d, da, db);
  else if constexpr (N == 128)
    cuda::wgmma_m64n128k16_ss(d, da, db);
  else if constexpr (N == 160)
    cuda::wgmma_m64n160k16_ss(d, da, db);
  else if constexpr (N == 192)
    cuda::wgmma_m64n192k16_ss(d, da, db);
  else if constexpr (N == 224)
    cuda::wgmma_m64n224k16_ss(d, da, db);
  else
    cuda::wgmma_m64n256k16_ss(d, da, db);
}
// The shapes with a register-A form (the wide tile's narrower shapes have none).
constexpr bool has_rs(int n) { return n == 8 || n == 64 || n == 256; }
template <int N>
__device__ __forceinline__ void wg_rs(float* d, const uint32_t a[4], uint64_t db) {
  if constexpr (N == 8)
    cuda::wgmma_m64n8k16_rs(d, a, db);
  else if constexpr (N == 64)
    cuda::wgmma_m64n64k16_rs(d, a, db);
  else
    cuda::wgmma_m64n256k16_rs(d, a, db);
}

// One tile per CTA of 128 threads: D = chain of S wgmmas from C. A: [tiles][64][K],
// B: [tiles][N][K] (k contiguous), C and D: [tiles][64][N] fp32 bits. swap: put the
// K distance in the SBO field and the row distance in LBO (the layout check tries
// both readings of the descriptor).
template <int N, bool kRegA, int S>
__global__ void __launch_bounds__(128)
    wgmma_tile_kernel(const bf16* A, const bf16* B, const uint32_t* C, uint32_t* D, int swap) {
  constexpr int K = 16 * S, KC = K / 8;
  __shared__ __align__(128) bf16 sa[64 * K];
  __shared__ __align__(128) bf16 sb[N * K];
  const int tile = blockIdx.x, tid = threadIdx.x, w = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const bf16* At = A + static_cast<size_t>(tile) * 64 * K;
  const bf16* Bt = B + static_cast<size_t>(tile) * N * K;
  const uint32_t* Ct = C + static_cast<size_t>(tile) * 64 * N;
  uint32_t* Dt = D + static_cast<size_t>(tile) * 64 * N;
  for (int i = tid; i < 64 * K; i += 128) sa[core_index(i / K, i % K, KC)] = At[i];
  for (int i = tid; i < N * K; i += 128) sb[core_index(i / K, i % K, KC)] = Bt[i];
  cuda::fence_proxy_async();
  __syncthreads();

  float d[N / 2];
  const int r0 = 16 * w + g;
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    d[4 * j + 0] = __uint_as_float(Ct[r0 * N + 8 * j + 2 * t]);
    d[4 * j + 1] = __uint_as_float(Ct[r0 * N + 8 * j + 2 * t + 1]);
    d[4 * j + 2] = __uint_as_float(Ct[(r0 + 8) * N + 8 * j + 2 * t]);
    d[4 * j + 3] = __uint_as_float(Ct[(r0 + 8) * N + 8 * j + 2 * t + 1]);
  }
  uint32_t a[S][4];
  if constexpr (kRegA) {
#pragma unroll
    for (int s = 0; s < S; ++s) {
      const int k0 = 16 * s + 2 * t;
      a[s][0] = ld_pair(At + r0 * K + k0);
      a[s][1] = ld_pair(At + (r0 + 8) * K + k0);
      a[s][2] = ld_pair(At + r0 * K + k0 + 8);
      a[s][3] = ld_pair(At + (r0 + 8) * K + k0 + 8);
    }
  }
  const uint32_t along_k = 128, along_rows = KC * 128;
  const uint32_t lbo = swap ? along_rows : along_k, sbo = swap ? along_k : along_rows;
  const uint32_t sa0 = cuda::smem_u32(sa), sb0 = cuda::smem_u32(sb);
  cuda::wgmma_fence();
#pragma unroll
  for (int s = 0; s < S; ++s) {
    // Step s: k = 16s .. 16s+15 = core-matrix columns 2s, 2s+1 (256 bytes on).
    const uint64_t db = cuda::wgmma_desc(sb0 + 256 * s, lbo, sbo);
    if constexpr (kRegA)
      wg_rs<N>(d, a[s], db);
    else
      wg_ss<N>(d, cuda::wgmma_desc(sa0 + 256 * s, lbo, sbo), db);
  }
  cuda::wgmma_commit();
  cuda::wgmma_wait<0>();
#pragma unroll
  for (int j = 0; j < N / 8; ++j) {
    Dt[r0 * N + 8 * j + 2 * t] = __float_as_uint(d[4 * j + 0]);
    Dt[r0 * N + 8 * j + 2 * t + 1] = __float_as_uint(d[4 * j + 1]);
    Dt[(r0 + 8) * N + 8 * j + 2 * t] = __float_as_uint(d[4 * j + 2]);
    Dt[(r0 + 8) * N + 8 * j + 2 * t + 1] = __float_as_uint(d[4 * j + 3]);
  }
}

// The same tiles by mma.sync.m16n8k16 chains: warp w, rows 16w .. 16w+15, every
// 8-column block, S steps from C.
template <int N, int S>
__global__ void __launch_bounds__(128)
    mma_tile_kernel(const bf16* A, const bf16* B, const uint32_t* C, uint32_t* D) {
  constexpr int K = 16 * S;
  const int tile = blockIdx.x, tid = threadIdx.x, w = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4, r0 = 16 * w + g;
  const bf16* At = A + static_cast<size_t>(tile) * 64 * K;
  const bf16* Bt = B + static_cast<size_t>(tile) * N * K;
  const uint32_t* Ct = C + static_cast<size_t>(tile) * 64 * N;
  uint32_t* Dt = D + static_cast<size_t>(tile) * 64 * N;
  for (int j = 0; j < N / 8; ++j) {
    float c[4] = {__uint_as_float(Ct[r0 * N + 8 * j + 2 * t]),
                  __uint_as_float(Ct[r0 * N + 8 * j + 2 * t + 1]),
                  __uint_as_float(Ct[(r0 + 8) * N + 8 * j + 2 * t]),
                  __uint_as_float(Ct[(r0 + 8) * N + 8 * j + 2 * t + 1])};
    for (int s = 0; s < S; ++s) {
      const int k0 = 16 * s + 2 * t;
      const uint32_t a[4] = {ld_pair(At + r0 * K + k0), ld_pair(At + (r0 + 8) * K + k0),
                             ld_pair(At + r0 * K + k0 + 8), ld_pair(At + (r0 + 8) * K + k0 + 8)};
      const bf16* bn = Bt + (8 * j + g) * K;
      const uint32_t b[2] = {ld_pair(bn + k0), ld_pair(bn + k0 + 8)};
      float dd[4];
      cuda::mma_bf16_16816(dd, a, b, c);
      for (int q = 0; q < 4; ++q) c[q] = dd[q];
    }
    Dt[r0 * N + 8 * j + 2 * t] = __float_as_uint(c[0]);
    Dt[r0 * N + 8 * j + 2 * t + 1] = __float_as_uint(c[1]);
    Dt[(r0 + 8) * N + 8 * j + 2 * t] = __float_as_uint(c[2]);
    Dt[(r0 + 8) * N + 8 * j + 2 * t + 1] = __float_as_uint(c[3]);
  }
}

// ---- host -----------------------------------------------------------------------------

struct Tiles {
  int n = 0, steps = 0;
  int64_t count = 0;
  std::vector<bf16> a;      // [count][64][K]
  std::vector<bf16> b;      // [count][n][K]
  std::vector<uint32_t> c;  // [count][64][n]
  int k() const { return 16 * steps; }
  int64_t outputs() const { return count * 64 * n; }
};

Tiles empty_tiles(int n, int steps, int64_t count) {
  Tiles T;
  T.n = n, T.steps = steps, T.count = count;
  T.a.resize(static_cast<size_t>(count) * 64 * T.k());
  T.b.resize(static_cast<size_t>(count) * n * T.k());
  T.c.resize(static_cast<size_t>(count) * 64 * n);
  return T;
}

// Tiles from the mma probe's cases of `dist` (the mapping at the top of the file).
Tiles family_tiles(MmaDist dist, uint64_t seed, int n, int steps, int64_t count) {
  Tiles T = empty_tiles(n, steps, count);
  const int K = T.k(), G = std::max(4, n / 8);
  MmaCase cs;
  for (int64_t t = 0; t < count; ++t)
    for (int s = 0; s < steps; ++s)
      for (int x = 0; x < G; ++x) {
        make_mma_case(dist, seed, static_cast<uint64_t>((t * steps + s) * G + x), cs);
        if (x < 4)
          for (int m = 0; m < 16; ++m)
            for (int kk = 0; kk < 16; ++kk)
              T.a[static_cast<size_t>((t * 64 + 16 * x + m) * K + 16 * s + kk)] = cs.a[m][kk];
        if (x < n / 8) {
          for (int nn = 0; nn < 8; ++nn)
            for (int kk = 0; kk < 16; ++kk)
              T.b[static_cast<size_t>((t * n + 8 * x + nn) * K + 16 * s + kk)] = cs.b[nn][kk];
          if (s == 0)
            for (int i = 0; i < 4; ++i)
              for (int m = 0; m < 16; ++m)
                for (int nn = 0; nn < 8; ++nn)
                  T.c[static_cast<size_t>((t * 64 + 16 * i + m) * n + 8 * x + nn)] = cs.c[m][nn];
        }
      }
  return T;
}

// Small integers: a, b in [-8, 8], c in [-1024, 1024]; every sum is exact in any order.
Tiles small_int_tiles(uint64_t seed, int n, int steps, int64_t count) {
  Tiles T = empty_tiles(n, steps, count);
  mma_probe_detail::Rng r{seed ^ 0x51A11u};
  for (auto& x : T.a) x = to_bf16(static_cast<float>(r.range(-8, 8)));
  for (auto& x : T.b) x = to_bf16(static_cast<float>(r.range(-8, 8)));
  for (auto& x : T.c) x = f32_bits(static_cast<float>(r.range(-1024, 1024)));
  return T;
}

// Output (tile, row, col) by the twin: the chain of `steps` instruction steps from C.
uint32_t twin_output(const Tiles& T, int64_t tile, int row, int col) {
  const int K = T.k();
  const bf16* a = &T.a[static_cast<size_t>((tile * 64 + row) * K)];
  const bf16* b = &T.b[static_cast<size_t>((tile * T.n + col) * K)];
  uint32_t c = T.c[static_cast<size_t>((tile * 64 + row) * T.n + col)];
  for (int s = 0; s < T.steps; ++s) c = mma_step_bits(c, a + 16 * s, b + 16 * s);
  return c;
}

std::vector<uint32_t> twin_tiles(const Tiles& T) {
  std::vector<uint32_t> out(static_cast<size_t>(T.outputs()));
  const int threads = std::max(1u, std::min(32u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int p = 0; p < threads; ++p)
    pool.emplace_back([&, p] {
      for (int64_t tile = p; tile < T.count; tile += threads)
        for (int row = 0; row < 64; ++row)
          for (int col = 0; col < T.n; ++col)
            out[static_cast<size_t>((tile * 64 + row) * T.n + col)] =
                twin_output(T, tile, row, col);
    });
  for (auto& th : pool) th.join();
  return out;
}

struct DeviceTiles {
  DeviceBuffer<bf16> a, b;
  DeviceBuffer<uint32_t> c, d;
  explicit DeviceTiles(const Tiles& T)
      : a(T.a), b(T.b), c(T.c), d(static_cast<size_t>(T.outputs())) {}
};

template <int N, int S>
std::vector<uint32_t> run_wgmma_ns(DeviceTiles& dt, int64_t count, bool reg_a, int swap) {
  const unsigned blocks = static_cast<unsigned>(count);
  if (!reg_a)
    wgmma_tile_kernel<N, false, S>
        <<<blocks, 128>>>(dt.a.data(), dt.b.data(), dt.c.data(), dt.d.data(), swap);
  else if constexpr (has_rs(N))
    wgmma_tile_kernel<N, true, S>
        <<<blocks, 128>>>(dt.a.data(), dt.b.data(), dt.c.data(), dt.d.data(), swap);
  else
    ADD_FAILURE() << "m64n" << N << "k16 has no register-A form";
  SD_CHECK_LAUNCH();
  SD_CUDA_CHECK(cudaDeviceSynchronize());
  return dt.d.download();
}

template <int N, int S>
std::vector<uint32_t> run_mma_sync_ns(DeviceTiles& dt, int64_t count) {
  mma_tile_kernel<N, S>
      <<<static_cast<unsigned>(count), 128>>>(dt.a.data(), dt.b.data(), dt.c.data(), dt.d.data());
  SD_CHECK_LAUNCH();
  SD_CUDA_CHECK(cudaDeviceSynchronize());
  return dt.d.download();
}

// f(integral_constant N, integral_constant S) for the tile's shape (every N of wg_ss,
// 1 or 4 steps).
template <class F>
std::vector<uint32_t> with_shape(const Tiles& T, F&& f) {
  auto steps = [&](auto n) -> std::vector<uint32_t> {
    if (T.steps == 1) return f(n, std::integral_constant<int, 1>{});
    if (T.steps == 4) return f(n, std::integral_constant<int, 4>{});
    ADD_FAILURE() << "no wgmma kernel for " << T.steps << " steps";
    return {};
  };
  switch (T.n) {
    case 8: return steps(std::integral_constant<int, 8>{});
    case 64: return steps(std::integral_constant<int, 64>{});
    case 128: return steps(std::integral_constant<int, 128>{});
    case 160: return steps(std::integral_constant<int, 160>{});
    case 192: return steps(std::integral_constant<int, 192>{});
    case 224: return steps(std::integral_constant<int, 224>{});
    case 256: return steps(std::integral_constant<int, 256>{});
    default: ADD_FAILURE() << "no wgmma kernel for n " << T.n; return {};
  }
}

std::vector<uint32_t> run_wgmma(const Tiles& T, DeviceTiles& dt, bool reg_a, int swap) {
  return with_shape(T, [&](auto n, auto s) {
    return run_wgmma_ns<decltype(n)::value, decltype(s)::value>(dt, T.count, reg_a, swap);
  });
}

std::vector<uint32_t> run_mma_sync(const Tiles& T, DeviceTiles& dt) {
  return with_shape(T, [&](auto n, auto s) {
    return run_mma_sync_ns<decltype(n)::value, decltype(s)::value>(dt, T.count);
  });
}

// The shapes of the probe: (n, steps, tiles per family); each runs with A from shared
// memory ("ss") and, where the shape has the form, from registers ("rs").
struct Shape {
  int n, steps;
  int64_t tiles;
};
constexpr Shape kShapes[] = {{8, 1, 2048}, {256, 1, 64},  {8, 4, 512},  {256, 4, 64}, {64, 1, 256},
                             {64, 4, 64},  {128, 1, 128}, {128, 4, 32}, {160, 1, 96}, {160, 4, 24},
                             {192, 1, 80}, {192, 4, 20},  {224, 1, 72}, {224, 4, 18}};
constexpr int kShapeCount = sizeof(kShapes) / sizeof(kShapes[0]);

// A variant: a shape and where A comes from (reg: registers).
struct Variant {
  int shape;
  bool reg;
};
const std::vector<Variant>& variants() {
  static const std::vector<Variant> v = [] {
    std::vector<Variant> out;
    for (int si = 0; si < kShapeCount; ++si) {
      out.push_back({si, false});
      if (has_rs(kShapes[si].n)) out.push_back({si, true});
    }
    return out;
  }();
  return v;
}

std::string variant_name(const Variant& v) {
  const Shape& s = kShapes[v.shape];
  return std::string(v.reg ? "rs" : "ss") + " n" + std::to_string(s.n) + " k" +
         std::to_string(16 * s.steps);
}

uint64_t probe_seed() {
  if (const char* s = std::getenv("SPARKDRAFT_WGMMA_SEED")) return std::strtoull(s, nullptr, 0);
  return 0x77676d6d61ull;  // "wgmma"
}

std::string hex(uint32_t x) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", x);
  return buf;
}

// One differing output: where, its inputs, and the three results.
std::string describe(const Tiles& T, int64_t tile, int row, int col, uint32_t wg, uint32_t twin,
                     uint32_t mma) {
  const int K = T.k();
  std::string s = "tile " + std::to_string(tile) + " d[" + std::to_string(row) + "][" +
                  std::to_string(col) + "]: wgmma " + hex(wg) + ", twin " + hex(twin) +
                  ", mma.sync " + hex(mma) + "; c " +
                  hex(T.c[static_cast<size_t>((tile * 64 + row) * T.n + col)]) + "; a";
  char buf[8];
  for (int k = 0; k < K; ++k) {
    std::snprintf(buf, sizeof buf, " %04x",
                  T.a[static_cast<size_t>((tile * 64 + row) * K + k)].bits);
    s += buf;
  }
  s += "; b";
  for (int k = 0; k < K; ++k) {
    std::snprintf(buf, sizeof buf, " %04x",
                  T.b[static_cast<size_t>((tile * T.n + col) * K + k)].bits);
    s += buf;
  }
  return s;
}

bool gpu_is_sm90(std::string* why) {
  int dev = 0;
  cudaDeviceProp p{};
  SD_CUDA_CHECK(cudaGetDevice(&dev));
  SD_CUDA_CHECK(cudaGetDeviceProperties(&p, dev));
  if (p.major != 9 || p.minor != 0) {
    *why = std::string("wgmma needs an sm_90 GPU; device ") + std::to_string(dev) + " (" + p.name +
           ") is sm_" + std::to_string(p.major) + std::to_string(p.minor) + ": skipped";
    return false;
  }
  DeviceBuffer<int> flag(1);
  wgmma_compiled_kernel<<<1, 1>>>(flag.data());
  SD_CHECK_LAUNCH();
  if (flag.download()[0] != 1) {
    *why = "this build has no sm_90a code (SPARKDRAFT_CUDA_ARCH must be 90a): wgmma skipped";
    return false;
  }
  return true;
}

#define SD_REQUIRE_SM90()                          \
  do {                                             \
    SD_REQUIRE_GPU();                              \
    std::string why_;                              \
    if (!gpu_is_sm90(&why_)) GTEST_SKIP() << why_; \
  } while (0)

// c + sum a_k b_k in fp64 for every output (exact for the small-integer tiles).
std::vector<double> exact_tiles(const Tiles& T) {
  const int K = T.k();
  auto f = [](bf16 x) {
    return static_cast<double>(bits_f32(static_cast<uint32_t>(x.bits) << 16));
  };
  std::vector<double> out(static_cast<size_t>(T.outputs()));
  for (int64_t tile = 0; tile < T.count; ++tile)
    for (int row = 0; row < 64; ++row)
      for (int col = 0; col < T.n; ++col) {
        const size_t i = static_cast<size_t>((tile * 64 + row) * T.n + col);
        double x = bits_f32(T.c[i]);
        for (int k = 0; k < K; ++k)
          x += f(T.a[static_cast<size_t>((tile * 64 + row) * K + k)]) *
               f(T.b[static_cast<size_t>((tile * T.n + col) * K + k)]);
        out[i] = x;
      }
  return out;
}

// Mismatches of wgmma against the exact integer results, per variant, for one reading
// of the descriptor's offsets.
std::vector<int64_t> small_int_mismatches(int swap) {
  std::vector<int64_t> bad;
  for (const Variant& v : variants()) {
    const Shape& sh = kShapes[v.shape];
    const Tiles T = small_int_tiles(probe_seed() + v.shape, sh.n, sh.steps, 8);
    DeviceTiles dt(T);
    const std::vector<uint32_t> d = run_wgmma(T, dt, v.reg, swap);
    const std::vector<double> exact = exact_tiles(T);
    int64_t n = 0;
    for (size_t i = 0; i < d.size(); ++i)
      if (static_cast<double>(bits_f32(d[i])) != exact[i]) ++n;
    bad.push_back(n);
  }
  return bad;
}

// The descriptor reading that the small integers confirm (0: LBO along K as the PTX
// ISA says; 1: swapped), or -1 if neither; measured once.
int layout_swap() {
  static const int swap = [] {
    for (int sw = 0; sw < 2; ++sw) {
      const std::vector<int64_t> bad = small_int_mismatches(sw);
      bool ok = true;
      for (size_t v = 0; v < variants().size(); ++v) {
        std::printf("  layout %s, %-12s small-integer mismatches: %lld\n",
                    sw ? "LBO/SBO swapped" : "LBO along K   ", variant_name(variants()[v]).c_str(),
                    static_cast<long long>(bad[static_cast<size_t>(v)]));
        ok = ok && bad[v] == 0;
      }
      if (ok) return sw;
    }
    return -1;
  }();
  return swap;
}

TEST(WgmmaProbe, LayoutIsRightOnSmallIntegers) {
  SD_REQUIRE_SM90();
  // The PTX ISA's reading (LBO = the distance of core matrices along K) must be the
  // one that gives every exact result on every variant.
  EXPECT_EQ(layout_swap(), 0);
}

// Host only (runs without a GPU): the blocks i == j of a one-step tile are the
// probe's own cases, so their twin outputs are mma_case_twin's; and on the
// small-integer tiles the twin gives the exact results the layout check expects.
TEST(WgmmaProbe, TilesHoldTheMmaProbeCases) {
  for (int f = 0; f < kMmaDistCount; ++f) {
    const MmaDist dist = static_cast<MmaDist>(f);
    const Tiles T = family_tiles(dist, probe_seed(), 256, 1, 2);
    const int G = 32;
    for (int64_t tile = 0; tile < T.count; ++tile)
      for (int i = 0; i < 4; ++i) {
        MmaCase cs;
        make_mma_case(dist, probe_seed(), static_cast<uint64_t>(tile * G + i), cs);
        uint32_t d[16][8];
        mma_case_twin(cs, d);
        for (int m = 0; m < 16; ++m)
          for (int n = 0; n < 8; ++n)
            ASSERT_EQ(twin_output(T, tile, 16 * i + m, 8 * i + n), d[m][n])
                << mma_dist_name(dist) << " tile " << tile << " block " << i;
      }
  }
  for (const Shape& sh : kShapes) {
    const Tiles T = small_int_tiles(probe_seed(), sh.n, sh.steps, 2);
    const std::vector<uint32_t> twin = twin_tiles(T);
    const std::vector<double> exact = exact_tiles(T);
    for (size_t i = 0; i < twin.size(); ++i)
      ASSERT_EQ(static_cast<double>(bits_f32(twin[i])), exact[i])
          << "n " << sh.n << " output " << i;
  }
}

struct Count {
  int64_t outputs = 0, vs_twin = 0, vs_mma = 0, mma_vs_twin = 0;
  std::vector<std::string> first;
};

TEST(WgmmaProbe, MatchesTheTwinAndTheMmaSyncChainOnEveryFamily) {
  SD_REQUIRE_SM90();
  const int swap = layout_swap();
  ASSERT_GE(swap, 0) << "no descriptor reading gives the exact small-integer results";
  const uint64_t seed = probe_seed();
  std::printf("seed %llu (0x%llx); shapes:", static_cast<unsigned long long>(seed),
              static_cast<unsigned long long>(seed));
  for (const Shape& s : kShapes)
    std::printf(" m64n%dk16 x %d steps x %lld tiles;", s.n, s.steps,
                static_cast<long long>(s.tiles));
  std::printf(" each with A from shared memory (ss), n8/n64/n256 also from registers (rs)\n");
  constexpr int kShow = 3;     // differences printed per family and variant
  constexpr int kDump = 2000;  // differences written per family and variant (below)
  // SPARKDRAFT_WGMMA_DIFFS=<file>: the first kDump differences of every family and
  // variant, inputs and all three results, one a line (for fitting a model offline).
  std::FILE* dump = nullptr;
  if (const char* path = std::getenv("SPARKDRAFT_WGMMA_DIFFS")) dump = std::fopen(path, "w");
  std::vector<std::vector<Count>> table(kMmaDistCount, std::vector<Count>(variants().size()));
  int64_t total = 0, total_twin = 0, total_mma = 0;
  for (int f = 0; f < kMmaDistCount; ++f) {
    const MmaDist dist = static_cast<MmaDist>(f);
    for (int si = 0; si < kShapeCount; ++si) {
      const Shape& sh = kShapes[si];
      const Tiles T = family_tiles(dist, seed, sh.n, sh.steps, sh.tiles);
      const std::vector<uint32_t> twin = twin_tiles(T);
      DeviceTiles dt(T);
      const std::vector<uint32_t> mma = run_mma_sync(T, dt);
      for (size_t vi = 0; vi < variants().size(); ++vi) {
        const Variant& var = variants()[vi];
        if (var.shape != si) continue;
        Count& cnt = table[static_cast<size_t>(f)][vi];
        const std::vector<uint32_t> wg = run_wgmma(T, dt, var.reg, swap);
        for (int64_t tile = 0; tile < T.count; ++tile)
          for (int row = 0; row < 64; ++row)
            for (int col = 0; col < T.n; ++col) {
              const size_t i = static_cast<size_t>((tile * 64 + row) * T.n + col);
              ++cnt.outputs;
              if (!var.reg && mma[i] != twin[i]) ++cnt.mma_vs_twin;
              if (wg[i] != mma[i]) ++cnt.vs_mma;
              if (wg[i] != twin[i]) {
                if (cnt.vs_twin < kShow)
                  cnt.first.push_back(describe(T, tile, row, col, wg[i], twin[i], mma[i]));
                if (dump != nullptr && cnt.vs_twin < kDump)
                  std::fprintf(dump, "%s %s %s\n", mma_dist_name(dist), variant_name(var).c_str(),
                               describe(T, tile, row, col, wg[i], twin[i], mma[i]).c_str());
                ++cnt.vs_twin;
              }
            }
        total += cnt.outputs, total_twin += cnt.vs_twin, total_mma += cnt.vs_mma;
      }
    }
    // Per family: every variant, then its first differences.
    std::printf("%s\n", mma_dist_name(dist));
    for (size_t v = 0; v < variants().size(); ++v) {
      const Count& c = table[static_cast<size_t>(f)][v];
      std::printf("  %-12s %9lld outputs: %lld differ from the twin, %lld from mma.sync%s\n",
                  variant_name(variants()[v]).c_str(), static_cast<long long>(c.outputs),
                  static_cast<long long>(c.vs_twin), static_cast<long long>(c.vs_mma),
                  c.mma_vs_twin != 0 ? " (mma.sync itself differs from the twin!)" : "");
      for (const std::string& s : c.first) std::printf("    %s\n", s.c_str());
    }
    std::fflush(stdout);
  }
  // The table: per family, all variants together.
  std::printf("\n%-15s %12s %12s %12s %12s\n", "family", "outputs", "vs twin", "vs mma.sync",
              "mma vs twin");
  for (int f = 0; f < kMmaDistCount; ++f) {
    Count sum;
    for (const Count& c : table[static_cast<size_t>(f)]) {
      sum.outputs += c.outputs, sum.vs_twin += c.vs_twin, sum.vs_mma += c.vs_mma;
      sum.mma_vs_twin += c.mma_vs_twin;
    }
    std::printf("%-15s %12lld %12lld %12lld %12lld\n", mma_dist_name(static_cast<MmaDist>(f)),
                static_cast<long long>(sum.outputs), static_cast<long long>(sum.vs_twin),
                static_cast<long long>(sum.vs_mma), static_cast<long long>(sum.mma_vs_twin));
  }
  if (dump != nullptr) std::fclose(dump);
  std::printf("%-15s %12lld %12lld %12lld\n", "all", static_cast<long long>(total),
              static_cast<long long>(total_twin), static_cast<long long>(total_mma));
  for (int f = 0; f < kMmaDistCount; ++f)
    for (size_t v = 0; v < variants().size(); ++v) {
      const Count& c = table[static_cast<size_t>(f)][v];
      const std::string name =
          std::string(mma_dist_name(static_cast<MmaDist>(f))) + " " + variant_name(variants()[v]);
      EXPECT_EQ(c.vs_twin, 0) << name;
      EXPECT_EQ(c.vs_mma, 0) << name;
      EXPECT_EQ(c.mma_vs_twin, 0) << name;
    }
}

}  // namespace
}  // namespace sparkdraft
