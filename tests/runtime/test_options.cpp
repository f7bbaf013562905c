// DraftOptions are validated when a backend is made (each bad field refused
// with InvalidArgument naming it, never std::length_error or a silent
// acceptance); store_context refuses two tokens writing one KV slot; the
// worker pool is started once and does not grow with the thread count asked for.
#include <gtest/gtest.h>

#include <chrono>
#include <climits>
#include <memory>
#include <vector>

#include "common/errors.h"
#include "common/files.h"
#include "common/parallel.h"
#include "io/poke.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

using test::error_of;
using test::expect_mentions;

std::shared_ptr<const Checkpoint> tiny_checkpoint(const test::TempDir& dir) {
  SyntheticOptions so;
  so.seed = 11;
  write_synthetic_checkpoint(preset_config("tiny"), dir.path(), so);
  return std::make_shared<const Checkpoint>(Checkpoint::load(dir.path()));
}

TEST(DraftOptions, EveryBadFieldIsRefusedByName) {
  test::TempDir dir;
  auto ckpt = tiny_checkpoint(dir);
  struct Case {
    const char* needle;
    void (*edit)(DraftOptions&);
  };
  const Case cases[] = {
      {"max_reqs 0", [](DraftOptions& o) { o.max_reqs = 0; }},
      {"max_reqs 65537", [](DraftOptions& o) { o.max_reqs = kMaxReqs + 1; }},
      {"num_pages 0", [](DraftOptions& o) { o.num_pages = 0; }},
      {"num_pages -3", [](DraftOptions& o) { o.num_pages = -3; }},
      {"page_size 0", [](DraftOptions& o) { o.page_size = 0; }},
      {"max_pages_per_req 0", [](DraftOptions& o) { o.max_pages_per_req = 0; }},
      {"cache_slots 0", [](DraftOptions& o) { o.cache_slots = 0; }},
      {"threads 100000", [](DraftOptions& o) { o.threads = 100000; }},
      {"threads -1", [](DraftOptions& o) { o.threads = -1; }},
      {"tp 3", [](DraftOptions& o) { o.tp = 3; }},
      {"tp 0", [](DraftOptions& o) { o.tp = 0; }},
      {"overflows", [](DraftOptions& o) { o.num_pages = INT_MAX, o.page_size = INT_MAX; }},
      // Fits the arithmetic, not the memory: a clear refusal, not std::length_error.
      {"num_pages 2000000000",
       [](DraftOptions& o) { o.num_pages = 2000000000, o.page_size = 1 << 20; }},
  };
  for (const Case& c : cases) {
    DraftOptions o;
    o.threads = 1;
    c.edit(o);
    expect_mentions(error_of<InvalidArgument>([&] { make_cpu_backend(ckpt, o); }), {c.needle});
  }
  DraftOptions ok;
  ok.threads = kMaxThreads;  // the cap itself is accepted
  EXPECT_NO_THROW(make_cpu_backend(ckpt, ok));
}

TEST(DraftOptions, TwoContextTokensWithOneSlotAreRefused) {
  test::TempDir dir;
  auto ckpt = tiny_checkpoint(dir);
  DraftOptions o;
  o.threads = 1;
  auto backend = make_cpu_backend(ckpt, o);
  const ModelConfig& c = ckpt->config();
  std::vector<bf16> hidden(static_cast<size_t>(3) * c.taps() * c.target_hidden_size,
                           to_bf16(0.25f));
  std::vector<int64_t> positions = {0, 1, 2}, slots = {4, 9, 4};
  expect_mentions(error_of<InvalidArgument>([&] {
                    backend->store_context({3, hidden.data(), positions.data(), slots.data()});
                  }),
                  {"tokens 0 and 2", "KV slot 4"});
  slots = {4, -1, -1};  // skipped tokens (-1) may repeat
  EXPECT_NO_THROW(backend->store_context({3, hidden.data(), positions.data(), slots.data()}));
}

TEST(ThreadPool, IsSizedOnceAndLargeThreadCountsMakeNoThreads) {
  auto& pool = ThreadPool::instance();
  const int workers = pool.workers();
  EXPECT_GE(workers, 1);
  EXPECT_LE(workers, static_cast<int>(std::max(2u, std::thread::hardware_concurrency())) - 1);
  // 1000 calls asking for kMaxThreads ranges: fast (no thread creation) and correct.
  const auto t0 = std::chrono::steady_clock::now();
  for (int rep = 0; rep < 1000; ++rep) {
    std::atomic<int64_t> sum{0};
    parallel_for(4096, kMaxThreads, [&](int64_t b, int64_t e) {
      int64_t s = 0;
      for (int64_t i = b; i < e; ++i) s += i;
      sum += s;
    });
    ASSERT_EQ(sum.load(), int64_t{4096} * 4095 / 2) << "rep " << rep;
  }
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_LT(s, 20.0) << "1000 parallel_for calls of " << kMaxThreads << " ranges took " << s
                     << " s";
  EXPECT_EQ(&ThreadPool::instance(), &pool);
  EXPECT_EQ(pool.workers(), workers);
}

TEST(ThreadPool, NestedAndConcurrentCallsFinish) {
  // Callers on several threads, each nesting a parallel_for inside its ranges
  // (as the Markov loop's thread ranks do): no deadlock, every index once.
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int t = 0; t < 4; ++t)
    callers.emplace_back([&] {
      parallel_for(8, 8, [&](int64_t b, int64_t e) {
        for (int64_t i = b; i < e; ++i)
          parallel_for(100, 4, [&](int64_t b2, int64_t e2) { total += e2 - b2; });
      });
    });
  for (auto& c : callers) c.join();
  EXPECT_EQ(total.load(), 4 * 8 * 100);
}

}  // namespace
}  // namespace sparkdraft
