// The verifier's exactness (contract.md section 8): its element arithmetic
// against independent computations, the same bits for every vocabulary split and
// batch composition, greedy at T = 0, NaN / infinite / tied rows, padding rows,
// top-k and top-p, bf16 and fp32 target logits, and the refusals of bad input.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>

#include "common/errors.h"
#include "common/random.h"
#include "common/verify_case.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

using u128 = unsigned __int128;
u128 wide(U128 a) { return (static_cast<u128>(a.hi) << 64) | a.lo; }
U128 narrow(u128 a) { return U128{static_cast<uint64_t>(a), static_cast<uint64_t>(a >> 64)}; }

// floor(e * 2^64) by long double (64-bit significand: e * 2^64 is exact there).
u128 floor_fixed64(float e) {
  const long double x = std::ldexp(static_cast<long double>(e), 64);
  const long double hi = std::floor(std::ldexp(x, -64));
  const long double lo = std::floor(x - std::ldexp(hi, 64));
  return (static_cast<u128>(hi) << 64) + static_cast<u128>(lo);
}

TEST(VerifyMath, FixedOfUnitIsTheTruncatedScaling) {
  test::Gen g(7);
  std::vector<float> xs = {0.0f,           1.0f,      0.5f,      0x1p-64f,   0x1p-65f,
                           0x1.fffffep-1f, 0x1p-126f, 0x1p-149f, 0x1.8p-64f, 0x1.000002p-40f,
                           0x1.fffffep-63f};
  for (int i = 0; i < 100000; ++i)
    xs.push_back(std::ldexp(g.uniform(0.5f, 1.0f), -static_cast<int>(g.integer(0, 80))));
  for (float e : xs)
    ASSERT_TRUE(wide(fixed64_of_unit(e)) == floor_fixed64(e)) << "e = " << std::hexfloat << e;
}

TEST(VerifyMath, FixedToFloatRoundsToNearestEven) {
  test::Gen g(8);
  auto check = [](u128 x) {
    const float want = std::ldexp(static_cast<float>(x), -64);  // libgcc: nearest even
    const float got = f32_of_fixed64(narrow(x));
    ASSERT_EQ(f32_bits(got), f32_bits(want))
        << "x = 0x" << std::hex << static_cast<uint64_t>(x >> 64) << "_"
        << static_cast<uint64_t>(x);
  };
  for (int len = 1; len <= 127; ++len) {
    for (int i = 0; i < 400; ++i) {
      u128 x = (static_cast<u128>(g.bits()) << 64) | g.bits();
      x = (x & ((static_cast<u128>(1) << len) - 1)) | (static_cast<u128>(1) << (len - 1));
      check(x);
    }
    if (len > 25) {  // exact halves: odd and even kept significands
      const u128 m = (static_cast<u128>(1) << 23) | 5;
      check((m << (len - 24)) | (static_cast<u128>(1) << (len - 25)));
      check(((m + 1) << (len - 24)) | (static_cast<u128>(1) << (len - 25)));
      check((((static_cast<u128>(1) << 24) - 1) << (len - 24)) |
            (static_cast<u128>(1) << (len - 25)));
    }
  }
  check(0);
}

TEST(VerifyMath, TopPKeepsIsTheExactComparison) {
  test::Gen g(9);
  const U128 total = narrow(static_cast<u128>(3) << 64);  // 3.0
  EXPECT_TRUE(top_p_keeps(U128{}, 0x1p-149f, total));     // the first id always stays
  // before == top_p * total exactly: not kept; one unit less: kept.
  EXPECT_FALSE(top_p_keeps(narrow(static_cast<u128>(3) << 63), 0.5f, total));
  EXPECT_TRUE(top_p_keeps(narrow((static_cast<u128>(3) << 63) - 1), 0.5f, total));
  for (int i = 0; i < 100000; ++i) {
    const float p = g.uniform(0.0f, 1.0f);
    if (!(p > 0.0f)) continue;
    const u128 t = (static_cast<u128>(g.integer(1, 1 << 20)) << 64) | g.bits();
    const u128 b = t / 1000 * static_cast<u128>(g.integer(0, 1000));
    // Exact: b < p * t  <=>  b * 2^s < m * t with p = m * 2^-s.
    int ex;
    const float mant = std::frexp(p, &ex);  // p = mant * 2^ex, mant in [0.5, 1)
    const u128 m = static_cast<u128>(std::ldexp(mant, 24));
    const int s = 24 - ex;
    const int len = (b >> 64) ? 128 - __builtin_clzll(static_cast<uint64_t>(b >> 64))
                              : (b ? 64 - __builtin_clzll(static_cast<uint64_t>(b)) : 0);
    const bool big = len + s > 127;
    const bool want = b == 0 || (!big && (b << s) < m * t);
    ASSERT_EQ(top_p_keeps(narrow(b), p, narrow(t)), want) << "p " << p;
  }
}

TEST(VerifyMath, AcceptIsTheExactProductComparison) {
  // u * q == p exactly: rejected (strict); a float product would round.
  EXPECT_FALSE(accept_standard(0.5f, 0.5f, 0.25f));
  EXPECT_TRUE(accept_standard(0.5f, 0.5f, std::nextafter(0.25f, 1.0f)));
  // p = the fp32 product: the exact product is above it (reject) or below it (a
  // product rounded up: accept, where a comparison in fp32 would reject).
  test::Gen g(10);
  int up = 0, down = 0;
  for (int i = 0; i < 10000; ++i) {
    const float u = g.uniform(0.0f, 1.0f), q = g.uniform(0.0f, 1.0f), p = u * q;
    const long double exact = static_cast<long double>(u) * q;
    if (exact == p) continue;
    const bool below = exact < p;
    (below ? up : down)++;
    ASSERT_EQ(accept_standard(u, q, p), below) << std::hexfloat << "u " << u << " q " << q;
  }
  EXPECT_GT(up, 1000);
  EXPECT_GT(down, 1000);
  EXPECT_TRUE(accept_standard(kUniformScale, 0.0f, 0x1p-149f));  // q = 0: accept iff p > 0
  EXPECT_FALSE(accept_standard(kUniformScale, 0.0f, 0.0f));
}

// ---- whole calls --------------------------------------------------------------

// A batch exercising every rule: temperatures 0 / 0.05 / 0.7 / 1 / 2, top-k and
// top-p rows, a NaN target row, a NaN cache row (with its draft token the lowest
// NaN id, as the sampler draws), +inf after scaling, ties, padding rows.
test::VerifyCase rich_case(uint64_t seed, int R, int N, int V, LogitsDType dtype,
                           VerifyMethod method) {
  test::Gen g(seed);
  test::VerifyCase vc(R, N, V);
  vc.dtype = dtype;
  vc.method = method;
  const float temps[] = {0.0f, 0.05f, 0.7f, 1.0f, 2.0f};
  for (int r = 0; r < R; ++r) {
    vc.temps[r] = temps[r % 5];
    vc.seeds[r] = static_cast<int64_t>(g.bits() >> 1) - (int64_t{1} << 61);
    vc.anchors[r] = g.integer(0, 5000);
    if (r % 4 == 1) vc.top_k[r] = static_cast<int32_t>(g.integer(1, V + 2));
    if (r % 4 == 2) vc.top_p[r] = g.uniform(0.05f, 1.0f);
    if (r % 7 == 3) vc.top_p[r] = 1.0f, vc.top_k[r] = 3;
    vc.cache_slots[r] = (r % 6 == 5) ? -1 : r;
    for (int j = 0; j <= N; ++j)
      for (int v = 0; v < V; ++v) vc.set_target(r, j, v, g.uniform(-4.0f, 4.0f));
    for (int j = 0; j < N; ++j) {
      for (int v = 0; v < V; ++v) vc.c(r, j, v) = to_bf16(g.uniform(-4.0f, 4.0f));
      // Half the drafts copy the target's greedy pick (so T = 0 rows accept some).
      int best = 0;
      for (int v = 1; v < V; ++v)
        if (better(vc.target(r, j, v), v, vc.target(r, j, best), best)) best = v;
      vc.tokens[static_cast<size_t>(r) * N + j] = g.integer(0, 1) ? best : g.integer(0, V - 1);
    }
  }
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (R > 7) {
    vc.set_target(7, 0, V - 2, nan);  // NaN target row
    vc.set_target(7, 0, 3, nan);
    vc.c(8, 1, 5) = to_bf16(nan);  // NaN cache row: the sampler drew its lowest NaN id
    vc.tokens[8 * N + 1] = 5;
    for (int v = 0; v < V; ++v) vc.set_target(9, 0, v, 2.0f);  // a flat (tied) target row
    vc.set_target(6, 1, 11, 3.0e38f);                          // T 0.05: scales to +inf
    vc.set_target(6, 1, 4, 3.0e38f);
  }
  return vc;
}

void expect_same_outputs(const test::VerifyCase& a, const test::VerifyCase& b,
                         const std::string& what) {
  ASSERT_EQ(a.num_accepted, b.num_accepted) << what;
  ASSERT_EQ(a.out, b.out) << what;
}

TEST(Verify, EveryVocabularySplitGivesTheSameBits) {
  for (LogitsDType dtype : {LogitsDType::bf16, LogitsDType::f32}) {
    for (VerifyMethod method : {VerifyMethod::standard, VerifyMethod::block}) {
      test::VerifyCase ref = rich_case(101, 24, 4, 157, dtype, method);
      ref.run();
      for (int64_t slice : {1, 2, 7, 64, 156, 157, 1000}) {
        test::VerifyCase vc = rich_case(101, 24, 4, 157, dtype, method);
        vc.run(slice);
        expect_same_outputs(ref, vc,
                            std::string("slice ") + std::to_string(slice) + " dtype " +
                                to_string(dtype) + " method " + to_string(method));
      }
    }
  }
}

TEST(Verify, ARowGivesTheSameBitsAloneAndInABatch) {
  test::VerifyCase batch = rich_case(202, 18, 3, 61, LogitsDType::bf16, VerifyMethod::standard);
  batch.run();
  for (int r = 0; r < batch.R; ++r) {
    if (batch.cache_slots[r] < 0) continue;
    test::VerifyCase one(1, batch.N, batch.V);
    one.slots = batch.slots;
    one.cache = batch.cache;  // the same cache, the row's own slot
    one.cache_slots[0] = batch.cache_slots[r];
    one.anchors[0] = batch.anchors[r];
    one.seeds[0] = batch.seeds[r];
    one.temps[0] = batch.temps[r];
    one.top_k[0] = batch.top_k[r];
    one.top_p[0] = batch.top_p[r];
    for (int j = 0; j < batch.N; ++j)
      one.tokens[j] = batch.tokens[static_cast<size_t>(r) * batch.N + j];
    for (int j = 0; j <= batch.N; ++j)
      for (int v = 0; v < batch.V; ++v) one.set_target(0, j, v, to_f32(batch.tbf16(r, j, v)));
    one.run();
    ASSERT_EQ(one.num_accepted[0], batch.num_accepted[r]) << "row " << r;
    for (int i = 0; i <= batch.N; ++i) ASSERT_EQ(one.token(0, i), batch.token(r, i)) << "row " << r;
  }
}

// Per-request lengths (contract.md 8.5): a row of length n in [1, N) verifies exactly
// as a block of its first n drafts (the same keys, laws and bonus position), a row of
// length 0 accepts nothing and emits one token, and a row of length N is the row
// without lengths. Every method and dtype, every length.
TEST(Verify, ARowOfLengthNVerifiesAsABlockOfNDrafts) {
  for (LogitsDType dtype : {LogitsDType::bf16, LogitsDType::f32})
    for (VerifyMethod method : {VerifyMethod::standard, VerifyMethod::block}) {
      const std::string what = std::string(to_string(dtype)) + " " + to_string(method);
      test::VerifyCase full = rich_case(505, 21, 5, 67, dtype, method);
      full.run();
      test::VerifyCase batch = rich_case(505, 21, 5, 67, dtype, method);
      for (int r = 0; r < batch.R; ++r) batch.lengths.push_back(r % (batch.N + 1));
      batch.run();
      int shorter = 0;
      for (int r = 0; r < batch.R; ++r) {
        if (batch.cache_slots[r] < 0) continue;
        const int n = batch.lengths[r], k = batch.num_accepted[r];
        ASSERT_TRUE(k >= 0 && k <= n) << what << " row " << r << ": k " << k << ", length " << n;
        for (int i = k + 1; i <= batch.N; ++i) EXPECT_EQ(batch.token(r, i), -1) << what;
        if (n == batch.N) {
          ASSERT_EQ(k, full.num_accepted[r]) << what << " row " << r;
          for (int i = 0; i <= batch.N; ++i) ASSERT_EQ(batch.token(r, i), full.token(r, i));
          continue;
        }
        if (n == 0) {
          EXPECT_TRUE(batch.token(r, 0) >= 0 && batch.token(r, 0) < batch.V) << what;
          continue;
        }
        // The row alone as a block of n drafts: the cache re-laid [slots, n, V], the
        // target's first n + 1 positions.
        test::VerifyCase one(1, n, batch.V);
        one.dtype = dtype;
        one.method = method;
        one.slots = batch.slots;
        one.cache.assign(static_cast<size_t>(batch.slots) * n * batch.V, bf16{});
        for (int s = 0; s < batch.slots; ++s)
          for (int j = 0; j < n; ++j)
            for (int v = 0; v < batch.V; ++v) one.c(s, j, v) = batch.c(s, j, v);
        one.cache_slots[0] = batch.cache_slots[r];
        one.anchors[0] = batch.anchors[r];
        one.seeds[0] = batch.seeds[r];
        one.temps[0] = batch.temps[r];
        one.top_k[0] = batch.top_k[r];
        one.top_p[0] = batch.top_p[r];
        for (int j = 0; j < n; ++j)
          one.tokens[j] = batch.tokens[static_cast<size_t>(r) * batch.N + j];
        for (int j = 0; j <= n; ++j)
          for (int v = 0; v < batch.V; ++v) {
            one.tf32(0, j, v) = batch.tf32(r, j, v);
            one.tbf16(0, j, v) = batch.tbf16(r, j, v);
          }
        one.run();
        ASSERT_EQ(one.num_accepted[0], k) << what << " row " << r << " length " << n;
        for (int i = 0; i <= n; ++i)
          ASSERT_EQ(one.token(0, i), batch.token(r, i)) << what << " row " << r << " token " << i;
        ++shorter;
      }
      EXPECT_GT(shorter, 5) << what << ": too few rows of a length in [1, N) were compared";
    }
}

TEST(Verify, OutputsAreTheAcceptedPrefixThenOneTokenThenMinusOne) {
  for (VerifyMethod method : {VerifyMethod::standard, VerifyMethod::block}) {
    test::VerifyCase vc = rich_case(303, 30, 5, 97, LogitsDType::f32, method);
    vc.run();
    for (int r = 0; r < vc.R; ++r) {
      const int k = vc.num_accepted[r];
      if (vc.cache_slots[r] < 0) {  // padding: untouched
        EXPECT_EQ(k, -7) << "padding row " << r;
        for (int i = 0; i <= vc.N; ++i) EXPECT_EQ(vc.token(r, i), -7) << "padding row " << r;
        continue;
      }
      ASSERT_TRUE(k >= 0 && k <= vc.N) << "row " << r << " k " << k;
      for (int i = 0; i < k; ++i)
        EXPECT_EQ(vc.token(r, i), vc.tokens[static_cast<size_t>(r) * vc.N + i]);
      EXPECT_TRUE(vc.token(r, k) >= 0 && vc.token(r, k) < vc.V) << "row " << r;
      for (int i = k + 1; i <= vc.N; ++i) EXPECT_EQ(vc.token(r, i), -1) << "row " << r;
    }
  }
}

// (4) Greedy: at T = 0 every emitted token is the target's pick (lowest NaN id,
// else lowest id of the maximum), whatever top-k, top-p or the method say.
TEST(Verify, GreedyEmitsTheTargetsPickAtEveryPosition) {
  test::Gen g(404);
  const int R = 40, N = 6, V = 33;
  for (VerifyMethod method : {VerifyMethod::standard, VerifyMethod::block}) {
    test::VerifyCase vc(R, N, V);
    vc.method = method;
    std::vector<std::vector<int64_t>> pick(R, std::vector<int64_t>(N + 1));
    for (int r = 0; r < R; ++r) {
      vc.temps[r] = 0.0f;
      vc.top_k[r] = r % 3 == 1 ? 2 : 0;
      vc.top_p[r] = r % 3 == 2 ? 0.1f : 1.0f;
      const int agree = static_cast<int>(g.integer(0, N));  // drafts 0..agree-1 are the picks
      for (int j = 0; j <= N; ++j) {
        for (int v = 0; v < V; ++v) vc.set_target(r, j, v, static_cast<float>(g.integer(-3, 3)));
        if (r % 5 == 4 && j == 1) {  // NaN at two ids: the lower one is the pick
          vc.set_target(r, j, 20, NAN);
          vc.set_target(r, j, 9, NAN);
        }
        int64_t best = 0;
        for (int v = 1; v < V; ++v)
          if (better(vc.target(r, j, v), v, vc.target(r, j, static_cast<int>(best)), best))
            best = v;
        pick[r][j] = best;
        if (j < N)
          vc.tokens[static_cast<size_t>(r) * N + j] = j < agree ? best : (best + 1 + j) % V;
      }
      // A draft equal to a tied maximum's higher id is not the pick.
      if (r == 0) {
        vc.set_target(0, 0, 30, 9.0f);
        vc.set_target(0, 0, 12, 9.0f);
        pick[0][0] = 12;
        vc.tokens[0] = 30;
      }
    }
    vc.run();
    for (int r = 0; r < R; ++r) {
      int want_k = 0;
      while (want_k < N && vc.tokens[static_cast<size_t>(r) * N + want_k] == pick[r][want_k])
        ++want_k;
      ASSERT_EQ(vc.num_accepted[r], want_k) << "row " << r;
      for (int i = 0; i <= want_k; ++i)
        ASSERT_EQ(vc.token(r, i), pick[r][i]) << "row " << r << " position " << i;
    }
  }
}

// A NaN target row is a point mass at its lowest NaN id (T > 0): the draft is
// accepted iff it is that id, else that id is emitted. +inf after scaling: the
// lowest +inf id. Every value -inf (top-k cannot add mass): id 0.
TEST(Verify, DegenerateTargetRowsArePointMasses) {
  const int N = 2, V = 24;
  test::VerifyCase vc(6, N, V);
  test::Gen g(505);
  for (int r = 0; r < vc.R; ++r) {
    vc.temps[r] = r < 4 ? 0.8f : 0.05f;
    for (int j = 0; j <= N; ++j)
      for (int v = 0; v < V; ++v) vc.set_target(r, j, v, g.uniform(-2, 2));
    for (int j = 0; j < N; ++j)
      for (int v = 0; v < V; ++v) vc.c(r, j, v) = to_bf16(g.uniform(-2, 2));
  }
  for (int r = 0; r < 2; ++r) {  // NaN at 17 and 6
    vc.set_target(r, 0, 17, NAN);
    vc.set_target(r, 0, 6, NAN);
  }
  vc.tokens[0 * N] = 6;   // row 0: accepted
  vc.tokens[1 * N] = 17;  // row 1: rejected, 6 emitted
  for (int v = 0; v < V; ++v) vc.set_target(2, 0, v, -INFINITY);
  vc.tokens[2 * N] = 5;  // row 2: rejected, 0 emitted
  vc.tokens[3 * N] = 0;  // row 3: all -inf at position 0, draft 0: accepted
  for (int v = 0; v < V; ++v) vc.set_target(3, 0, v, -INFINITY);
  for (int r = 4; r < 6; ++r) {  // T 0.05: 3e38 / 0.05 = +inf at 19 and 8
    vc.set_target(r, 0, 19, 3.0e38f);
    vc.set_target(r, 0, 8, 3.0e38f);
  }
  vc.tokens[4 * N] = 8;   // accepted
  vc.tokens[5 * N] = 19;  // rejected, 8 emitted
  for (LogitsDType dtype : {LogitsDType::bf16, LogitsDType::f32}) {
    vc.dtype = dtype;
    vc.run();
    const int want_k0[] = {1, 0, 0, 1, 1, 0};
    const int64_t want_first[] = {6, 6, 0, 0, 8, 8};
    for (int r = 0; r < vc.R; ++r) {
      EXPECT_EQ(vc.num_accepted[r] >= 1, want_k0[r] == 1) << "row " << r << " " << to_string(dtype);
      EXPECT_EQ(vc.token(r, 0), want_first[r]) << "row " << r << " " << to_string(dtype);
    }
  }
}

// A NaN cache row is a point mass at its lowest NaN id, the token the draft drew:
// q(x) = 1, so x is accepted iff u < p(x).
TEST(Verify, NanCacheRowIsAPointMassAtTheDrawnToken) {
  const int N = 1, V = 8;
  test::VerifyCase vc(64, N, V);
  for (int r = 0; r < vc.R; ++r) {
    for (int v = 0; v < V; ++v) {
      vc.c(r, 0, v) = to_bf16(0.0f);
      vc.set_target(r, 0, v, v == 2 ? 50.0f : 0.0f);  // p(2) ~ 1
      vc.set_target(r, 1, v, 0.0f);
    }
    vc.c(r, 0, 5) = to_bf16(NAN);
    vc.c(r, 0, 2) = to_bf16(NAN);
    vc.tokens[r] = 2;
  }
  vc.run();
  for (int r = 0; r < vc.R; ++r) EXPECT_EQ(vc.num_accepted[r], 1) << "row " << r;
}

// ---- refusals -------------------------------------------------------------------

struct RefusalSetup {
  ModelConfig c;
  DraftOptions o;
  test::VerifyCase vc{3, 4, 50};
  RefusalSetup() {
    c.vocab_size = 50;
    c.block_size = 4;
    o.max_reqs = 3;
    o.cache_slots = 3;
  }
  VerifyBatch batch() {
    VerifyBatch b;
    b.num_rows = vc.R;
    b.draft_tokens = vc.tokens.data();
    b.anchor_positions = vc.anchors.data();
    b.seeds = vc.seeds.data();
    b.temperatures = vc.temps.data();
    b.top_k = vc.top_k.data();
    b.top_p = vc.top_p.data();
    b.lengths = vc.lengths.empty() ? nullptr : vc.lengths.data();
    b.cache_slots = vc.cache_slots.data();
    b.draft_logits = vc.cache.data();
    b.target_logits = vc.target_bf16.data();
    return b;
  }
  void expect_refused(const std::vector<std::string>& needles) {
    const VerifyBatch b = batch();
    test::expect_mentions(test::error_of<InvalidArgument>([&] { validate_verify(c, o, b); }),
                          needles);
  }
};

TEST(Verify, RefusesBadInputNamingRowAndField) {
  {
    RefusalSetup s;
    const VerifyBatch b = s.batch();
    EXPECT_NO_THROW(validate_verify(s.c, s.o, b));
  }
  auto with = [](auto mutate, std::vector<std::string> needles) {
    RefusalSetup s;
    mutate(s);
    s.expect_refused(needles);
  };
  with([](RefusalSetup& s) { s.o.max_reqs = 2; }, {"num_rows 3", "max_reqs"});
  with([](RefusalSetup& s) { s.vc.cache_slots[1] = 3; }, {"row 1", "cache slot 3"});
  with([](RefusalSetup& s) { s.vc.cache_slots[2] = 0; }, {"row 2", "used by two rows"});
  with([](RefusalSetup& s) { s.vc.temps[1] = -0.5f; }, {"row 1", "temperature"});
  with([](RefusalSetup& s) { s.vc.temps[1] = NAN; }, {"row 1", "temperature"});
  with([](RefusalSetup& s) { s.vc.temps[0] = INFINITY; }, {"row 0", "temperature"});
  with([](RefusalSetup& s) { s.vc.top_k[2] = -1; }, {"row 2", "top_k -1"});
  with([](RefusalSetup& s) { s.vc.top_p[1] = 0.0f; }, {"row 1", "top_p"});
  with([](RefusalSetup& s) { s.vc.top_p[1] = 1.5f; }, {"row 1", "top_p"});
  with([](RefusalSetup& s) { s.vc.top_p[1] = NAN; }, {"row 1", "top_p"});
  with([](RefusalSetup& s) { s.vc.lengths = {4, -1, 0}; }, {"row 1", "length -1"});
  with([](RefusalSetup& s) { s.vc.lengths = {0, 4, 5}; }, {"row 2", "length 5", "N = 4"});
  with([](RefusalSetup& s) { s.vc.tokens[1 * 4 + 3] = 50; }, {"row 1", "draft token 3 = 50"});
  with([](RefusalSetup& s) { s.vc.tokens[2 * 4] = -1; }, {"row 2", "draft token 0 = -1"});
  with([](RefusalSetup& s) { s.vc.anchors[1] = -1; }, {"row 1", "anchor position -1 is negative"});
  with([](RefusalSetup& s) { s.vc.anchors[1] = std::numeric_limits<int64_t>::max() - 3; },
       {"row 1", "anchor position"});
  with([](RefusalSetup& s) { s.vc.anchors[0] = s.o.max_positions() - 3; },
       {"row 0", "anchor position"});
  with(
      [](RefusalSetup& s) {
        s.o.max_pages_per_req = 1 << 30, s.o.page_size = 1 << 30,
        s.vc.anchors[0] = int64_t{1} << 60;
      },
      {"row 0", "anchor position"});
  {
    RefusalSetup s;
    VerifyBatch b = s.batch();
    b.seeds = nullptr;
    test::expect_mentions(test::error_of<InvalidArgument>([&] { validate_verify(s.c, s.o, b); }),
                          {"seeds"});
  }
  {  // padding rows are not read beyond their slot
    RefusalSetup s;
    s.vc.cache_slots[1] = -1;
    s.vc.temps[1] = NAN;
    s.vc.tokens[4] = 999;
    const VerifyBatch b = s.batch();
    EXPECT_NO_THROW(validate_verify(s.c, s.o, b));
  }
  {  // a row may omit top-k / top-p
    RefusalSetup s;
    VerifyBatch b = s.batch();
    b.top_k = nullptr;
    b.top_p = nullptr;
    EXPECT_NO_THROW(validate_verify(s.c, s.o, b));
  }
}

TEST(Verify, OpParamsCheckRefusesMissingArrays) {
  test::VerifyCase vc(2, 3, 10);
  vc.num_accepted.assign(2, 0);
  vc.out.assign(8, 0);
  ops::VerifyParams p = vc.params();
  EXPECT_NO_THROW(p.check());
  p.tokens = nullptr;
  test::expect_mentions(test::error_of<InvalidArgument>([&] { p.check(); }), {"verify", "output"});
  p = vc.params();
  p.n = 0;
  test::expect_mentions(test::error_of<InvalidArgument>([&] { p.check(); }),
                        {"verify", "n must be"});
}

}  // namespace
}  // namespace sparkdraft
