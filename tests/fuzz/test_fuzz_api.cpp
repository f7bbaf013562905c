// A seeded fuzzer of the API boundary itself (contract.md section 4): DraftOptions
// (validate_options), store_context and propose batches on a real CPU backend, built
// from edge values (INT64_MAX and its neighbours, INT64_MIN, -1, each bound and its
// neighbours, NaN and infinite temperatures, null arrays). Every call must either be
// refused with InvalidArgument or run; an accepted call runs the draft, so an input
// that slips past the checks (an overflowing a + N, a slot past the cache) shows as
// an ASan or UBSan report (the CI runs this under both) or a wrong output. Options
// that validate_options accepts are checked against the bounds computed here in
// 128-bit arithmetic, and the small ones build a backend that drafts at the edge
// of its position range.
//
// Settings: fuzz/fuzz_env.h (SPARKDRAFT_FUZZ_SECONDS, _SEED, _ITER).
#include <gtest/gtest.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "common/files.h"
#include "fuzz/fuzz_env.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

constexpr int64_t kI64Max = std::numeric_limits<int64_t>::max();
constexpr int64_t kI64Min = std::numeric_limits<int64_t>::min();

// One of the values where bounds checks go wrong, around `lo` and `hi` (the
// accepted range [lo, hi)).
int64_t edge(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  const int64_t k = static_cast<int64_t>(rng() % 8);
  switch (rng() % 12) {
    case 0: return kI64Max - k;
    case 1: return kI64Min + k;
    case 2: return lo - 1 - k;
    case 3: return lo + k;
    case 4: return hi - 1 - k;
    case 5: return hi + k;
    case 6: return static_cast<int64_t>(rng());
    case 7: return INT32_MAX - k;
    case 8: return static_cast<int64_t>(INT32_MIN) + k;
    default:  // mostly in range, so that whole batches get through
      return hi > lo ? lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo)) : lo;
  }
}

int edge_int(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  const int64_t v = edge(rng, lo, hi);
  return static_cast<int>(std::clamp<int64_t>(v, INT_MIN, INT_MAX));
}

float edge_temperature(std::mt19937_64& rng) {
  const float v[] = {0.0f,
                     -0.0f,
                     0.5f,
                     1.0f,
                     -1.0f,
                     std::numeric_limits<float>::quiet_NaN(),
                     std::numeric_limits<float>::infinity(),
                     -std::numeric_limits<float>::infinity(),
                     std::numeric_limits<float>::denorm_min(),
                     std::numeric_limits<float>::max()};
  return v[rng() % std::size(v)];
}

struct Model {
  std::shared_ptr<const Checkpoint> ckpt;
  DraftOptions o;
  std::unique_ptr<DraftBackend> backend;
};

Model make_model(const test::TempDir& dir, const std::string& name, int max_position_embeddings,
                 int max_pages_per_req) {
  ModelConfig c = preset_config("tiny");
  c.max_position_embeddings = max_position_embeddings;
  SyntheticOptions so;
  so.seed = 5;
  write_synthetic_checkpoint(c, dir / name, so);
  Model m;
  m.ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(dir / name));
  m.o.max_reqs = 3, m.o.num_pages = 6, m.o.page_size = 4, m.o.cache_slots = 3, m.o.threads = 1;
  m.o.max_pages_per_req = max_pages_per_req;
  m.backend = make_cpu_backend(m.ckpt, m.o);
  return m;
}

// One store_context call; returns "" or what went wrong.
std::string fuzz_context(Model& m, std::mt19937_64& rng) {
  const ModelConfig& c = m.ckpt->config();
  const int64_t limit = position_limit(c, m.o);
  const int64_t slots = static_cast<int64_t>(m.o.num_pages) * m.o.page_size;
  const int T = rng() % 8 == 0 ? edge_int(rng, 0, 6) : static_cast<int>(rng() % 6);
  const size_t n = static_cast<size_t>(std::clamp(T, 0, 64));
  std::vector<bf16> hidden(n * c.taps() * c.target_hidden_size, to_bf16(0.25f));
  std::vector<int64_t> positions(n), kv_slots(n);
  for (size_t t = 0; t < n; ++t) {
    positions[t] = edge(rng, 0, limit);
    kv_slots[t] = rng() % 3 == 0 ? -1 : edge(rng, -1, slots);
  }
  ContextBatch b{T, hidden.data(), positions.data(), kv_slots.data()};
  if (rng() % 16 == 0) b.positions = nullptr;
  if (T > 64) return "";  // the caller's arrays hold num_tokens entries: no larger batch here
  try {
    m.backend->store_context(b);
  } catch (const InvalidArgument&) {
  }
  return "";
}

// One propose call; returns "" or what went wrong.
std::string fuzz_propose(Model& m, std::mt19937_64& rng) {
  const ModelConfig& c = m.ckpt->config();
  const DraftOptions& o = m.o;
  const int64_t limit = position_limit(c, o);
  const int N = c.block_size, V = c.vocab_size;
  const int R =
      rng() % 8 == 0 ? edge_int(rng, 1, o.max_reqs + 1) : 1 + static_cast<int>(rng() % o.max_reqs);
  const size_t n = static_cast<size_t>(std::clamp(R, 0, o.max_reqs));  // beyond: refused first
  std::vector<int64_t> anchors(n), apos(n), seeds(n), cslots(n);
  std::vector<float> temps(n);
  std::vector<int32_t> tables(n * o.max_pages_per_req);
  for (size_t r = 0; r < n; ++r) {
    anchors[r] = edge(rng, 0, V);
    apos[r] = edge(rng, 0, limit - N + 1);
    seeds[r] = static_cast<int64_t>(rng());
    temps[r] = rng() % 2 ? 0.7f : edge_temperature(rng);
    cslots[r] = rng() % 2 ? static_cast<int64_t>(r) : edge(rng, -1, o.cache_slots);
  }
  for (int32_t& p : tables) p = edge_int(rng, 0, o.num_pages);
  std::vector<int64_t> tokens(n * N, -7);
  std::vector<bf16> cache(static_cast<size_t>(o.cache_slots) * N * V);
  ProposeBatch b{
      R, anchors.data(), apos.data(), seeds.data(), temps.data(), cslots.data(), tables.data()};
  if (rng() % 32 == 0) b.block_tables = nullptr;
  try {
    m.backend->propose(b, ProposeOutputs{tokens.data(), cache.data()});
  } catch (const InvalidArgument&) {
    return "";
  }
  // Accepted: every real row drafted N ids of the vocabulary.
  for (size_t r = 0; r < n; ++r) {
    if (cslots[r] < 0) continue;
    for (int j = 0; j < N; ++j) {
      const int64_t t = tokens[r * N + j];
      if (t < 0 || t >= V)
        return "accepted row " + std::to_string(r) + " (anchor position " +
               std::to_string(apos[r]) + ") drafted token " + std::to_string(t);
    }
  }
  return "";
}

// validate_options on fuzzed options; an accepted set is checked against the bounds
// computed in 128-bit arithmetic, and a small one builds a backend that drafts at the
// last block its positions allow.
std::string fuzz_options(Model& m, std::mt19937_64& rng) {
  const ModelConfig& c = m.ckpt->config();
  DraftOptions o;
  auto field = [&](int lo, int hi) {
    return rng() % 3 == 0 ? edge_int(rng, lo, hi) : lo + static_cast<int>(rng() % (hi - lo));
  };
  o.max_reqs = field(1, 5);
  o.num_pages = field(1, 9);
  o.page_size = field(1, 9);
  o.max_pages_per_req = field(1, 9);
  o.cache_slots = field(1, 5);
  o.tp = rng() % 4 == 0 ? edge_int(rng, 1, 3) : 1 << (rng() % 3);
  o.threads = rng() % 4 == 0 ? edge_int(rng, 0, kMaxThreads + 1) : 1;
  try {
    validate_options(c, o);
  } catch (const InvalidArgument&) {
    return "";
  }
  using i128 = __int128;
  const i128 kv =
      i128{o.num_pages} * o.page_size * c.num_kv_heads * 2 * c.head_dim * 2 * c.num_layers;
  const i128 rope = i128{position_limit(c, o)} * c.head_dim * 4;
  const i128 logits = i128{o.max_reqs} * c.block_size * c.vocab_size * 4;
  if (o.max_reqs < 1 || o.num_pages < 1 || o.page_size < 1 || o.max_pages_per_req < 1 ||
      o.cache_slots < 1 || o.tp < 1 || c.vocab_size % o.tp != 0 || o.threads < 0 ||
      o.threads > kMaxThreads || kv > (i128{1} << 40) || rope > kMaxRopeTableBytes ||
      logits > (i128{1} << 40))
    return "validate_options accepted max_reqs " + std::to_string(o.max_reqs) + ", num_pages " +
           std::to_string(o.num_pages) + ", page_size " + std::to_string(o.page_size) +
           ", max_pages_per_req " + std::to_string(o.max_pages_per_req) + ", cache_slots " +
           std::to_string(o.cache_slots) + ", tp " + std::to_string(o.tp) + ", threads " +
           std::to_string(o.threads);
  const int64_t limit = position_limit(c, o);
  if (kv > (i128{1} << 22) || o.max_pages_per_req > 4096 || o.threads < 1 || o.threads > 2 ||
      o.tp > 2 || limit < c.block_size)
    return "";
  // Small enough to build: one propose whose block ends at the last position.
  auto backend = make_cpu_backend(m.ckpt, o);
  const int N = c.block_size;
  int64_t anchor = 3, apos = limit - N, seed = 9, slot = 0;
  float temp = 0.5f;
  std::vector<int32_t> table(static_cast<size_t>(o.max_pages_per_req));
  for (size_t p = 0; p < table.size(); ++p) table[p] = static_cast<int32_t>(p % o.num_pages);
  std::vector<int64_t> tokens(N);
  std::vector<bf16> cache(static_cast<size_t>(o.cache_slots) * N * c.vocab_size);
  backend->propose(ProposeBatch{1, &anchor, &apos, &seed, &temp, &slot, table.data()},
                   ProposeOutputs{tokens.data(), cache.data()});
  apos += 1;  // one past: the block would end past the limit
  try {
    backend->propose(ProposeBatch{1, &anchor, &apos, &seed, &temp, &slot, table.data()},
                     ProposeOutputs{tokens.data(), cache.data()});
    return "propose accepted anchor position " + std::to_string(apos) + " with a limit of " +
           std::to_string(limit);
  } catch (const InvalidArgument&) {
  }
  return "";
}

TEST(Fuzz, ApiBoundary) {
  test::TempDir dir;
  // The position limit from the block table (8 pages of 4 < 8192), and from the
  // config (max_position_embeddings 21 < 8 x 4).
  std::vector<Model> models;
  models.push_back(make_model(dir, "table", 8192, 8));
  models.push_back(make_model(dir, "config", 21, 8));
  const test::FuzzSettings fs;
  int64_t failures = 0;
  const int64_t iters = test::fuzz_loop(fs, [&](int64_t i) {
    std::mt19937_64 rng = test::fuzz_rng(fs, i, "api");
    Model& m = models[rng() % models.size()];
    std::string failure;
    const int kind = static_cast<int>(rng() % 3);
    try {
      failure = kind == 0   ? fuzz_options(m, rng)
                : kind == 1 ? fuzz_context(m, rng)
                            : fuzz_propose(m, rng);
    } catch (const std::exception& e) {
      failure = std::string("threw something other than InvalidArgument: ") + e.what();
    }
    if (failure.empty()) return true;
    ADD_FAILURE() << "api ("
                  << (kind == 0   ? "options"
                      : kind == 1 ? "store_context"
                                  : "propose")
                  << "): " << failure << "\n  reproduce: SPARKDRAFT_FUZZ_SEED=" << fs.seed
                  << " SPARKDRAFT_FUZZ_ITER=" << i;
    ++failures;
    return false;
  });
  std::printf("fuzz api: %lld calls in %.1f s (seed %llu)\n", static_cast<long long>(iters),
              fs.seconds, static_cast<unsigned long long>(fs.seed));
  EXPECT_GT(iters, 0);
  EXPECT_EQ(failures, 0);
}

}  // namespace
}  // namespace sparkdraft
