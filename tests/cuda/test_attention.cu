// cuda::attention against cpu::attention, bit for bit (both follow ops/attention.h;
// tests/cpu/test_attention.cpp holds the CPU to the scalar definition): the same kinds
// of cases (odd head dims, kv_len off the chunk grid, windows, causal and not, GQA
// groups 1/4/8/16, padding tokens, NaN slots past kv_len, unmapped pages, NaN/inf
// queries), every split the launcher can pick forced, a captured graph equal to the
// eager call, and the published shapes at a context of 4096. Also (host only, no GPU
// needed) the launcher's split and workspace for the qwen3-8b and muse shapes.
// AttentionSpeed.* (prints only, after its own correctness checks) times the
// published shapes at ctx 4096 with 1, 8 and 32 requests.
#include <gtest/gtest.h>

#include <cuda_runtime.h>
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "common/attention_case.h"
#include "common/bits.h"
#include "common/harness.h"
#include "common/random.h"
#include "cuda/common/graph.h"
#include "cuda/gpu_test_util.h"
#include "cuda/kernels.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"

namespace sparkdraft {
namespace {

using cuda::DeviceBuffer;
using cuda::DeviceStream;
using test::AttentionCase;
using test::AttentionData;

// The device copies of one case.
struct DeviceCase {
  DeviceBuffer<bf16> q, cache, out;
  DeviceBuffer<int32_t> tables, token_request;
  DeviceBuffer<int64_t> positions, kv_lens;
  ops::AttentionParams p;

  DeviceCase(const AttentionData& d, cudaStream_t s)
      : q(d.q, s),
        cache(d.cache, s),
        out(d.out_size()),
        tables(d.block_tables, s),
        token_request(d.token_request, s),
        positions(d.positions, s),
        kv_lens(d.kv_lens, s) {
    p = d.params();
    p.block_tables = tables.data();
    p.token_request = token_request.data();
    p.positions = positions.data();
    p.kv_lens = kv_lens.data();
  }

  std::vector<bf16> run(int splits, cudaStream_t s) {
    DeviceBuffer<unsigned char> ws(std::max<size_t>(1, cuda::attention_workspace_bytes(p, splits)));
    SD_CUDA_CHECK(cudaMemsetAsync(out.data(), 0x7e, out.size() * sizeof(bf16), s));
    cuda::attention(p, q.data(), cache.data(), out.data(), ws.data(), ws.bytes(), s, splits);
    return out.download(s);
  }
};

std::vector<AttentionCase> cases() {
  std::vector<AttentionCase> out = test::attention_cases();
  // GQA 16 with 7 tokens: 112 rows, two pieces per request; head_dim 256 (the wide form);
  // head_dim 20 (not a multiple of 8: the scalar loader); 13 (odd: the split path's
  // o_c stored a float at a time); 80 (padded to 96).
  out.push_back({32, 2, 64, 0, false, {333, 90}, 7, 16, 1, false});
  out.push_back({2, 1, 256, 0, true, {200, 77}, 4, 16, 0, false});
  out.push_back({6, 3, 20, 0, false, {150, 65}, 3, 7, 1, true});
  out.push_back({4, 2, 13, 0, false, {150, 70}, 3, 16, 1, false});
  out.push_back({8, 4, 80, 100, false, {500, 40}, 7, 16, 0, false});
  // The whole-tile form at head dim 128 with 3 and 4 row tiles (128 threads): GQA 4
  // with 12 and 16 tokens a request, a NaN query, padding.
  out.push_back({16, 4, 128, 0, true, {300, 90}, 12, 16, 2, true});
  out.push_back({8, 2, 128, 0, false, {333, 200}, 16, 8, 1, false});
  // Many requests (the launcher's no-split pick) of different lengths.
  out.push_back(
      {8, 2, 64, 0, false, {5, 17, 64, 100, 129, 200, 300, 31, 12, 77, 90, 150}, 7, 16, 3, false});
  return out;
}

// Split values to force: the launcher's pick, no split, and several shares of the
// chunks, up to more splits than chunks (empty CTAs).
std::vector<int> forced_splits(const ops::AttentionParams& p) {
  const int chunks = static_cast<int>((p.max_kv_len + 63) / 64);
  std::vector<int> s = {0, 1, 2, 3, 5, chunks, chunks + 3};
  std::sort(s.begin(), s.end());
  s.erase(std::unique(s.begin(), s.end()), s.end());
  return s;
}

TEST(CudaAttention, MatchesCpuBitForBitAtEverySplit) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  uint64_t seed = 0xA7C0;
  for (const AttentionCase& c : cases()) {
    ++seed;
    SCOPED_TRACE(test::describe(c));
    test::Gen gen(seed);
    const AttentionData d = test::make_attention_data(gen, c);
    std::vector<bf16> want(d.out_size());
    cpu::attention(d.params(), d.q.data(), d.cache.data(), want.data(), 2);
    DeviceCase dc(d, stream.get());
    std::printf("[attention] %s: launcher picks %d splits\n", test::describe(c).c_str(),
                cuda::attention_splits(dc.p));
    for (int splits : forced_splits(dc.p))
      EXPECT_TRUE(test::same_bits(dc.run(splits, stream.get()), want, {c.heads * c.head_dim}))
          << "splits " << splits;
  }
}

// Requests whose tokens are not consecutive (the even tokens first, then the odd ones,
// padding included): more pieces than the launcher's grid has CTAs, so a CTA strides
// over several; every forced split against the CPU.
TEST(CudaAttention, InterleavedRequestsMatchCpu) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  test::Gen gen(0xA7C9);
  for (const AttentionCase& c : {AttentionCase{8, 2, 64, 0, false, {150, 70, 200}, 7, 16, 2, false},
                                 AttentionCase{16, 2, 32, 40, true, {90, 300}, 5, 8, 1, true}}) {
    SCOPED_TRACE(test::describe(c));
    AttentionData d = test::make_attention_data(gen, c);
    std::vector<int> perm;
    for (int t = 0; t < d.tokens; t += 2) perm.push_back(t);
    for (int t = 1; t < d.tokens; t += 2) perm.push_back(t);
    const AttentionData src = d;
    for (int i = 0; i < d.tokens; ++i) {
      const int t = perm[static_cast<size_t>(i)];
      d.token_request[static_cast<size_t>(i)] = src.token_request[static_cast<size_t>(t)];
      d.positions[static_cast<size_t>(i)] = src.positions[static_cast<size_t>(t)];
      std::copy_n(src.q.begin() + static_cast<int64_t>(t) * d.q_stride, d.q_stride,
                  d.q.begin() + static_cast<int64_t>(i) * d.q_stride);
    }
    std::vector<bf16> want(d.out_size());
    cpu::attention(d.params(), d.q.data(), d.cache.data(), want.data(), 2);
    DeviceCase dc(d, stream.get());
    for (int splits : forced_splits(dc.p))
      EXPECT_TRUE(test::same_bits(dc.run(splits, stream.get()), want, {c.heads * c.head_dim}))
          << "splits " << splits;
  }
}

// A larger max_kv_len bound than the batch needs changes the grid, not the bits.
TEST(CudaAttention, IndependentOfTheKvBound) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  test::Gen gen(0xA7D0);
  const AttentionCase c{8, 2, 64, 0, true, {150, 70}, 7, 16, 1, false};
  const AttentionData d = test::make_attention_data(gen, c);
  DeviceCase dc(d, stream.get());
  const std::vector<bf16> base = dc.run(0, stream.get());
  dc.p.max_kv_len = static_cast<int64_t>(d.max_pages) * c.page_size;
  for (int splits : {0, 1, 4})
    EXPECT_TRUE(test::same_bits(dc.run(splits, stream.get()), base)) << "splits " << splits;
}

TEST(CudaAttention, GraphCaptureEqualsEager) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  test::Gen gen(0xA7E0);
  const AttentionCase c{16, 2, 64, 70, true, {300, 71}, 7, 16, 1, true};
  const AttentionData d = test::make_attention_data(gen, c);
  DeviceCase dc(d, stream.get());
  for (int splits : {0, 1, 3}) {
    SCOPED_TRACE("splits " + std::to_string(splits));
    const std::vector<bf16> eager = dc.run(splits, stream.get());  // also the warm-up
    DeviceBuffer<unsigned char> ws(
        std::max<size_t>(1, cuda::attention_workspace_bytes(dc.p, splits)));
    SD_CUDA_CHECK(cudaMemsetAsync(dc.out.data(), 0x7e, dc.out.size() * sizeof(bf16), stream.get()));
    cuda::GraphExec graph(stream.get(), [&](cudaStream_t s) {
      cuda::attention(dc.p, dc.q.data(), dc.cache.data(), dc.out.data(), ws.data(), ws.bytes(), s,
                      splits);
    });
    for (int replay = 0; replay < 2; ++replay) {
      SD_CUDA_CHECK(cudaGraphLaunch(graph.get(), stream.get()));
      EXPECT_TRUE(test::same_bits(dc.out.download(stream.get()), eager)) << "replay " << replay;
    }
  }
}

// The published shapes at ctx 4096 (one request, its 7 block queries at 4096..4102):
// qwen3-8b (32/8 heads of 128, full non-causal) and muse (128/16 heads of 64, causal
// window 2048).
TEST(CudaAttention, PublishedShapesAtContext4096MatchCpu) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  uint64_t seed = 0xA7F0;
  for (const AttentionCase& c : {AttentionCase{32, 8, 128, 0, false, {4103}, 7, 16, 0, false},
                                 AttentionCase{128, 16, 64, 2048, true, {4103}, 7, 16, 0, false}}) {
    SCOPED_TRACE(test::describe(c));
    test::Gen gen(++seed);
    const AttentionData d = test::make_attention_data(gen, c);
    std::vector<bf16> want(d.out_size());
    cpu::attention(d.params(), d.q.data(), d.cache.data(), want.data(), 2);
    DeviceCase dc(d, stream.get());
    for (int splits : {0, 1})
      EXPECT_TRUE(test::same_bits(dc.run(splits, stream.get()), want, {c.heads * c.head_dim}))
          << "splits " << splits;
  }
}

// Host only: the launcher's work split for the shapes of contract.md section 7 at ctx 4096
// (max_kv_len 4103): one request spreads over >= 132 CTAs, every batch over at least
// three quarters of a wave, and 32 requests need no workspace.
TEST(CudaAttention, LauncherSplitForThePublishedShapes) {
  struct Shape {
    const char* name;
    int heads, kv_heads, head_dim, window;
  };
  for (const Shape& sh : {Shape{"qwen3-8b", 32, 8, 128, 0}, Shape{"muse", 128, 16, 64, 2048}})
    for (int rows : {1, 8, 32}) {
      ops::AttentionParams p;
      p.tokens = rows * 7;
      p.requests = rows;
      p.heads = sh.heads;
      p.kv_heads = sh.kv_heads;
      p.head_dim = sh.head_dim;
      p.page_size = 16;
      p.max_pages = 4103 / 16 + 1;
      p.window = sh.window;
      p.causal = sh.window > 0;
      p.q_stride = static_cast<int64_t>(sh.heads + 2 * sh.kv_heads) * sh.head_dim;
      p.max_kv_len = 4103;
      // Never read on the host (the split depends on host-known sizes only).
      const int32_t i32 = 0;
      const int64_t i64 = 0;
      p.block_tables = p.token_request = &i32;
      p.positions = p.kv_lens = &i64;
      const int splits = cuda::attention_splits(p);
      // Each request's 7 tokens in pieces of at most tpc.
      const int tpc = cuda::attention_tokens_per_piece(p);
      const int64_t pieces = static_cast<int64_t>(rows) * ((7 + tpc - 1) / tpc);
      const int64_t ctas = pieces * sh.kv_heads * splits;
      const size_t ws = cuda::attention_workspace_bytes(p);
      std::printf(
          "[attention split] %s rows %d: pieces of %d tokens, %d split(s), %lld CTAs, workspace "
          "%zu bytes\n",
          sh.name, rows, tpc, splits, static_cast<long long>(ctas), ws);
      // At least three quarters of a wave; one request spreads over a whole wave.
      EXPECT_GE(4 * ctas, 3 * 132) << sh.name << " rows " << rows;
      if (rows == 1) EXPECT_GE(ctas, 132) << sh.name;
      if (rows == 32) EXPECT_EQ(ws, 0u) << sh.name;
    }
}

// ---- speed (prints only) -------------------------------------------------------------
// Each published shape at ctx 4096 (7 block queries at 4096..4102 per request) with 1,
// 8 and 32 requests: median of 10 calls, the L2 flushed (twice its size zeroed) before
// each, us and GB/s of the K/V bytes the queries read (the union of their ranges).
// Checked first: the GPU against the CPU on a small case of the shape, and on the
// big one the launcher's split against no split and a forced split, bit for bit.
TEST(AttentionSpeed, PublishedShapesAtContext4096) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  cudaStream_t s = stream.get();
  cuda::GraphTimer timer(s, cuda::query_gpu());
  struct Shape {
    const char* name;
    int heads, kv_heads, head_dim, window;
  };
  uint64_t seed = 0xA800;
  for (const Shape& sh : {Shape{"qwen3-8b", 32, 8, 128, 0}, Shape{"muse", 128, 16, 64, 2048}}) {
    const bool causal = sh.window > 0;
    {  // small case against the CPU
      test::Gen gen(++seed);
      std::printf("[attention speed] %s small-case seed %llu\n", sh.name,
                  static_cast<unsigned long long>(seed));
      const AttentionCase c{sh.heads, sh.kv_heads,    sh.head_dim, sh.window / 16,
                            causal,   {300, 129, 77}, 7,           16,
                            1,        false};
      const AttentionData d = test::make_attention_data(gen, c);
      std::vector<bf16> want(d.out_size());
      cpu::attention(d.params(), d.q.data(), d.cache.data(), want.data(), 2);
      DeviceCase dc(d, s);
      for (int splits : {0, 1, 3})
        ASSERT_TRUE(test::same_bits(dc.run(splits, s), want, {c.heads * c.head_dim}))
            << sh.name << " small case, splits " << splits;
    }
    test::Gen gen(++seed);
    std::printf("[attention speed] %s big-case seed %llu\n", sh.name,
                static_cast<unsigned long long>(seed));
    const AttentionCase c{
        sh.heads, sh.kv_heads, sh.head_dim, sh.window, causal, std::vector<int64_t>(32, 4103),
        7,        16,          0,           false};
    const AttentionData d = test::make_attention_data(gen, c);
    DeviceCase dc(d, s);
    const ops::AttentionRange first = ops::attention_range(4096, 4103, sh.window, causal);
    const int64_t positions = 4103 - first.lo;
    for (int rows : {1, 8, 32}) {
      dc.p.requests = rows;
      dc.p.tokens = rows * 7;
      const double bytes = static_cast<double>(rows) * sh.kv_heads * positions * 2 * sh.head_dim *
                           static_cast<double>(sizeof(bf16));
      const int pick = cuda::attention_splits(dc.p);
      const std::vector<bf16> base = dc.run(1, s);
      ASSERT_TRUE(test::same_bits(dc.run(0, s), base)) << sh.name << " rows " << rows;
      ASSERT_TRUE(test::same_bits(dc.run(7, s), base)) << sh.name << " rows " << rows;
      std::vector<int> tries = {0, 1, 2, 4, 8, 16, 32};
      for (int splits : tries) {
        const int used = splits == 0 ? pick : splits;
        if (splits != 0 && splits == pick) continue;
        DeviceBuffer<unsigned char> ws(
            std::max<size_t>(1, cuda::attention_workspace_bytes(dc.p, used)));
        const double us = timer.median_us(
            [&] {
              cuda::attention(dc.p, dc.q.data(), dc.cache.data(), dc.out.data(), ws.data(),
                              ws.bytes(), s, used);
            },
            1, 10);
        std::printf(
            "[attention speed] %-8s rows %2d splits %2d%s: %9.1f us  %7.1f GB/s  (K/V %.1f MB)\n",
            sh.name, rows, used, splits == 0 ? " (pick)" : "       ", us, bytes / (us * 1e-6) / 1e9,
            bytes / 1e6);
      }
    }
  }
}

// ---- profiling aid (skips unless asked) ------------------------------------------------
// SPARKDRAFT_ATTENTION_PROFILE=<qwen3-8b|muse>:<rows>:<splits> runs that published shape
// at ctx 4096 once against the CPU's bits, then three more launches, for a profiler:
// `ncu -k regex:attention_chunk --launch-skip 2 --launch-count 1 ...`.
TEST(AttentionSpeed, ProfileOne) {
  const char* env = std::getenv("SPARKDRAFT_ATTENTION_PROFILE");
  if (env == nullptr) GTEST_SKIP() << "SPARKDRAFT_ATTENTION_PROFILE is not set";
  SD_REQUIRE_GPU();
  char name[32] = {0};
  int rows = 0, splits = 0;
  ASSERT_EQ(std::sscanf(env, "%31[^:]:%d:%d", name, &rows, &splits), 3)
      << "SPARKDRAFT_ATTENTION_PROFILE=" << env << ": want <qwen3-8b|muse>:<rows>:<splits>";
  const bool muse = std::string(name) == "muse";
  ASSERT_TRUE(muse || std::string(name) == "qwen3-8b") << "unknown shape " << name;
  ASSERT_TRUE(rows >= 1 && rows <= 32 && splits >= 0) << env;
  const int heads = muse ? 128 : 32, kv_heads = muse ? 16 : 8, head_dim = muse ? 64 : 128;
  const int window = muse ? 2048 : 0;
  DeviceStream stream;
  cudaStream_t s = stream.get();
  test::Gen gen(0xA900);
  std::printf("[attention profile] %s rows %d splits %d seed %llu\n", name, rows, splits,
              static_cast<unsigned long long>(0xA900));
  const AttentionCase c{heads, kv_heads, head_dim, window, muse, std::vector<int64_t>(rows, 4103),
                        7,     16,       0,        false};
  const AttentionData d = test::make_attention_data(gen, c);
  std::vector<bf16> want(d.out_size());
  cpu::attention(d.params(), d.q.data(), d.cache.data(), want.data(), 2);
  DeviceCase dc(d, s);
  ASSERT_TRUE(test::same_bits(dc.run(splits, s), want, {heads * head_dim}));
  for (int i = 0; i < 3; ++i) dc.run(splits, s);
}

}  // namespace
}  // namespace sparkdraft
