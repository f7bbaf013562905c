// The gated and rnn Markov heads on the CPU (contract.md section 13): the loop of
// runtime/markov_loop.h from given base logits and hidden states equals a naive loop written
// from the contract's text (its own concatenation, chains, bias add, element ops and sampler),
// bit for bit at TP 1, 2, 4 and 8, with NaN, huge and padding rows, odd sizes and the
// transform; cpu::markov_head equals the same text op by op.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/bits.h"
#include "common/markov_rows.h"
#include "common/markov_tp_sweep.h"
#include "common/random.h"
#include "runtime/markov_loop.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/core/mma.h"
#include "sparkdraft/core/philox.h"
#include "sparkdraft/core/sampling.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

struct HeadSetup {
  ModelConfig c;
  std::vector<bf16> w1, w2, proj_w, proj_b, base, hidden;
  DraftWeights w;
  ops::LogitTransform transform;
  test::HostMarkovRows rows;
};

HeadSetup make_head_setup(uint64_t seed, MarkovHeadType type, int R, int N, int V, int H, int K,
                          bool cap) {
  HeadSetup s;
  s.c.vocab_size = V;
  s.c.hidden_size = H;
  s.c.markov_rank = K;
  s.c.block_size = N;
  s.c.markov_head_type = type;
  if (cap) {
    s.c.logit_multiplier = 0.75f;
    s.c.logit_soft_cap = 20.0f;
  }
  const int P = s.c.markov_proj_rows(), KK = s.c.markov_proj_inputs();
  s.w1 = test::Gen(seed).normal_bf16s(static_cast<size_t>(V) * K, 1.0f);
  s.w2 = test::Gen(seed + 1).normal_bf16s(static_cast<size_t>(V) * K, 0.3f);
  s.proj_w = test::Gen(seed + 2).normal_bf16s(static_cast<size_t>(P) * KK, 1.5f / std::sqrt(KK));
  s.proj_b = test::Gen(seed + 3).normal_bf16s(static_cast<size_t>(P), 0.5f);
  s.base = test::Gen(seed + 4).normal_bf16s(static_cast<size_t>(R) * N * V, 2.0f);
  s.hidden = test::Gen(seed + 5).normal_bf16s(static_cast<size_t>(R) * N * H, 1.0f);
  const float nan = std::numeric_limits<float>::quiet_NaN();
  // Row 1, step 2: a NaN in h (the head's output turns NaN, every bias too: the lowest id).
  if (R > 1 && N > 2) s.hidden[(static_cast<size_t>(1) * N + 2) * H + H / 2] = to_bf16(nan);
  // Row 2: huge h values at every step (saturated sigmoids and tanh: 0, 1, +-1).
  if (R > 2)
    for (int j = 0; j < N; ++j)
      for (int i = 0; i < H; i += 3)
        s.hidden[(static_cast<size_t>(2) * N + j) * H + i] = to_bf16(i % 2 ? 3.0e4f : -3.0e4f);
  s.w.markov_w1 = s.w1.data();
  s.w.markov_w2 = s.w2.data();
  s.w.markov_proj_w = s.proj_w.data();
  s.w.markov_proj_b = s.proj_b.data();
  s.transform = ops::LogitTransform::from_config(s.c);
  s.rows.num_rows = R;
  for (int r = 0; r < R; ++r) {
    s.rows.anchor_tokens.push_back((r * 53 + 7) % V);
    s.rows.anchor_positions.push_back(40 + 11 * r);
    s.rows.seeds.push_back(static_cast<int64_t>(seed * 977 + r) - 300);
    s.rows.temperatures.push_back(r % 3 == 0 ? 0.0f : (r % 3 == 1 ? 0.8f : 1.3f));
    s.rows.cache_slots.push_back(r == R - 1 && R > 3 ? -1 : R - 1 - r);  // last row padding
  }
  return s;
}

bf16 rb(float x) { return to_bf16(x); }
float f(bf16 x) { return to_f32(x); }

// One step of the head for one row, from contract.md 13.2's text: x, the chains, the bias add,
// the element ops. `s` is the rnn state (updated).
std::vector<bf16> naive_head(const HeadSetup& st, const bf16* h, const bf16* e,
                             std::vector<bf16>& s) {
  const int H = st.c.hidden_size, K = st.c.markov_rank;
  const bool rnn = st.c.markov_head_type == MarkovHeadType::rnn;
  std::vector<bf16> x;
  if (rnn) x.insert(x.end(), s.begin(), s.end());
  if (!rnn) x.insert(x.end(), h, h + H);
  x.insert(x.end(), e, e + K);
  if (rnn) x.insert(x.end(), h, h + H);
  const int width = static_cast<int>(x.size()), P = rnn ? 3 * K : K;
  EXPECT_EQ(width, rnn ? 2 * K + H : H + K);
  std::vector<bf16> p(P);
  for (int i = 0; i < P; ++i)
    p[i] = rb(mma_chain(&st.proj_w[static_cast<size_t>(i) * width], x.data(), width) +
              f(st.proj_b[i]));
  std::vector<bf16> u(K);
  for (int i = 0; i < K; ++i) {
    if (!rnn) {
      const bf16 g = rb(sigmoid_f32(f(p[i])));
      u[i] = rb(f(g) * f(e[i]));
      continue;
    }
    const bf16 sg = rb(sigmoid_f32(f(p[i])));
    const bf16 t1 = rb(f(sg) * f(s[i]));
    const bf16 om = rb(1.0f - f(sg));
    const bf16 tc = rb(tanh_f32(f(p[K + i])));
    const bf16 t2 = rb(f(om) * f(tc));
    s[i] = rb(f(t1) + f(t2));
    u[i] = rb(tanh_f32(f(p[2 * K + i])));
  }
  return u;
}

// The whole loop from the contract's text, one row and one entry at a time.
void naive_loop(const HeadSetup& st, std::vector<int64_t>& tokens, std::vector<bf16>& cache) {
  const int R = st.rows.num_rows, N = st.c.block_size, V = st.c.vocab_size, K = st.c.markov_rank,
            H = st.c.hidden_size;
  for (int r = 0; r < R; ++r) {
    int64_t prev = st.rows.anchor_tokens[r];
    std::vector<bf16> s(K, bf16{0});
    for (int j = 0; j < N; ++j) {
      const bf16* e = &st.w1[static_cast<size_t>(prev) * K];
      const bf16* h = &st.hidden[(static_cast<size_t>(r) * N + j) * H];
      const std::vector<bf16> u = naive_head(st, h, e, s);
      std::vector<bf16> l(V);
      for (int v = 0; v < V; ++v) {
        const bf16 bias = rb(mma_chain(&st.w2[static_cast<size_t>(v) * K], u.data(), K));
        cpu::step_logits(&st.base[(static_cast<size_t>(r) * N + j) * V + v], &bias, 1, st.transform,
                         &l[v]);
      }
      const uint32_t gs = draft_step_seed(st.rows.seeds[r], st.rows.anchor_positions[r], j);
      int64_t best = -1;
      float best_z = 0;
      for (int v = 0; v < V; ++v) {
        const float z = noised_score(f(l[v]), st.rows.temperatures[r], gs, v);
        if (best < 0 || (!std::isnan(best_z) && (std::isnan(z) || z > best_z))) {
          best = v;
          best_z = z;
        }
      }
      tokens[static_cast<size_t>(r) * N + j] = best;
      if (st.rows.cache_slots[r] >= 0)
        std::memcpy(&cache[(static_cast<size_t>(st.rows.cache_slots[r]) * N + j) * V], l.data(),
                    V * sizeof(bf16));
      prev = best;
    }
  }
}

const char* name(MarkovHeadType t) { return t == MarkovHeadType::gated ? "gated" : "rnn"; }

TEST(MarkovHeadCpu, MatchesNaiveLoopAndIsInvariantToTp) {
  struct Case {
    MarkovHeadType type;
    int R, N, V, H, K;
    bool cap;
  };
  for (const Case k : {Case{MarkovHeadType::gated, 5, 7, 1000, 64, 64, false},
                       Case{MarkovHeadType::rnn, 5, 7, 1000, 64, 64, true},
                       Case{MarkovHeadType::gated, 3, 4, 1024, 40, 24, true},
                       Case{MarkovHeadType::rnn, 4, 6, 512, 72, 40, false},
                       Case{MarkovHeadType::rnn, 1, 1, 256, 16, 16, false}}) {
    const uint64_t seed = 7000 + k.R * 31 + k.N * 7 + k.H;
    std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
    SCOPED_TRACE(std::string(name(k.type)) + " seed " + std::to_string(seed) + " R " +
                 std::to_string(k.R) + " N " + std::to_string(k.N) + " V " + std::to_string(k.V) +
                 " H " + std::to_string(k.H) + " rank " + std::to_string(k.K));
    HeadSetup s = make_head_setup(seed, k.type, k.R, k.N, k.V, k.H, k.K, k.cap);
    const size_t cache_size = static_cast<size_t>(k.R) * k.N * k.V;
    std::vector<int64_t> naive_tokens(static_cast<size_t>(k.R) * k.N);
    std::vector<bf16> naive_cache(cache_size, to_bf16(-7.0f));
    naive_loop(s, naive_tokens, naive_cache);
    if (k.R > 1 && k.N > 2) {
      EXPECT_EQ(naive_tokens[1 * k.N + 2], 0) << "a NaN h: the lowest id";
    }
    const ops::MarkovRows rows = s.rows.view();
    MarkovInputs in{&s.c, &s.w, &s.transform, &rows, k.R, 2, s.hidden.data()};
    test::expect_loop_equals_naive_at_every_tp(in, s.base.data(), k.V, naive_tokens, naive_cache);
  }
}

// The head changes the draft: the same weights without it (vanilla, e itself) give another
// cache; and the rnn state carries over steps (step 1 with the state reset differs).
TEST(MarkovHeadCpu, TheHeadIsNotTheVanillaLoop) {
  for (MarkovHeadType type : {MarkovHeadType::gated, MarkovHeadType::rnn}) {
    SCOPED_TRACE(name(type));
    HeadSetup s = make_head_setup(99, type, 2, 3, 512, 32, 32, false);
    const ops::MarkovRows rows = s.rows.view();
    const size_t cache_size = static_cast<size_t>(2) * 3 * 512;
    std::vector<int64_t> t1(6), t2(6);
    std::vector<bf16> c1(cache_size), c2(cache_size);
    MarkovInputs in{&s.c, &s.w, &s.transform, &rows, 2, 1, s.hidden.data()};
    markov_loop_from_base(in, 1, s.base.data(), ProposeOutputs{t1.data(), c1.data()});
    ModelConfig vanilla = s.c;
    vanilla.markov_head_type = MarkovHeadType::vanilla;
    MarkovInputs vin{&vanilla, &s.w, &s.transform, &rows, 2, 1};
    markov_loop_from_base(vin, 1, s.base.data(), ProposeOutputs{t2.data(), c2.data()});
    EXPECT_FALSE(test::same_bits(c1, c2));
    // Without the hidden states or the projection the loop refuses.
    MarkovInputs no_hidden{&s.c, &s.w, &s.transform, &rows, 2, 1};
    EXPECT_THROW(
        markov_loop_from_base(no_hidden, 1, s.base.data(), ProposeOutputs{t1.data(), c1.data()}),
        InvalidArgument);
  }
}

// cpu::markov_head op by op against the contract's text (naive_head), with u written over e
// (the loop's aliasing), rnn state in and out, odd widths, NaN and saturating inputs.
TEST(MarkovHeadCpu, OpMatchesTheContractText) {
  for (MarkovHeadType type : {MarkovHeadType::gated, MarkovHeadType::rnn}) {
    for (const int H : {8, 37, 64}) {
      const int R = 5, K = 24;
      const uint64_t seed = 31 + H;
      std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
      SCOPED_TRACE(std::string(name(type)) + " H " + std::to_string(H));
      HeadSetup s = make_head_setup(seed, type, R, 1, 64, H, K, false);
      std::vector<bf16> e = test::Gen(seed + 9).normal_bf16s(static_cast<size_t>(R) * K, 1.0f);
      e[3] = to_bf16(std::numeric_limits<float>::quiet_NaN());
      e[K + 1] = to_bf16(INFINITY);
      std::vector<bf16> state = test::Gen(seed + 10).normal_bf16s(static_cast<size_t>(R) * K, 0.7f);
      std::vector<bf16> expect_state = state, expect_u;
      for (int r = 0; r < R; ++r) {
        std::vector<bf16> sr(expect_state.begin() + r * K, expect_state.begin() + (r + 1) * K);
        const std::vector<bf16> u = naive_head(s, &s.hidden[static_cast<size_t>(r) * H],
                                               &e[static_cast<size_t>(r) * K], sr);
        expect_u.insert(expect_u.end(), u.begin(), u.end());
        std::copy(sr.begin(), sr.end(), expect_state.begin() + r * K);
      }
      ops::MarkovHeadParams p{type, R, H, K};
      p.h = s.hidden.data();
      p.h_stride = H;
      p.e = e.data();
      p.w = s.proj_w.data();
      p.b = s.proj_b.data();
      p.state = state.data();
      p.u = e.data();  // u over e
      cpu::markov_head(p, 3);
      EXPECT_TRUE(test::same_bits(e, expect_u));
      if (type == MarkovHeadType::rnn) {
        EXPECT_TRUE(test::same_bits(state, expect_state));
      }
    }
  }
}

}  // namespace
}  // namespace sparkdraft
