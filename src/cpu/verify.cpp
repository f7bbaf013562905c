// The CPU reference of the verifier: ops/verify.h followed literally, in its
// three stages (vocabulary passes over slices, the combine in the fixed tree, the
// sequential decision per row).
#include "sparkdraft/cpu/verify.h"

#include <algorithm>
#include <limits>
#include <vector>

#include "common/fma_dispatch.h"
#include "common/parallel.h"

namespace sparkdraft::cpu {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// body(v) for v in [v0, v1): the elementwise passes, whose arithmetic calls std::fma
// (law_exp, law_prob_of_exp, race_noise, law_term), in the form with FMA instructions
// where the CPU has them (common/fma_dispatch.h; only the loop and what body calls are
// compiled twice).
template <class Body>
SD_FMA_FLATTEN void each_fma(int64_t v0, int64_t v1, Body& body) {
  for (int64_t v = v0; v < v1; ++v) body(v);
}
template <class Body>
void each(int64_t v0, int64_t v1, Body&& body) {
  if (detail::has_fma()) return each_fma(v0, v1, body);
  for (int64_t v = v0; v < v1; ++v) body(v);
}

// The fixed tree of contract.md section 6 over the slices' partials (adjacent
// pairs, level by level; an odd last one rises unchanged). The operations are
// exact, so any tree gives these bits; this is the one the backends use.
template <class T, class Op>
T tree_fold(std::vector<T> p, Op op) {
  for (size_t width = p.size(); width > 1; width = (width + 1) / 2) {
    for (size_t i = 0; 2 * i + 1 < width; ++i) p[i] = op(p[2 * i], p[2 * i + 1]);
    if (width % 2 == 1) p[width / 2] = p[width - 1];
  }
  return p[0];
}

// Runs part(v0, v1) over the slices of [0, V) and folds the partials.
template <class T, class Part, class Op>
T over_slices(int vocab, int64_t slice, Part part, Op op) {
  const int64_t w = slice > 0 ? slice : vocab;
  std::vector<T> partials;
  for (int64_t v0 = 0; v0 < vocab; v0 += w)
    partials.push_back(
        part(static_cast<int>(v0), static_cast<int>(std::min<int64_t>(vocab, v0 + w))));
  return tree_fold(std::move(partials), op);
}

MarkovPacket first_packet(const std::vector<float>& s, int64_t slice) {
  return over_slices<MarkovPacket>(
      static_cast<int>(s.size()), slice,
      [&](int v0, int v1) {
        MarkovPacket acc = make_packet(s[v0], v0);
        for (int v = v0 + 1; v < v1; ++v) fold_first(acc, s[v], v);
        return acc;
      },
      first_of);
}

// One side's law at one position: its scaled logits (ids outside the kept set at
// -inf), the stats, Z and the probabilities (law_prob_of_exp of every id).
struct Law {
  std::vector<float> s, p;
  std::vector<float> E;  // exp_law(s - M) of every id (empty for a degenerate law)
  LawStats st;
  float z = 0.0f;
  float prob(int64_t v) const { return p[v]; }
  // p from the E of every id (law_exp), computed once for the sum and the probabilities.
  void finish(std::vector<float> e) {
    E = std::move(e);
    p.resize(s.size());
    each(0, static_cast<int64_t>(s.size()),
         [&](int64_t v) { p[v] = law_prob_of_exp(st, z, E.empty() ? 0.0f : E[v], v); });
  }
};

// Ids in the order of section 8.2 (better).
std::vector<int32_t> ordered_ids(const std::vector<float>& s) {
  std::vector<int32_t> ids(s.size());
  for (size_t v = 0; v < s.size(); ++v) ids[v] = static_cast<int32_t>(v);
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return better(s[a], a, s[b], b); });
  return ids;
}

// The law of s over the kept set of top_k / top_p (section 8.3); the masked ids
// are set to -inf in law.s.
Law make_law(std::vector<float> s, int32_t top_k, float top_p, int64_t slice) {
  Law law;
  law.s = std::move(s);
  const int V = static_cast<int>(law.s.size());
  law.st.first = first_packet(law.s, slice);
  if (law.st.degenerate()) {  // a point mass: top-k / top-p keep its id
    law.finish({});
    return law;
  }
  const float M = law.st.first.value;
  const bool use_k = top_k > 0 && top_k < V;
  const bool use_p = top_p < 1.0f;
  if (use_k || use_p) {
    const std::vector<int32_t> ids = ordered_ids(law.s);
    const int keep_k = use_k ? top_k : V;
    for (int i = keep_k; i < V; ++i) law.s[ids[i]] = kNegInf;
    if (use_p) {
      U128 total;
      each(0, keep_k, [&](int64_t i) { total = u128_add(total, law_term(law.s[ids[i]], M)); });
      U128 before;
      each(0, keep_k, [&](int64_t i) {
        const U128 e = law_term(law.s[ids[i]], M);
        if (!top_p_keeps(before, top_p, total)) law.s[ids[i]] = kNegInf;
        before = u128_add(before, e);
      });
    }
  }
  std::vector<float> e(law.s.size());
  each(0, V, [&](int64_t v) { e[v] = law_exp(law.s[v], M); });
  law.st.sum = over_slices<U128>(
      V, slice,
      [&](int v0, int v1) {
        U128 acc;
        for (int v = v0; v < v1; ++v) acc = u128_add(acc, fixed64_of_unit(e[v]));
        return acc;
      },
      u128_add);
  law.z = f32_of_fixed64(law.st.sum);
  law.finish(e);
  return law;
}

float target_logit(const ops::VerifyParams& p, int r, int j, int v) {
  const int64_t i =
      static_cast<int64_t>(r) * p.target_row_stride() + static_cast<int64_t>(j) * p.vocab + v;
  return p.target_dtype == LogitsDType::f32 ? static_cast<const float*>(p.target_logits)[i]
                                            : to_f32(static_cast<const bf16*>(p.target_logits)[i]);
}

std::vector<float> target_scaled(const ops::VerifyParams& p, int r, int j, float T) {
  std::vector<float> s(static_cast<size_t>(p.vocab));
  for (int v = 0; v < p.vocab; ++v) s[v] = verify_scaled(target_logit(p, r, j, v), T);
  return s;
}

std::vector<float> draft_scaled(const ops::VerifyParams& p, int64_t slot, int j, float T) {
  const bf16* c = p.draft_logits + slot * p.cache_row_stride() + static_cast<int64_t>(j) * p.vocab;
  std::vector<float> s(static_cast<size_t>(p.vocab));
  for (int v = 0; v < p.vocab; ++v) s[v] = verify_scaled(to_f32(c[v]), T);
  return s;
}

// The draw of section 8.5 over weights w[v] >= 0 (stage (a) pass 3): the first id of
// race_score(w[v], race_noise(gd, v)). Its value is 0 when every weight is 0.
template <class Weight>
MarkovPacket draw(int vocab, int64_t slice, uint32_t gd, Weight weight) {
  return over_slices<MarkovPacket>(
      vocab, slice,
      [&](int v0, int v1) {
        MarkovPacket acc = make_packet(race_score(weight(v0), race_noise(gd, v0)), v0);
        each(v0 + 1, v1, [&](int64_t v) {
          fold_first(acc, race_score(weight(static_cast<int>(v)), race_noise(gd, v)), v);
        });
        return acc;
      },
      first_of);
}

void verify_row(const ops::VerifyParams& p, int r, int64_t slice) {
  const int64_t slot = p.cache_slots[r];
  if (slot < 0) return;  // padding: nothing read or written
  // n: the drafts this row verifies (its length, N without lengths); the outputs keep
  // their N + 1 columns.
  const int N = p.row_length(r), V = p.vocab, width = p.n + 1;
  const float T = p.temperatures[r];
  const int64_t seed = p.seeds[r], a = p.anchor_positions[r];
  const int64_t* x = p.draft_tokens + static_cast<int64_t>(r) * p.n;
  const int32_t top_k = p.top_k ? p.top_k[r] : 0;
  const float top_p = p.top_p ? p.top_p[r] : 1.0f;
  int k = 0;
  int64_t emitted = -1;

  if (!(T > 0.0f)) {
    // Greedy (section 8.5): the first id of f32(t_j) at each position.
    for (;; ++k) {
      const int64_t pick = first_packet(target_scaled(p, r, k, 0.0f), slice).id;
      if (k == N || x[k] != pick) {
        emitted = pick;
        break;
      }
    }
  } else {
    // The laws of every position the decision may read.
    std::vector<Law> tgt, dft;
    auto ensure = [&](int j) {
      while (static_cast<int>(tgt.size()) <= j) {
        const int i = static_cast<int>(tgt.size());
        tgt.push_back(make_law(target_scaled(p, r, i, T), top_k, top_p, slice));
        dft.push_back(i < N ? make_law(draft_scaled(p, slot, i, T), 0, 1.0f, slice) : Law{});
      }
    };
    // The target draw at j: a degenerate law's point, else the race over its E.
    auto target_draw = [&](int j) -> int64_t {
      ensure(j);
      const Law& t = tgt[j];
      if (t.st.degenerate()) return t.st.first.id;
      return draw(V, slice, verify_step_seed(seed, a + j, p.draw_salt),
                  [&](int v) { return t.E[v]; })
          .id;
    };
    float w = 1.0f;  // block: w_k
    if (p.method == VerifyMethod::standard) {
      for (; k < N; ++k) {
        ensure(k);
        const float u = accept_uniform(seed, a + k, p.accept_salt, x[k]);
        if (!accept_standard(u, dft[k].prob(x[k]), tgt[k].prob(x[k]))) break;
      }
    } else {
      ensure(N);
      std::vector<float> wi(static_cast<size_t>(N) + 1);
      wi[0] = 1.0f;
      for (int i = 1; i <= N; ++i)
        wi[i] = block_weight_next(wi[i - 1], tgt[i - 1].prob(x[i - 1]), dft[i - 1].prob(x[i - 1]));
      for (int i = 1; i <= N; ++i) {
        float h = wi[N];
        if (i < N) {
          const Law &ti = tgt[i], &di = dft[i];
          const U128 mass = over_slices<U128>(
              V, slice,
              [&](int v0, int v1) {
                U128 acc;
                each(v0, v1, [&](int64_t v) {
                  acc = u128_add(acc, fixed64_of_unit(block_mass(wi[i], ti.prob(v), di.prob(v))));
                });
                return acc;
              },
              u128_add);
          h = block_h(f32_of_fixed64(mass), wi[i]);
        }
        if (accept_uniform(seed, a + i - 1, p.accept_salt, x[i - 1]) < h) k = i;
      }
      w = wi[k];
    }
    if (k == N) {
      emitted = target_draw(N);
    } else {
      ensure(k);
      const Law &tk = tgt[k], &dk = dft[k];
      const MarkovPacket win =
          draw(V, slice, verify_step_seed(seed, a + k, p.draw_salt), [&](int v) {
            if (p.method == VerifyMethod::standard) return residual_weight(tk.prob(v), dk.prob(v));
            return block_mass(w, tk.prob(v), dk.prob(v));
          });
      emitted = win.value > 0.0f ? win.id : target_draw(k);  // 0: no residual mass
    }
  }

  p.num_accepted[r] = k;
  int64_t* out = p.tokens + static_cast<int64_t>(r) * width;
  for (int i = 0; i < width; ++i) out[i] = i < k ? x[i] : (i == k ? emitted : -1);
}

}  // namespace

void verify(const ops::VerifyParams& p, int64_t slice, int threads) {
  p.check();
  parallel_for(p.rows, threads, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) verify_row(p, static_cast<int>(r), slice);
  });
}

}  // namespace sparkdraft::cpu
