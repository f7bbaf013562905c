// Vocab-parallel Markov loop on the CPU (see markov_loop.h).
#include "runtime/markov_loop.h"

#include <algorithm>
#include <chrono>
#include <climits>
#include <cmath>
#include <cstring>

#include "sparkdraft/core/packet.h"
#include "sparkdraft/core/philox.h"
#include "sparkdraft/core/sampling.h"
#include "sparkdraft/core/topk.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

using Clock = std::chrono::steady_clock;

double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// The k best (value, id) of each of `lists` rows of this rank's slice (`rows`, row t at
// rows + t * slice, ids from `offset`) over the whole vocabulary, as one sorted list [lists, k]
// on every rank: each rank's top-k of its slice, all-gathered, merged (contract.md 12.1).
std::vector<TopkEntry> topk_lists(Communicator* comm, const bf16* rows, size_t lists, int slice,
                                  int32_t offset, int k) {
  const int tp = comm ? comm->tp_size() : 1;
  std::vector<TopkEntry> mine(lists * k, TopkEntry{0.0f, -1});
  for (size_t t = 0; t < lists; ++t) topk_of_row(rows + t * slice, slice, offset, k, &mine[t * k]);
  if (!comm) return mine;
  std::vector<TopkEntry> all(mine.size() * tp), merged(lists * k, TopkEntry{0.0f, -1});
  comm->all_gather(mine.data(), all.data(), mine.size() * sizeof(TopkEntry));
  for (size_t t = 0; t < lists; ++t) {
    int count = 0;
    for (int q = 0; q < tp; ++q)
      count = topk_merge(&merged[t * k], count, k, &all[q * mine.size() + t * k], k);
  }
  return merged;
}

// The loop over this rank's slice given its base logits [rows, N, slice].
void loop_slice(const MarkovInputs& in, Communicator* comm, const bf16* base,
                const ProposeOutputs& out) {
  const ModelConfig& c = *in.config;
  const ops::MarkovRows& rows = *in.rows;
  const int R = rows.num_rows, N = c.block_size, markov_rank = c.markov_rank;
  const int tp = comm ? comm->tp_size() : 1, me = comm ? comm->tp_rank() : 0;
  // The draft vocabulary is what shards (contract.md section 11: Vd ids mapped to target
  // ids by draft_ids; without a map Vd = V and the ids are the entries' own).
  const int slice = c.draft_vocab() / tp;
  const int64_t offset = static_cast<int64_t>(me) * slice;
  const bf16* w2 = in.weights->markov_w2 + offset * markov_rank;
  const bf16* w1 = in.weights->markov_w1;
  const int32_t* ids = c.reduced_vocab() ? in.weights->draft_ids + offset : nullptr;
  if (c.reduced_vocab() && in.weights->draft_ids == nullptr)
    throw InvalidArgument("the CPU Markov loop: a reduced draft vocabulary needs draft_ids");

  std::vector<int64_t> prev(rows.anchor_tokens, rows.anchor_tokens + R);
  std::vector<bf16> e(static_cast<size_t>(R) * markov_rank), bias(static_cast<size_t>(R) * slice);
  std::vector<bf16> local(static_cast<size_t>(R) * N * slice);  // [R, N, slice]
  if (c.vocab_size >= INT32_MAX)
    throw ConfigError("the vocab-parallel Markov loop needs 32-bit vocab ids (vocab " +
                      std::to_string(c.vocab_size) + ")");
  std::vector<MarkovPacket> mine(R), all(static_cast<size_t>(R) * tp);
  // The top-k variant (section 12): the candidates of every row and step, on every rank; the
  // union form (12.5) adds each step's top-m of the bias row (which needs the dense bias).
  const int topk = c.markov_topk, bias_topk = c.markov_bias_topk;
  const std::vector<TopkEntry> cand = topk > 0
                                          ? topk_lists(comm, base, static_cast<size_t>(R) * N,
                                                       slice, static_cast<int32_t>(offset), topk)
                                          : std::vector<TopkEntry>();
  const bf16 minus_inf = to_bf16(-INFINITY);
  // The gated / rnn head (section 13): u replaces e; the rnn state starts at +0.
  ops::MarkovHeadParams head;
  std::vector<bf16> state;
  if (c.markov_head_proj()) {
    if (in.hidden == nullptr || in.weights->markov_proj_w == nullptr ||
        in.weights->markov_proj_b == nullptr)
      throw InvalidArgument(std::string("the CPU Markov loop: the ") +
                            to_string(c.markov_head_type) +
                            " Markov head needs the hidden states and its projection weights");
    state.assign(static_cast<size_t>(R) * markov_rank, bf16{0});
    head.type = c.markov_head_type;
    head.rows = R;
    head.hidden = c.hidden_size;
    head.rank = markov_rank;
    head.h_stride = static_cast<int64_t>(N) * c.hidden_size;
    head.e = e.data();
    head.w = in.weights->markov_proj_w;
    head.b = in.weights->markov_proj_b;
    head.state = state.data();
    head.u = e.data();
  }
  for (int j = 0; j < N; ++j) {
    for (int r = 0; r < R; ++r)
      std::memcpy(&e[static_cast<size_t>(r) * markov_rank], w1 + prev[r] * markov_rank,
                  markov_rank * sizeof(bf16));
    if (c.markov_head_proj()) {
      head.h = in.hidden + static_cast<size_t>(j) * c.hidden_size;
      cpu::markov_head(head, in.threads);
    }
    if (topk == 0 || bias_topk > 0)
      cpu::markov_bias(e.data(), R, w2, slice, markov_rank, bias.data(), in.threads);
    const std::vector<TopkEntry> bias_cand =
        bias_topk > 0 ? topk_lists(comm, bias.data(), static_cast<size_t>(R), slice,
                                   static_cast<int32_t>(offset), bias_topk)
                      : std::vector<TopkEntry>();
    for (int r = 0; r < R; ++r) {
      // A row past its length (contract.md 9.5) runs no more steps: its packet is never read.
      if (!ops::step_runs(rows.lengths, r, j)) continue;
      bf16* l = &local[(static_cast<size_t>(r) * N + j) * slice];
      const bf16* b = base + (static_cast<size_t>(r) * N + j) * slice;
      if (topk == 0) {
        cpu::step_logits(b, &bias[static_cast<size_t>(r) * slice], slice, *in.transform, l);
      } else {
        // -inf off the candidates; on this rank's candidates the dense step's values: the
        // bias chain of w2's row, the bf16 add, the transform. An id in both lists of the union
        // form is written twice with the same value.
        std::fill(l, l + slice, minus_inf);
        auto put = [&](const TopkEntry* list, int count) {
          for (int q = 0; q < count; ++q) {
            const int64_t i = static_cast<int64_t>(list[q].id) - offset;
            if (list[q].id < 0 || i < 0 || i >= slice) continue;
            bf16 bias_i = bias_topk > 0 ? bias[static_cast<size_t>(r) * slice + i] : bf16{};
            if (bias_topk == 0)
              cpu::markov_bias(&e[static_cast<size_t>(r) * markov_rank], 1, w2 + i * markov_rank, 1,
                               markov_rank, &bias_i, 1);
            cpu::step_logits(b + i, &bias_i, 1, *in.transform, l + i);
          }
        };
        put(&cand[(static_cast<size_t>(r) * N + j) * topk], topk);
        if (bias_topk > 0) put(&bias_cand[static_cast<size_t>(r) * bias_topk], bias_topk);
      }
      const uint32_t gs = draft_step_seed(rows.seeds[r], rows.anchor_positions[r], j);
      const cpu::RowBest best = ids ? cpu::sample_row_ids(l, slice, ids, rows.temperatures[r], gs)
                                    : cpu::sample_row(l, slice, offset, rows.temperatures[r], gs);
      mine[r] = make_packet(best.value, static_cast<int32_t>(best.id));
    }
    if (comm) {
      comm->all_gather(mine.data(), all.data(), sizeof(MarkovPacket) * R);
    } else {
      std::memcpy(all.data(), mine.data(), sizeof(MarkovPacket) * R);
    }
    for (int r = 0; r < R; ++r) {
      if (!ops::step_runs(rows.lengths, r, j)) {
        if (me == 0) out.draft_tokens[static_cast<size_t>(r) * N + j] = -1;
        continue;
      }
      // Fold in rank order with the rule (associative and commutative); a reduced
      // vocabulary adds the ids outside it as one candidate (-inf, fill) (section 11.2).
      MarkovPacket win = all[r];
      for (int k = 1; k < tp; ++k) {
        const MarkovPacket& p = all[static_cast<size_t>(k) * R + r];
        if (packet_wins(p, win)) win = p;
      }
      if (ids && in.weights->draft_fill >= 0) {
        const MarkovPacket fill = make_packet(-INFINITY, in.weights->draft_fill);
        if (packet_wins(fill, win)) win = fill;
      }
      prev[r] = win.id;
      if (me == 0) out.draft_tokens[static_cast<size_t>(r) * N + j] = win.id;
    }
  }
  // Cache: all-gather the slices, then every row with a slot gets its full rows.
  std::vector<bf16> gathered;
  const bf16* src = local.data();
  if (comm) {
    gathered.resize(local.size() * tp);
    comm->all_gather(local.data(), gathered.data(), local.size() * sizeof(bf16));
    src = gathered.data();
  }
  if (me != 0) return;
  const size_t V = c.vocab_size;
  const bf16 neg_inf = to_bf16(-INFINITY);  // 0xff80
  for (int r = 0; r < R; ++r) {
    const int64_t slot = rows.cache_slots[r];
    if (slot < 0) continue;
    for (int j = 0; j < N; ++j) {
      if (ops::step_slot(rows.cache_slots, rows.lengths, r, j) < 0) break;  // past the length
      bf16* row = out.draft_logits + (static_cast<size_t>(slot) * N + j) * V;
      if (c.reduced_vocab()) std::fill(row, row + V, neg_inf);  // ids outside the draft's
      for (int k = 0; k < tp; ++k) {
        const bf16* part =
            src + static_cast<size_t>(k) * local.size() + (static_cast<size_t>(r) * N + j) * slice;
        if (!c.reduced_vocab()) {
          std::memcpy(row + k * slice, part, slice * sizeof(bf16));
          continue;
        }
        const int32_t* map = in.weights->draft_ids + static_cast<size_t>(k) * slice;
        for (int i = 0; i < slice; ++i) row[map[i]] = part[i];
      }
    }
  }
}

// Base logits of this rank's slice: [rows*N, slice] = hidden @ lm_head[slice]^T.
std::vector<bf16> slice_base(const MarkovInputs& in, int tp, int me, const bf16* hidden) {
  const ModelConfig& c = *in.config;
  const int T = in.rows->num_rows * c.block_size, H = c.hidden_size;
  const int slice = c.draft_vocab() / tp;
  std::vector<bf16> base(static_cast<size_t>(T) * slice);
  const bf16* w = in.weights->lm_head + static_cast<size_t>(me) * slice * H;
  cpu::gemm(ops::gemm_of(hidden, H, w, T, slice, H, base.data(), slice), in.threads, in.packed);
  return base;
}

void check_tp(const ModelConfig& c, int tp) {
  if (tp < 1 || (tp & (tp - 1)) || c.draft_vocab() % tp != 0)
    throw InvalidArgument("vocab-parallel Markov loop: tp " + std::to_string(tp) +
                          " must be a power of two dividing the " +
                          (c.reduced_vocab() ? "draft vocabulary " : "vocabulary ") +
                          std::to_string(c.draft_vocab()));
}

}  // namespace

SafeMarkovRows::SafeMarkovRows(const ProposeBatch& b) {
  for (int r = 0; r < b.num_rows; ++r) {
    const bool pad = b.cache_slots[r] < 0;
    anchor_tokens_.push_back(pad ? 0 : b.anchor_tokens[r]);
    anchor_positions_.push_back(pad ? 0 : b.anchor_positions[r]);
  }
  view_ = ops::MarkovRows{b.num_rows, anchor_tokens_.data(), anchor_positions_.data(),
                          b.seeds,    b.temperatures,        b.cache_slots,
                          b.lengths};
}

void run_markov_tp_rank(const MarkovInputs& in, Communicator* comm, const bf16* hidden,
                        const ProposeOutputs& out, double* lm_head_ms, double* loop_ms) {
  const int tp = comm ? comm->tp_size() : 1, me = comm ? comm->tp_rank() : 0;
  auto t0 = Clock::now();
  std::vector<bf16> base = slice_base(in, tp, me, hidden);
  if (me == 0 && lm_head_ms) *lm_head_ms = ms_since(t0);
  t0 = Clock::now();
  MarkovInputs with_hidden = in;
  with_hidden.hidden = hidden;
  loop_slice(with_hidden, comm, base.data(), out);
  if (me == 0 && loop_ms) *loop_ms = ms_since(t0);
}

void run_vocab_parallel_markov(const MarkovInputs& in, int tp, const bf16* hidden,
                               const ProposeOutputs& out, double* lm_head_ms, double* loop_ms) {
  check_tp(*in.config, tp);
  if (tp == 1) return run_markov_tp_rank(in, nullptr, hidden, out, lm_head_ms, loop_ms);
  MarkovInputs per_rank = in;
  per_rank.threads = std::max(1, in.threads / tp);
  run_thread_group(tp, [&](Communicator& comm) {
    run_markov_tp_rank(per_rank, &comm, hidden, out, lm_head_ms, loop_ms);
  });
}

void markov_loop_from_base(const MarkovInputs& in, int tp, const bf16* base,
                           const ProposeOutputs& out) {
  check_tp(*in.config, tp);
  const ModelConfig& c = *in.config;
  const int R = in.rows->num_rows, N = c.block_size, V = c.draft_vocab(), slice = V / tp;
  auto slice_of = [&](int me) {
    std::vector<bf16> s(static_cast<size_t>(R) * N * slice);
    for (int t = 0; t < R * N; ++t)
      std::memcpy(&s[static_cast<size_t>(t) * slice],
                  base + static_cast<size_t>(t) * V + me * slice, slice * sizeof(bf16));
    return s;
  };
  if (tp == 1) return loop_slice(in, nullptr, base, out);
  run_thread_group(tp, [&](Communicator& comm) {
    std::vector<bf16> s = slice_of(comm.tp_rank());
    loop_slice(in, &comm, s.data(), out);
  });
}

}  // namespace sparkdraft
