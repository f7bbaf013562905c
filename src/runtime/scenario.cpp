// The drafting scenario of scenario.h.
#include "sparkdraft/scenario.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "sparkdraft/core/philox.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

// Seeded stream of request-local values: Philox keyed by (scenario seed, request).
struct RequestRng {
  int64_t key;
  uint32_t at(int64_t stream, int64_t index) const {
    return philox_randint(key, (stream << 40) ^ index);
  }
};

RequestRng rng_of(uint64_t seed, int request_id) {
  return RequestRng{static_cast<int64_t>(seed * 0x9E3779B97F4A7C15ull + request_id * 7919ull + 1)};
}

enum Stream : int64_t {
  kPrompt = 1,
  kHidden,
  kAccept,
  kBonus,
  kSeed,
  kTemp,
  kAnchor,
  kTarget,
  kLength
};

// Synthetic target hidden state value: roughly N(0, 1) from a sum of uniforms.
bf16 hidden_value(const RequestRng& rng, int64_t pos, int64_t i) {
  const uint32_t a = rng.at(kHidden, pos * 65536 + i * 2);
  const uint32_t b = rng.at(kHidden, pos * 65536 + i * 2 + 1);
  const float u = (static_cast<float>(a >> 8) + static_cast<float>(b >> 8)) * (1.0f / 16777216.0f);
  return to_bf16((u - 1.0f) * 2.45f);
}

// Noise of the stand-in target logits: mean 0, variance 1 (a sum of two uniforms).
float target_noise_value(const RequestRng& rng, int round, int j, int n, int64_t v, int64_t vocab) {
  const int64_t i = ((static_cast<int64_t>(round) * (n + 1) + j) * vocab + v) * 2;
  const uint32_t a = rng.at(kTarget, i), b = rng.at(kTarget, i + 1);
  const float u = (static_cast<float>(a >> 8) + static_cast<float>(b >> 8)) * (1.0f / 16777216.0f);
  return (u - 1.0f) * 2.4494897f;  // sqrt(6): the sum of two uniforms has variance 1/6
}

struct RequestState {
  int id;
  RequestRng rng;
  int64_t anchor_pos;  // a
  int64_t anchor_token;
  int64_t context_begin;  // first position whose hidden state is not stored yet
  int64_t seed;
  float temperature;
};

}  // namespace

DraftOptions scenario_draft_options(const ModelConfig& c, const ScenarioOptions& s) {
  DraftOptions o;
  const int rows = static_cast<int>(s.request_ids.size() + s.padding_before.size());
  const int64_t max_pos =
      s.min_prompt + 16 + static_cast<int64_t>(s.rounds + 1) * (c.block_size + 1) + c.query_slots();
  o.page_size = s.page_size;
  o.max_pages_per_req = static_cast<int>((max_pos + s.page_size - 1) / s.page_size);
  const int max_id =
      s.request_ids.empty() ? 0 : *std::max_element(s.request_ids.begin(), s.request_ids.end());
  o.num_pages = (max_id + 1) * o.max_pages_per_req;
  o.max_reqs = std::max(rows, 1);
  o.cache_slots = max_id + 1;
  return o;
}

std::vector<ScenarioRound> run_scenario(
    DraftBackend& backend, const ScenarioOptions& s,
    const std::function<void(int, const ScenarioRound&)>& on_round) {
  const ModelConfig& c = backend.config();
  const DraftOptions& o = backend.options();
  const int N = c.block_size, V = c.vocab_size;
  const int width = c.taps() * c.target_hidden_size;
  const int rows = static_cast<int>(s.request_ids.size() + s.padding_before.size());
  if (rows > o.max_reqs) throw InvalidArgument("scenario: more rows than the backend's max_reqs");
  if (!(s.target_noise >= 0.0f && s.target_noise <= 1e30f))
    throw InvalidArgument("scenario: target_noise must be finite and >= 0");

  std::vector<RequestState> reqs;
  for (int id : s.request_ids) {
    RequestRng rng = rng_of(s.seed, id);
    RequestState st{id, rng, 0, 0, 0, 0, 0.0f};
    st.anchor_pos = s.min_prompt + rng.at(kPrompt, 0) % 16;
    st.anchor_token = rng.at(kAnchor, 0) % V;
    st.seed =
        static_cast<int64_t>(rng.at(kSeed, 0)) | (static_cast<int64_t>(rng.at(kSeed, 1)) << 32);
    // Greedy for one request in four, else T in {0.6, 0.8, 1.0}.
    const uint32_t t = rng.at(kTemp, 0) % 4;
    st.temperature = t == 0 ? 0.0f : 0.4f + 0.2f * static_cast<float>(t);
    reqs.push_back(st);
  }
  // Row layout: padding rows at the given indices, requests fill the rest in order.
  std::vector<int> row_request(rows, -1);
  {
    std::vector<bool> pad(rows, false);
    for (int p : s.padding_before) {
      if (p < 0 || p >= rows) throw InvalidArgument("scenario: padding row index out of range");
      pad[p] = true;
    }
    int next = 0;
    for (int r = 0; r < rows; ++r)
      if (!pad[r]) row_request[r] = next++;
  }
  auto block_table_of = [&](int id, int32_t* out) {
    for (int p = 0; p < o.max_pages_per_req; ++p) out[p] = id * o.max_pages_per_req + p;
  };

  std::vector<ScenarioRound> result;
  std::vector<bf16> cache(static_cast<size_t>(o.cache_slots) * N * V);
  std::vector<int64_t> tokens(static_cast<size_t>(rows) * N);
  for (int round = 0; round < s.rounds; ++round) {
    // 1. Store every request's newly verified context [context_begin, a).
    std::vector<bf16> hidden;
    std::vector<int64_t> positions, slots;
    std::vector<int32_t> table(o.max_pages_per_req);
    for (auto& st : reqs) {
      block_table_of(st.id, table.data());
      for (int64_t p = st.context_begin; p < st.anchor_pos; ++p) {
        for (int i = 0; i < width; ++i) hidden.push_back(hidden_value(st.rng, p, i));
        positions.push_back(p);
        slots.push_back(static_cast<int64_t>(table[p / o.page_size]) * o.page_size +
                        p % o.page_size);
      }
      st.context_begin = st.anchor_pos;
    }
    ContextBatch cb{static_cast<int>(positions.size()), hidden.data(), positions.data(),
                    slots.data()};
    backend.store_context(cb);
    const double context_ms = backend.last_timings().context_ms;

    // 2. One propose over all rows.
    std::vector<int64_t> anchors(rows, 0), apos(rows, 0), seeds(rows, 0), cslots(rows, -1);
    std::vector<float> temps(rows, 0.0f);
    std::vector<int32_t> tables(static_cast<size_t>(rows) * o.max_pages_per_req, 0);
    const bool with_lengths = s.lengths && round % 2 == 1;
    std::vector<int32_t> lengths(rows, N);
    for (int r = 0; r < rows; ++r) {
      if (row_request[r] < 0) {
        // Padding row: garbage-looking values that must not matter.
        anchors[r] = V + 5;
        apos[r] = -3;
        seeds[r] = 77;
        temps[r] = 1.0f;
        lengths[r] = -7;
        continue;
      }
      if (with_lengths)
        lengths[r] = static_cast<int32_t>(reqs[row_request[r]].rng.at(kLength, round) % (N + 1));
      const RequestState& st = reqs[row_request[r]];
      anchors[r] = st.anchor_token;
      apos[r] = st.anchor_pos;
      seeds[r] = st.seed;
      temps[r] = st.temperature;
      cslots[r] = st.id;
      block_table_of(st.id, &tables[static_cast<size_t>(r) * o.max_pages_per_req]);
    }
    ProposeBatch pb{
        rows,         anchors.data(), apos.data(),   seeds.data(),
        temps.data(), cslots.data(),  tables.data(), with_lengths ? lengths.data() : nullptr};
    ProposeOutputs out{tokens.data(), cache.data()};
    std::vector<float> conf;
    if (backend.config().confidence_head) {
      conf.assign(static_cast<size_t>(rows) * N, 0.0f);
      out.confidences = conf.data();
    }
    backend.propose(pb, out);

    ScenarioRound sr;
    sr.timings = backend.last_timings();
    sr.timings.context_ms = context_ms;

    // 3. The verifier: k accepted drafts and one emitted token per request.
    std::vector<int32_t> accepted(rows, 0);
    std::vector<int64_t> verified(static_cast<size_t>(rows) * (N + 1), -1);
    if (s.real_verifier) {
      std::vector<float> target(static_cast<size_t>(rows) * (N + 1) * V, 0.0f);
      for (int r = 0; r < rows; ++r) {
        if (row_request[r] < 0) continue;
        const RequestState& st = reqs[row_request[r]];
        for (int j = 0; j <= N; ++j) {
          const bf16* c = cache.data() + (static_cast<size_t>(st.id) * N + std::min(j, N - 1)) * V;
          float* t = target.data() + (static_cast<size_t>(r) * (N + 1) + j) * V;
          for (int v = 0; v < V; ++v)
            t[v] = to_f32(c[v]) + s.target_noise * target_noise_value(st.rng, round, j, N, v, V);
        }
      }
      VerifyBatch vb;
      vb.num_rows = rows;
      vb.draft_tokens = tokens.data();
      vb.anchor_positions = apos.data();
      vb.seeds = seeds.data();
      vb.temperatures = temps.data();
      vb.cache_slots = cslots.data();
      vb.draft_logits = cache.data();
      vb.target_logits = target.data();
      vb.target_dtype = LogitsDType::f32;
      vb.lengths = pb.lengths;
      backend.verify(vb, VerifyOutputs{accepted.data(), verified.data()});
    }
    for (int r = 0; r < rows; ++r) {
      if (row_request[r] < 0) continue;
      RequestState& st = reqs[row_request[r]];
      RequestDraft d{st.id, st.anchor_token, st.anchor_pos, st.temperature, {}, {}, {}};
      d.length = lengths[r];
      d.tokens.assign(tokens.begin() + static_cast<size_t>(r) * N,
                      tokens.begin() + static_cast<size_t>(r + 1) * N);
      const bf16* rowc = cache.data() + static_cast<size_t>(st.id) * N * V;
      d.logits.assign(rowc, rowc + static_cast<size_t>(N) * V);
      if (!conf.empty())
        d.confidences.assign(conf.begin() + static_cast<size_t>(r) * N,
                             conf.begin() + static_cast<size_t>(r + 1) * N);
      if (s.real_verifier) {
        d.accepted = accepted[r];
        d.emitted = verified[static_cast<size_t>(r) * (N + 1) + d.accepted];
      } else if (with_lengths) {  // the mock: a seeded k <= n and a seeded token
        d.accepted = static_cast<int>(st.rng.at(kAccept, round) % (d.length + 1));
        d.emitted = st.rng.at(kBonus, round) % V;
      } else {  // the mock: a seeded k and a seeded token
        d.accepted = static_cast<int>(st.rng.at(kAccept, round) % N);
        d.emitted = st.rng.at(kBonus, round) % V;
      }
      st.anchor_pos += d.accepted + 1;
      st.anchor_token = d.emitted;
      sr.drafts.push_back(std::move(d));
    }
    if (on_round) on_round(round, sr);
    result.push_back(std::move(sr));
  }
  return result;
}

}  // namespace sparkdraft
