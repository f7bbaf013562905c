// cuda::gemm (the tensor-core chain of ops/gemm.h) against cpu::gemm (its CPU
// twin), bit for bit: a sweep of M, N, K, canonical K slices, padded strides,
// misaligned pointers, NaN / inf rows, every variant the launcher can pick forced
// in turn; a captured CUDA graph equals the eager call; bad arguments are refused.
// GemmSpeed.* times the Qwen3-8B projections (correctness first, then the median
// of 10 with the L2 flushed between repeats) and prints us and GB/s: no assertion
// on speed.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "common/bits.h"
#include "common/harness.h"
#include "common/random.h"
#include "cuda/common/graph.h"
#include "cuda/common/launch.h"
#include "cuda/common/mma_probe.h"
#include "cuda/common/ptx.cuh"
#include "cuda/gpu_test_util.h"
#include "cuda/kernels.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/ops/gemm.h"

namespace sparkdraft {
namespace {

using cuda::DeviceBuffer;
using cuda::DeviceStream;
using cuda::GemmVariant;

int cpu_threads() { return static_cast<int>(std::max(1u, std::thread::hardware_concurrency())); }

// One problem on the host: x [M, x_stride], w [N, K], y [M, y_stride] and the
// element offset (0 aligned, 1 misaligned) at which each lives in its device buffer.
struct Problem {
  int M = 0, N = 0, K = 0;
  int64_t x_stride = 0, y_stride = 0;
  int offset = 0;
  std::vector<bf16> x, w, y0;
};

std::string describe(const Problem& p, int S, uint64_t seed) {
  std::ostringstream os;
  os << "gemm seed " << seed << " M " << p.M << " N " << p.N << " K " << p.K << " x_stride "
     << p.x_stride << " y_stride " << p.y_stride << " offset " << p.offset << " k_slices " << S;
  return os.str();
}

Problem make(test::Gen& gen, int M, int N, int K, bool misaligned) {
  Problem p;
  p.M = M, p.N = N, p.K = K;
  p.offset = misaligned ? 1 : 0;
  p.x_stride = misaligned ? K + 1 : (K % 8 == 0 ? K + 8 : K + 3);
  p.y_stride = N + 3;
  p.x = gen.bf16s(static_cast<size_t>(M) * p.x_stride, -2.0f, 2.0f);
  p.w = gen.bf16s(static_cast<size_t>(N) * K, -1.0f, 1.0f);
  // NaN in x's row padding (never read); an inf row of x, a NaN and an inf in w,
  // a -0 and subnormals here and there.
  for (int m = 0; m < M; ++m)
    for (int64_t k = K; k < p.x_stride; ++k) p.x[m * p.x_stride + k] = bf16{0x7fc0};
  if (M > 2) p.x[(M / 2) * p.x_stride + K / 2] = bf16{0x7f80};
  if (N > 2) {
    p.w[static_cast<size_t>(N / 3) * K + K - 1] = bf16{0xffc0};
    p.w[static_cast<size_t>(N - 1) * K] = bf16{0xff80};
  }
  for (int i = 0; i < 8; ++i) {
    const uint16_t v[] = {0x8000, 0x0001, 0x807f, 0x0040};
    p.w[static_cast<size_t>(gen.integer(0, static_cast<int64_t>(p.w.size()) - 1))] = bf16{v[i % 4]};
    p.x[static_cast<size_t>(gen.integer(0, static_cast<int64_t>(p.x.size()) - 1))] = bf16{v[i % 4]};
  }
  p.y0 = gen.bf16s(static_cast<size_t>(M) * p.y_stride, 50.0f, 60.0f);  // padding marker
  return p;
}

std::vector<bf16> cpu_result(const Problem& p, int S) {
  std::vector<bf16> y = p.y0;
  cpu::gemm(
      ops::gemm_of(p.x.data(), p.x_stride, p.w.data(), p.M, p.N, p.K, y.data(), p.y_stride, S),
      cpu_threads());
  return y;
}

// The problem on the device, at its offsets.
struct DeviceProblem {
  DeviceBuffer<bf16> x, w, y;
  const Problem& p;
  DeviceProblem(const Problem& pr, cudaStream_t s)
      : x(pr.x.size() + 1), w(pr.w.size() + 1), y(pr.y0.size() + 1), p(pr) {
    x.upload(pr.x.data(), pr.x.size(), pr.offset, s);
    w.upload(pr.w.data(), pr.w.size(), pr.offset, s);
    reset(s);
  }
  void reset(cudaStream_t s) { y.upload(p.y0.data(), p.y0.size(), p.offset, s); }
  const bf16* dx() const { return x.data() + p.offset; }
  const bf16* dw() const { return w.data() + p.offset; }
  bf16* dy() { return y.data() + p.offset; }
  std::vector<bf16> result(cudaStream_t s) {
    std::vector<bf16> out(p.y0.size());
    y.download(out.data(), out.size(), p.offset, s);
    SD_CUDA_CHECK(cudaStreamSynchronize(s));
    return out;
  }
  void run(GemmVariant v, int S, cudaStream_t s) {
    cuda::gemm_with(v, ops::gemm_of(dx(), p.x_stride, dw(), p.M, p.N, p.K, dy(), p.y_stride, S), s);
  }
};

const GemmVariant kForced[] = {GemmVariant::ring_n8,  GemmVariant::ring_n16, GemmVariant::ring_n32,
                               GemmVariant::ring_n64, GemmVariant::ring_big, GemmVariant::ring_wide,
                               GemmVariant::bulk_n8,  GemmVariant::wg_n64,   GemmVariant::wg_n128,
                               GemmVariant::wg_n256,  GemmVariant::wg_k,     GemmVariant::general};

bool is_wg(GemmVariant v) {
  return v == GemmVariant::wg_n64 || v == GemmVariant::wg_n128 || v == GemmVariant::wg_n256 ||
         v == GemmVariant::wg_k;
}

// Runs `automatic` and every variant that can take the problem; each must give
// the CPU's bits. Returns the number of variants run.
int check_all_variants(const Problem& p, int S, uint64_t seed, cudaStream_t s) {
  SCOPED_TRACE(describe(p, S, seed));
  const std::vector<bf16> want = cpu_result(p, S);
  DeviceProblem d(p, s);
  const bool bulk = cuda::gemm_ring_ok(d.dx(), p.x_stride, d.dw(), p.K);
  EXPECT_EQ(bulk, p.offset == 0 && p.K % 8 == 0) << "which layouts the ring and bulk kernels take";
  int ran = 0;
  d.run(GemmVariant::automatic, S, s);
  EXPECT_TRUE(test::same_bits(d.result(s), want, {p.y_stride}))
      << "automatic ("
      << cuda::gemm_variant_name(cuda::gemm_pick(
             ops::gemm_of(d.dx(), p.x_stride, d.dw(), p.M, p.N, p.K, nullptr, p.N, S)))
      << ")";
  ++ran;
  for (GemmVariant v : kForced) {
    if (is_wg(v) && !cuda::wgmma_self_test().usable) {
      EXPECT_THROW(d.run(v, S, s), DeviceError) << cuda::gemm_variant_name(v);
      continue;
    }
    if ((v != GemmVariant::general && !bulk) ||
        (is_wg(v) && p.K % (64 * S) != 0)) {  // wg: whole 64-k stages (a slice)
      EXPECT_THROW(d.run(v, S, s), InvalidArgument) << cuda::gemm_variant_name(v);
      continue;
    }
    d.reset(s);
    d.run(v, S, s);
    EXPECT_TRUE(test::same_bits(d.result(s), want, {p.y_stride})) << cuda::gemm_variant_name(v);
    ++ran;
  }
  return ran;
}

TEST(CudaGemm, SweepEqualsCpuBitForBit) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  const uint64_t seed = 0x6E3301;
  test::Gen gen(seed);
  int cases = 0, runs = 0;
  for (int M : {1, 2, 7, 8, 9, 16, 31, 56, 64, 65, 190, 224, 1024})
    for (int N : {1, 8, 15, 16, 17, 100, 6144, 65544})
      for (int K : {16, 17, 100, 128, 1000, 4096}) {
        // Keep the CPU reference affordable: the full cross product up to 2^24
        // multiply-adds, and above it the shapes a draft step has (a small N at
        // large M and K, N 6144 at a few tokens, and N 65544 past 64 tokens: wg_n256
        // runs it on the wide tile's two warpgroups, N 6144 on one).
        const int64_t work = static_cast<int64_t>(M) * N * K;
        const bool big_ok = (N <= 17 && K >= 1000) || (N == 6144 && M <= 9 && K != 1000) ||
                            (N == 100 && M <= 65) ||
                            (N == 65544 && K == 128 && (M == 65 || M == 224));
        if (work > (int64_t{1} << 24) && !big_ok) continue;
        for (int S : {1, 2, 4, 8}) {
          if (S > 1 && K % (16 * S) != 0) continue;
          // Misaligned layouts for the smaller problems (the general path only).
          for (bool misaligned : {false, true}) {
            if (misaligned && work > (int64_t{1} << 22)) continue;
            const Problem p = make(gen, M, N, K, misaligned);
            runs += check_all_variants(p, S, seed, stream.get());
            ++cases;
            if (HasFailure()) return;
          }
        }
      }
  std::printf("[gemm] %d problems, %d kernel runs, all equal to cpu::gemm\n", cases, runs);
}

// The shapes o_proj and down take in a draft step past 64 tokens (k_slices 8: the wide tile,
// one K slice a CTA of a cluster of eight, the outputs folded across the cluster's shared
// memory): every wide token count (160, 192, 224, 256; a second token tile past 256), whole
// and partial 128-row blocks, every variant that takes the problem (fp32 outputs: the next
// test's N 264).
TEST(CudaGemm, SlicedWideTileEqualsCpu) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  const uint64_t seed = 0x6E3303;
  test::Gen gen(seed);
  int runs = 0;
  for (int M : {65, 128, 150, 160, 161, 192, 200, 224, 256, 300})
    for (int N : {136, 264})
      for (int K : {512, 1024}) {
        const Problem p = make(gen, M, N, K, false);
        runs += check_all_variants(p, 8, seed, stream.get());
        if (HasFailure()) return;
      }
  std::printf("[gemm sliced wide] %d kernel runs at k_slices 8, all equal to cpu::gemm\n", runs);
}

// cuda::gemm with an fp32 output (a TP rank's unrounded subtree) == cpu::gemm's fp32 output, fp32
// bit for bit (a NaN matches any NaN: the GPU's arithmetic returns the canonical NaN, x86
// propagates payloads), for automatic and every variant that takes the problem (the
// epilogue's fp32 store in each tile); bf16(it) through cuda::narrow == cuda::gemm.
// NaN / inf / -0 / subnormal inputs from make(); y's padding untouched.
TEST(CudaGemm, F32SubtreeEqualsCpuSlicesBitForBit) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  cudaStream_t s = stream.get();
  const uint64_t seed = 0x6E3302;
  test::Gen gen(seed);
  int runs = 0;
  for (int M : {1, 7, 9, 56, 65, 224})
    for (int N : {17, 100, 264, 4096})  // 264: two 128-row blocks of the sliced wide tile
      for (int K : {128, 512, 1024}) {
        if (static_cast<int64_t>(M) * N * K > (int64_t{1} << 26)) continue;
        for (int S : {1, 2, 4, 8}) {
          SCOPED_TRACE("gemm_f32 seed " + std::to_string(seed) + " M " + std::to_string(M) + " N " +
                       std::to_string(N) + " K " + std::to_string(K) + " k_slices " +
                       std::to_string(S));
          const Problem p = make(gen, M, N, K, false);
          const int64_t ys = N + 5;
          std::vector<float> y0(static_cast<size_t>(M) * ys);
          for (float& v : y0) v = static_cast<float>(gen.uniform(70.0f, 80.0f));  // padding
          std::vector<float> want = y0;
          cpu::gemm(
              ops::gemm_f32_of(p.x.data(), p.x_stride, p.w.data(), K, M, N, K, want.data(), ys, S),
              cpu_threads());
          DeviceBuffer<bf16> x(p.x), w(p.w);
          DeviceBuffer<float> y(y0);
          for (GemmVariant v : {GemmVariant::automatic, GemmVariant::ring_n8, GemmVariant::ring_n16,
                                GemmVariant::ring_n32, GemmVariant::ring_n64, GemmVariant::ring_big,
                                GemmVariant::ring_wide, GemmVariant::bulk_n8, GemmVariant::wg_n64,
                                GemmVariant::wg_n128, GemmVariant::wg_n256, GemmVariant::wg_k,
                                GemmVariant::general}) {
            if (is_wg(v) && !cuda::wgmma_self_test().usable) continue;
            if (is_wg(v) && K % (64 * S) != 0) continue;
            y.upload(y0.data(), y0.size(), 0, s);
            cuda::gemm_with(
                v, ops::gemm_f32_of(x.data(), p.x_stride, w.data(), 0, M, N, K, y.data(), ys, S),
                s);
            EXPECT_TRUE(test::same_bits(y.download(s), want, {ys, true}))
                << cuda::gemm_variant_name(v);
            ++runs;
          }
          // The rounding after the all-reduce: narrow(gemm_f32) == gemm, bit for bit.
          DeviceBuffer<float> sum(static_cast<size_t>(M) * N);
          cuda::gemm(ops::gemm_f32_of(x.data(), p.x_stride, w.data(), 0, M, N, K, sum.data(), N, S),
                     s);
          DeviceBuffer<bf16> narrowed(static_cast<size_t>(M) * N),
              direct(static_cast<size_t>(M) * N);
          cuda::narrow(sum.data(), static_cast<int64_t>(M) * N, narrowed.data(), s);
          cuda::gemm(ops::gemm_of(x.data(), p.x_stride, w.data(), M, N, K, direct.data(), N, S), s);
          EXPECT_TRUE(test::same_bits(narrowed.download(s), direct.download(s))) << "narrow";
          if (HasFailure()) return;
        }
      }
  std::printf("[gemm_f32] %d kernel runs, all equal to cpu::gemm (fp32 out)\n", runs);
}

// gate_up + SwiGLU in one pass == cpu::gemm into [M, 2I] then cpu::silu_mul, bit for
// bit (NaN / inf / -0 / subnormal inputs from make(); y's padding untouched).
TEST(CudaGemm, SwigluEqualsGemmThenSiluMul) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  cudaStream_t s = stream.get();
  const uint64_t seed = 0x5A1CE;
  test::Gen gen(seed);
  int cases = 0;
  for (int M : {1, 7, 8, 9, 16, 17, 32, 33, 56, 64, 65, 130, 190, 224, 256, 300})
    for (int I : {1, 8, 13, 100, 1536, 4096})
      for (int K : {16, 128, 1024}) {
        if (static_cast<int64_t>(M) * 2 * I * K > (int64_t{1} << 24)) continue;
        Problem p = make(gen, M, 2 * I, K, false);
        p.y_stride = I + 5;
        p.y0 = gen.bf16s(static_cast<size_t>(M) * p.y_stride, 50.0f, 60.0f);
        SCOPED_TRACE(describe(p, 1, seed) + " (swiglu, inter " + std::to_string(I) + ")");
        std::vector<bf16> gu(static_cast<size_t>(M) * 2 * I);
        cpu::gemm(
            ops::gemm_of(p.x.data(), p.x_stride, p.w.data(), M, 2 * I, K, gu.data(), 2 * I, 1),
            cpu_threads());
        std::vector<bf16> act(static_cast<size_t>(M) * I);
        cpu::silu_mul(ops::silu_mul_of(gu.data(), M, I, act.data()), cpu_threads());
        std::vector<bf16> want = p.y0;
        for (int m = 0; m < M; ++m)
          for (int i = 0; i < I; ++i)
            want[static_cast<size_t>(m) * p.y_stride + i] = act[static_cast<size_t>(m) * I + i];
        DeviceProblem d(p, s);
        cuda::gemm_swiglu(
            ops::gate_up_of(d.dx(), p.x_stride, d.dw(), M, I, K, nullptr, d.dy(), p.y_stride), s);
        EXPECT_TRUE(test::same_bits(d.result(s), want, {p.y_stride}));
        ++cases;
        if (HasFailure()) return;
      }
  std::printf("[gemm swiglu] %d problems, all equal to cpu::gemm + cpu::silu_mul\n", cases);
}

// A captured graph of the call replays the eager bits, launch after launch.
TEST(CudaGemm, GraphReplayEqualsEagerCall) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  const uint64_t seed = 0x6A4F;
  test::Gen gen(seed);
  for (const auto& mnks : {std::array<int, 4>{7, 4096, 4096, 8},
                           {56, 6144, 1024, 1},
                           {3, 100, 17, 1},
                           {224, 300, 512, 4}}) {
    const Problem p = make(gen, mnks[0], mnks[1], mnks[2], false);
    const int S = mnks[3];
    SCOPED_TRACE(describe(p, S, seed));
    DeviceProblem d(p, stream.get());
    d.run(GemmVariant::automatic, S, stream.get());
    const std::vector<bf16> eager = d.result(stream.get());
    d.reset(stream.get());
    const cuda::GraphExec graph(stream.get(), [&](cudaStream_t st) {
      cuda::gemm(ops::gemm_of(d.dx(), p.x_stride, d.dw(), p.M, p.N, p.K, d.dy(), p.y_stride, S),
                 st);
    });
    for (int launch = 0; launch < 2; ++launch) {
      graph.launch(stream.get());
      EXPECT_TRUE(test::same_bits(d.result(stream.get()), eager, {p.y_stride}))
          << "graph launch " << launch;
      d.reset(stream.get());
    }
  }
}

// Spins about `cycles` SM clocks.
__device__ __forceinline__ void spin_clocks(long long cycles) {
  const long long t0 = clock64();
  while (clock64() - t0 < cycles) {
  }
}

// Copies n values from src to dst after spinning about `cycles` SM clocks: launched before a
// GEMM under programmatic dependent launch, it is the predecessor that writes the GEMM's
// tokens late, while the GEMM (started early) already streams its first weights.
__global__ void late_copy_kernel(const bf16* src, bf16* dst, int64_t n, long long cycles) {
  cuda::pdl_enter();
  spin_clocks(cycles);
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

// The late writer's clocks: it stores the global timer (ns) when its spin ends into *end; the
// probe, launched after it under programmatic dependent launch, stores the timer at its
// first instruction (before its wait) into *start.
__device__ unsigned long long global_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}
__global__ void late_mark_kernel(unsigned long long* end, long long cycles) {
  cuda::pdl_enter();
  spin_clocks(cycles);
  if (threadIdx.x == 0) *end = global_ns();
}
__global__ void start_mark_kernel(unsigned long long* start) {
  if (threadIdx.x == 0) *start = global_ns();
  cuda::pdl_enter();
}

// The step's programmatic dependent launch (CudaDraftOptions::step_pdl): the ring, bulk and wg
// kernels request their first stages' weight rows before they wait for the previous kernel,
// and their tokens after it. Here the previous kernel writes the tokens about 100 us late
// over stale ones (other values): a kernel that read a token before its wait would give
// other bits than cpu::gemm on the new tokens. Every variant that takes each problem.
TEST(CudaGemm, UnderPdlReadsTheTokensItsPredecessorWritesLate) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  cudaStream_t s = stream.get();
  const uint64_t seed = 0x6E3304;
  test::Gen gen(seed);
  {
    // The window the test relies on: the kernel after the late writer starts while it spins.
    // Each kernel is launched once first: a kernel's first launch loads its module (lazy
    // loading), which the GPU runs only once the kernels before it are done (2026-12-06h run
    // 2: without this the probe started 4.4 us after the spin ended).
    DeviceBuffer<unsigned long long> marks(2);
    DeviceBuffer<bf16> none(1);
    cuda::launch_kernel("late_mark_kernel", late_mark_kernel,
                        cuda::LaunchShape{dim3(1), dim3(32), 0, s}, marks.data(), 0LL);
    cuda::launch_kernel("start_mark_kernel", start_mark_kernel,
                        cuda::LaunchShape{dim3(1), dim3(32), 0, s}, marks.data() + 1);
    cuda::launch_kernel("late_copy_kernel", late_copy_kernel,
                        cuda::LaunchShape{dim3(1), dim3(256), 0, s}, none.data(), none.data(),
                        int64_t{0}, 0LL);
    SD_CUDA_CHECK(cudaStreamSynchronize(s));
    {
      const cuda::PdlScope pdl(true);
      cuda::launch_kernel("late_mark_kernel", late_mark_kernel,
                          cuda::LaunchShape{dim3(1), dim3(32), 0, s}, marks.data(), 200000LL);
      cuda::launch_kernel("start_mark_kernel", start_mark_kernel,
                          cuda::LaunchShape{dim3(1), dim3(32), 0, s}, marks.data() + 1);
    }
    const std::vector<unsigned long long> t = marks.download(s);
    ASSERT_LT(t[1], t[0]) << "the kernel after the late writer did not start before its spin "
                             "ended: no window in which an early token read could show";
  }
  int runs = 0;
  for (const auto& mnks : {std::array<int, 4>{1, 4096, 4096, 1},
                           {7, 6144, 1024, 1},
                           {8, 1024, 4096, 8},
                           {56, 1536, 1024, 1},
                           {65, 264, 1024, 8},
                           {224, 264, 512, 8}}) {
    const Problem p = make(gen, mnks[0], mnks[1], mnks[2], false);
    const int S = mnks[3];
    SCOPED_TRACE(describe(p, S, seed) + " (under programmatic dependent launch)");
    const std::vector<bf16> want = cpu_result(p, S);
    const std::vector<bf16> stale = gen.bf16s(p.x.size(), -2.0f, 2.0f);
    DeviceProblem d(p, s);
    const DeviceBuffer<bf16> fresh(p.x);
    for (GemmVariant v : kForced) {
      if (is_wg(v) && (!cuda::wgmma_self_test().usable || p.K % (64 * S) != 0)) continue;
      d.reset(s);
      d.x.upload(stale.data(), stale.size(), p.offset, s);
      {
        const cuda::PdlScope pdl(true);
        cuda::launch_kernel("late_copy_kernel", late_copy_kernel,
                            cuda::LaunchShape{dim3(1), dim3(256), 0, s}, fresh.data(),
                            d.x.data() + p.offset, static_cast<int64_t>(p.x.size()), 200000LL);
        d.run(v, S, s);
      }
      EXPECT_TRUE(test::same_bits(d.result(s), want, {p.y_stride})) << cuda::gemm_variant_name(v);
      ++runs;
      if (HasFailure()) return;
    }
  }
  std::printf("[gemm pdl] %d kernel runs after a late writer, all equal to cpu::gemm\n", runs);
}

TEST(CudaGemm, BadArgumentsAreRefused) {
  SD_REQUIRE_GPU();
  DeviceBuffer<bf16> buf(4096);
  bf16* p = buf.data();
  EXPECT_THROW(cuda::gemm(ops::gemm_of(p, 4, p, -1, 4, 4, p, 4, 1), nullptr), InvalidArgument);
  EXPECT_THROW(cuda::gemm(ops::gemm_of(p, 4, p, 2, -1, 4, p, 4, 1), nullptr), InvalidArgument);
  EXPECT_THROW(cuda::gemm(ops::gemm_of(p, 4, p, 2, 4, 0, p, 4, 1), nullptr), InvalidArgument);
  EXPECT_THROW(cuda::gemm(ops::gemm_of(p, 3, p, 2, 4, 4, p, 4, 1), nullptr),
               InvalidArgument);  // x_stride < K
  EXPECT_THROW(cuda::gemm(ops::gemm_of(p, 4, p, 2, 4, 4, p, 3, 1), nullptr),
               InvalidArgument);  // y_stride < N
  EXPECT_THROW(cuda::gemm(ops::gemm_of(p, 64, p, 2, 4, 64, p, 4, 3), nullptr), InvalidArgument);
  EXPECT_THROW(cuda::gemm(ops::gemm_of(p, 96, p, 2, 4, 96, p, 4, 4), nullptr), InvalidArgument);
  EXPECT_THROW(cuda::gemm(ops::gemm_of(nullptr, 4, p, 2, 4, 4, p, 4, 1), nullptr), InvalidArgument);
  EXPECT_THROW(cuda::gemm(ops::gemm_of(p, 4, p, 2, 2000000, 4, p, 2000000, 1), nullptr),
               InvalidArgument);
  // The ring and bulk variants refuse what they cannot stream.
  for (GemmVariant v : {GemmVariant::ring_n8, GemmVariant::bulk_n8}) {
    EXPECT_THROW(cuda::gemm_with(v, ops::gemm_of(p + 1, 64, p, 2, 4, 64, p, 4, 1), nullptr),
                 InvalidArgument);
    EXPECT_THROW(cuda::gemm_with(v, ops::gemm_of(p, 64, p, 2, 4, 60, p, 4, 1), nullptr),
                 InvalidArgument);
  }
  // The fused gate_up + SwiGLU takes the ring's layouts only.
  EXPECT_THROW(cuda::gemm_swiglu(ops::gate_up_of(p, 36, p, 2, 4, 32, nullptr, p, 4), nullptr),
               InvalidArgument);
  EXPECT_THROW(cuda::gemm_swiglu(ops::gate_up_of(p + 1, 32, p, 2, 4, 32, nullptr, p, 4), nullptr),
               InvalidArgument);
  EXPECT_THROW(cuda::gemm_swiglu(ops::gate_up_of(p, 36, p, 2, 4, 36, nullptr, p, 4), nullptr),
               InvalidArgument);
  EXPECT_NO_THROW(
      cuda::gemm(ops::gemm_of(nullptr, 4, nullptr, 0, 4, 4, nullptr, 4, 1), nullptr));  // M == 0
  EXPECT_NO_THROW(
      cuda::gemm(ops::gemm_of(nullptr, 4, nullptr, 3, 0, 4, nullptr, 4, 1), nullptr));  // N == 0
  SD_CUDA_CHECK(cudaDeviceSynchronize());
}

// ---- speed --------------------------------------------------------------------------

__global__ void fill_kernel(bf16* v, int64_t n, uint32_t seed) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    uint32_t h = static_cast<uint32_t>(i) * 0x9E3779B1u ^ static_cast<uint32_t>(i >> 32) ^ seed;
    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 12;
    // sign, exponent 2^-7 .. 2^0, 7 random mantissa bits
    v[i] =
        bf16{static_cast<uint16_t>((h & 0x8000u) | ((120u + (h >> 16) % 8u) << 7) | (h & 0x7fu))};
  }
}

void fill(DeviceBuffer<bf16>& b, uint32_t seed, cudaStream_t s) {
  fill_kernel<<<1024, 256, 0, s>>>(b.data(), static_cast<int64_t>(b.size()), seed);
  SD_CHECK_LAUNCH();
}

// The bulk kernel's tuning (cuda::gemm_bulk_tuned: stage width, fewest stages)
// changes only how the operands are staged: every setting gives the CPU's bits, on
// stages that end inside a 16-k step (K % 16 == 8), K slices (1 to 8), 1 to 8 tokens,
// rows past N and tokens past M.
const cuda::GemmBulkTuning kBulkTunings[] = {{0, 2}, {0, 4}, {512, 2}, {256, 4}, {128, 6}, {64, 8}};

std::string describe(const cuda::GemmBulkTuning& t) {
  return "stage_k " + std::to_string(t.stage_k) + " min_stages " + std::to_string(t.min_stages);
}

TEST(CudaGemm, BulkTuningEqualsCpu) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  cudaStream_t s = stream.get();
  uint64_t seed = 0xB01C00;
  int runs = 0;
  struct Shape {
    int M, N, K, S;
  };
  for (const Shape sh : {Shape{1, 16, 64, 1}, Shape{7, 100, 200, 1}, Shape{8, 333, 1032, 1},
                         Shape{3, 48, 4096, 8}, Shape{7, 64, 2048, 4}, Shape{5, 40, 1024, 2}}) {
    test::Gen gen(++seed);
    const Problem p = make(gen, sh.M, sh.N, sh.K, false);
    const std::vector<bf16> want = cpu_result(p, sh.S);
    DeviceProblem d(p, s);
    for (const cuda::GemmBulkTuning& t : kBulkTunings) {
      SCOPED_TRACE(describe(p, sh.S, seed) + " " + describe(t));
      d.reset(s);
      cuda::gemm_bulk_tuned(
          t, ops::gemm_of(d.dx(), p.x_stride, d.dw(), p.M, p.N, p.K, d.dy(), p.y_stride, sh.S), s);
      EXPECT_TRUE(test::same_bits(d.result(s), want, {p.y_stride}));
      ++runs;
    }
  }
  std::printf("[gemm] bulk tunings vs cpu::gemm: %d runs\n", runs);
  // Refused: no such stage, too few stages, and 512-k stages of which 4 do not fit in
  // a third of an SM (6144 rows: 384 CTAs).
  test::Gen gen(7);
  const Problem p = make(gen, 7, 6144, 256, false);
  DeviceProblem d(p, s);
  for (const cuda::GemmBulkTuning bad :
       {cuda::GemmBulkTuning{100, 2}, cuda::GemmBulkTuning{0, 1}, cuda::GemmBulkTuning{512, 4}})
    EXPECT_THROW(
        cuda::gemm_bulk_tuned(
            bad, ops::gemm_of(d.dx(), p.x_stride, d.dw(), p.M, p.N, p.K, d.dy(), p.y_stride, 1), s),
        InvalidArgument)
        << describe(bad);
}

// The Qwen3-8B draft's projections (N, K, canonical K slices) the speed tests time.
struct Projection {
  const char* name;
  int N, K, S;
};
const Projection kQwen3Projections[] = {{"qkv", 6144, 4096, 1},        {"o_proj", 4096, 4096, 8},
                                        {"gate_up", 24576, 4096, 1},   {"down", 4096, 12288, 8},
                                        {"lm_head", 151936, 4096, 1},  {"fc", 4096, 20480, 1},
                                        {"context_kv", 10240, 4096, 1}};

TEST(GemmSpeed, Qwen3_8bProjections) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  cudaStream_t s = stream.get();
  cudaDeviceProp prop{};
  SD_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
  cuda::GraphTimer timer(s, cuda::query_gpu());
  std::printf(
      "[gemm speed] %s, %d SMs; weight bytes / median time of 10, L2 flushed "
      "(bench/common/harness.h GraphTimer)\n",
      prop.name, prop.multiProcessorCount);
  for (const Projection& sh : kQwen3Projections) {
    DeviceBuffer<bf16> w(static_cast<size_t>(sh.N) * sh.K);
    fill(w, 0x1234u + static_cast<uint32_t>(sh.N), s);
    for (int M : {7, 56, 224}) {
      SCOPED_TRACE(std::string(sh.name) + " M " + std::to_string(M));
      DeviceBuffer<bf16> x(static_cast<size_t>(M) * sh.K), y(static_cast<size_t>(M) * sh.N);
      fill(x, 0x777u + static_cast<uint32_t>(M), s);
      cuda::gemm(ops::gemm_of(x.data(), sh.K, w.data(), M, sh.N, sh.K, y.data(), sh.N, sh.S), s);
      // Correctness first: the first and last 32 weight rows against cpu::gemm.
      const std::vector<bf16> hx = x.download(s);
      const std::vector<bf16> hy = y.download(s);
      const int rows = std::min(32, sh.N);
      for (int n0 : {0, sh.N - rows}) {
        std::vector<bf16> hw(static_cast<size_t>(rows) * sh.K);
        w.download(hw.data(), hw.size(), static_cast<size_t>(n0) * sh.K, s);
        SD_CUDA_CHECK(cudaStreamSynchronize(s));
        std::vector<bf16> want(static_cast<size_t>(M) * rows), got(want.size());
        cpu::gemm(ops::gemm_of(hx.data(), sh.K, hw.data(), M, rows, sh.K, want.data(), rows, sh.S),
                  cpu_threads());
        for (int m = 0; m < M; ++m)
          for (int n = 0; n < rows; ++n)
            got[static_cast<size_t>(m) * rows + n] = hy[static_cast<size_t>(m) * sh.N + n0 + n];
        ASSERT_TRUE(test::same_bits(got, want, {rows})) << "rows from " << n0;
      }
      const double us = timer.median_us(
          [&] {
            cuda::gemm(ops::gemm_of(x.data(), sh.K, w.data(), M, sh.N, sh.K, y.data(), sh.N, sh.S),
                       s);
          },
          1, 10);
      const double bytes = 2.0 * sh.N * sh.K;
      std::printf("[gemm speed] %-10s N %6d K %5d S %d M %4d (%s): %9.1f us  %7.0f GB/s\n", sh.name,
                  sh.N, sh.K, sh.S, M,
                  cuda::gemm_variant_name(cuda::gemm_pick(
                      ops::gemm_of(x.data(), sh.K, w.data(), M, sh.N, sh.K, nullptr, sh.N, sh.S))),
                  us, bytes / us * 1e-3);
    }
  }
}

// gate_up + SwiGLU in one pass against the gate_up GEMM followed by silu_mul, on
// the Qwen3-8B shape (median of 10, L2 flushed before each): the pass the fusion
// saves. Checks the two give the same bits first; no assertion on speed.
TEST(GemmSpeed, GateUpSwigluFusedVsTwoPasses) {
  SD_REQUIRE_GPU();
  const int I = 12288, K = 4096;
  DeviceStream stream;
  cudaStream_t s = stream.get();
  cuda::GraphTimer timer(s, cuda::query_gpu());
  DeviceBuffer<bf16> w(static_cast<size_t>(2) * I * K);
  fill(w, 0x5151u, s);
  for (int M : {7, 56, 224}) {
    DeviceBuffer<bf16> x(static_cast<size_t>(M) * K), gu(static_cast<size_t>(M) * 2 * I),
        act(static_cast<size_t>(M) * I), fused(static_cast<size_t>(M) * I);
    fill(x, 0x99u + static_cast<uint32_t>(M), s);
    const auto two = [&] {
      cuda::gemm(ops::gemm_of(x.data(), K, w.data(), M, 2 * I, K, gu.data(), 2 * I, 1), s);
      cuda::silu_mul(ops::silu_mul_of(gu.data(), M, I, act.data()), s);
    };
    const auto one = [&] {
      cuda::gemm_swiglu(ops::gate_up_of(x.data(), K, w.data(), M, I, K, nullptr, fused.data(), I),
                        s);
    };
    two();
    one();
    EXPECT_TRUE(test::same_bits(fused.download(s), act.download(s))) << "M " << M;
    const double us[2] = {timer.median_us(two, 1, 10), timer.median_us(one, 1, 10)};
    std::printf("[gemm swiglu speed] M %3d: gate_up + silu_mul %8.1f us, fused %8.1f us (%.2fx)\n",
                M, us[0], us[1], us[0] / us[1]);
  }
}

// Every variant forced on each projection (median of 5, L2 flushed): the data
// behind gemm_pick. Prints us per variant; no assertion on speed.
TEST(GemmSpeed, EveryVariant) {
  SD_REQUIRE_GPU();
  std::vector<GemmVariant> variants = {
      GemmVariant::ring_n8,  GemmVariant::ring_n16,  GemmVariant::ring_n32, GemmVariant::ring_n64,
      GemmVariant::ring_big, GemmVariant::ring_wide, GemmVariant::bulk_n8};
  const bool wg = cuda::wgmma_self_test().usable;
  if (wg)
    variants.insert(variants.end(), {GemmVariant::wg_n64, GemmVariant::wg_n128,
                                     GemmVariant::wg_n256, GemmVariant::wg_k});
  DeviceStream stream;
  cudaStream_t s = stream.get();
  cuda::GraphTimer timer(s, cuda::query_gpu());
  std::printf("[gemm variants] us (GB/s of weights): ring n8 n16 n32 n64 big wide, bulk n8%s\n",
              wg ? ", wg n64 n128 n256 k" : "");
  if (!wg) std::printf("[gemm variants] no wg variants: %s\n", cuda::wgmma_self_test().why.c_str());
  for (const Projection& sh : kQwen3Projections) {
    DeviceBuffer<bf16> w(static_cast<size_t>(sh.N) * sh.K);
    fill(w, 0x1234u + static_cast<uint32_t>(sh.N), s);
    for (int M : {7, 56, 224}) {
      DeviceBuffer<bf16> x(static_cast<size_t>(M) * sh.K), y(static_cast<size_t>(M) * sh.N);
      fill(x, 0x777u + static_cast<uint32_t>(M), s);
      std::printf("[gemm variants] %-10s M %4d:", sh.name, M);
      for (GemmVariant v : variants) {
        const double us = timer.median_us(
            [&] {
              cuda::gemm_with(
                  v, ops::gemm_of(x.data(), sh.K, w.data(), M, sh.N, sh.K, y.data(), sh.N, sh.S),
                  s);
            },
            1, 5);
        std::printf(" %8.1f (%5.0f)", us, 2.0 * sh.N * sh.K / us * 1e-3);
      }
      std::printf("\n");
    }
  }
}

// The bulk kernel's tunings on the projections it runs at one request (M 7): the
// data for its default (launch_bulk's sizing). Each setting is checked against the
// default's bits first; prints us and GB/s of weights; no assertion on speed.
TEST(GemmSpeed, BulkTuning) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  cudaStream_t s = stream.get();
  cuda::GraphTimer timer(s, cuda::query_gpu());
  const int M = 7;
  std::printf("[gemm bulk tuning] us (GB/s of weights) at M %d, median of 10, L2 flushed\n", M);
  for (const Projection& sh : kQwen3Projections) {
    DeviceBuffer<bf16> w(static_cast<size_t>(sh.N) * sh.K);
    fill(w, 0x1234u + static_cast<uint32_t>(sh.N), s);
    DeviceBuffer<bf16> x(static_cast<size_t>(M) * sh.K), y(static_cast<size_t>(M) * sh.N),
        y0(static_cast<size_t>(M) * sh.N);
    fill(x, 0x777u + static_cast<uint32_t>(M), s);
    cuda::gemm_bulk_tuned(
        {}, ops::gemm_of(x.data(), sh.K, w.data(), M, sh.N, sh.K, y0.data(), sh.N, sh.S), s);
    const std::vector<bf16> want = y0.download(s);
    for (const cuda::GemmBulkTuning& t : kBulkTunings) {
      const auto run = [&] {
        cuda::gemm_bulk_tuned(
            t, ops::gemm_of(x.data(), sh.K, w.data(), M, sh.N, sh.K, y.data(), sh.N, sh.S), s);
      };
      try {
        run();
      } catch (const InvalidArgument& e) {
        std::printf("[gemm bulk tuning] %-10s %-44s refused: %s\n", sh.name, describe(t).c_str(),
                    e.what());
        continue;
      }
      ASSERT_TRUE(test::same_bits(y.download(s), want)) << sh.name << " " << describe(t);
      const double us = timer.median_us(run, 1, 10);
      std::printf("[gemm bulk tuning] %-10s %-44s %8.1f us (%5.0f GB/s)\n", sh.name,
                  describe(t).c_str(), us, 2.0 * sh.N * sh.K / us * 1e-3);
    }
  }
}

}  // namespace
}  // namespace sparkdraft
