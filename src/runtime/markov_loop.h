// The Markov loop on the CPU backend, vocab-parallel over ranks as threads
// (contract.md section 6 (b)). Rank k owns the k-th equal slice of lm_head and w2 (of
// the draft vocabulary when it is reduced, section 11: ids mapped to target ids):
// per step it samples its slice and contributes a packet (best value, best id);
// every rank folds the packets in rank order with the contract's rule, so all
// ranks pick the same token and the tokens and cache are bit for bit TP = 1's. The top-k
// variant (config markov_topk, section 12) first merges every rank's top-k of each
// position's base logits into one candidate list, then runs the same loop with the
// values off the candidates -inf; its union form (markov_bias_topk, 12.5) merges each
// step's top-m of the dense bias row into the candidates the same way. The gated / rnn heads
// (config markov_head_type, section 13 of the contract) replace e = w1[prev] by the head's u
// before the bias chains; their projection is replicated on every rank (each rank computes
// every row's u from the full hidden state).
#pragma once

#include <cstdint>
#include <vector>

#include "sparkdraft/checkpoint.h"
#include "sparkdraft/comm.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/ops/markov.h"

namespace sparkdraft {

// A propose batch's rows as the loop reads them (ops::MarkovRows), with the padding rows
// (cache slot -1) made safe to run: their anchor token and position are replaced by 0 (their
// tokens are don't-care). The view points at the batch's seeds, temperatures and slots and at
// this object's anchors: it lives no longer than either.
class SafeMarkovRows {
 public:
  explicit SafeMarkovRows(const ProposeBatch& b);
  SafeMarkovRows(const SafeMarkovRows&) = delete;
  SafeMarkovRows& operator=(const SafeMarkovRows&) = delete;
  const ops::MarkovRows& view() const { return view_; }

 private:
  std::vector<int64_t> anchor_tokens_, anchor_positions_;
  ops::MarkovRows view_;
};

struct MarkovInputs {
  const ModelConfig* config;
  const DraftWeights* weights;
  const ops::LogitTransform* transform;
  const ops::MarkovRows* rows;
  int cache_slots;  // rows of the output draft-logits cache
  int threads;
  // The final normed hidden states [rows * N, H] (what lm_head reads): the gated / rnn heads'
  // h (contract.md section 13). run_markov_tp_rank sets it; markov_loop_from_base needs it
  // for those heads.
  const bf16* hidden = nullptr;
  // lm_head's vocab slices packed (cpu/mma_gemm.h; null: none), found by cpu::gemm.
  const cpu::MmaPackedSet* packed = nullptr;
};

// One rank's part: base logits of its vocab slice from the final hidden states
// [rows*N, H], then the N steps. `comm` may be null for a single rank.
void run_markov_tp_rank(const MarkovInputs& in, Communicator* comm, const bf16* hidden,
                        const ProposeOutputs& out, double* lm_head_ms, double* loop_ms);

// Runs run_markov_tp_rank on `tp` thread ranks (inline for tp == 1).
void run_vocab_parallel_markov(const MarkovInputs& in, int tp, const bf16* hidden,
                               const ProposeOutputs& out, double* lm_head_ms, double* loop_ms);

// The Markov loop alone over given base logits [rows, N, Vd] (Vd = the draft vocabulary,
// V without a reduced one; tests and the GPU comparison use it): tokens [rows, N] and the
// cache [slots, N, V].
void markov_loop_from_base(const MarkovInputs& in, int tp, const bf16* base,
                           const ProposeOutputs& out);

}  // namespace sparkdraft
