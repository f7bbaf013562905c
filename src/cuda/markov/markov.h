// The Markov loop on the GPU (contract.md sections 1.5, 4, 5 and 6): per request row r and
// step j = 0..N-1
//   prev    = the anchor (j = 0), else the token of step j-1
//   e       = w1[prev]                                               bf16 [K]
//   bias[v] = bf16(mma_chain(w2[v][0..K), e[0..K)))  (core/mma.h: the tensor-core chain)
//   s       = bf16(f32(base[r][j][v]) + f32(bias[v]))
//   l       = s, or with the transform bf16(t): t = f32(s) * multiplier,
//             cap: t = tanh_f32(t * inv_cap) * cap                 (ops::LogitTransform)
//   cache[slot_r][j][v] = l          (slot -1: a padding row, nothing written)
//   z       = noised_score(l, T_r, draft_step_seed(seed_r, a_r, j), v)  (core/sampling.h)
//   token   = the lowest id whose z is NaN, else the lowest id of the maximum.
// Every value above is bit for bit the CPU reference's (cpu/ops.h markov_bias,
// step_logits, sample_row), except that a NaN logit keeps NaN but not its payload
// (the GPU's float arithmetic returns the canonical NaN, x86 propagates payloads).
//
// Three loops give the same tokens and cache bit for bit:
//   * eager: one plain kernel per op (embedding, bias GEMV, step logits, sampler),
//     the GPU reference;
//   * fused: one anchor kernel, then per step ONE kernel over the vocabulary that
//     reads w2 once for all rows (16-byte cp.async tiles), computes the bias on the
//     tensor cores, logits, cache, noise brackets and a per-block best per row
//     (src/cuda/markov/fused/); the last block of each row (an arrival counter)
//     writes the token and the next step's embedding. Programmatic dependent launch.
//   * vocab-parallel: S = tp_size ranks each hold a shard of V/S consecutive ids
//     of w2 and the base logits; per step each rank runs the fused step over its
//     shard and leaves a per-row packet, the packets are all-gathered and a pick
//     kernel applies the rule in rank order; after the loop the cache shards are
//     all-gathered.
//     The two collectives go through the one Communicator (comm.h: the loopback
//     of cuda/comm/loopback.h on one GPU here, NCCL later).
// The sampling rule is associative and commutative, so block size, grid and vocab
// split never change a token.
//
// Everything that runs per call only launches kernels and device copies on the
// caller's stream: no host synchronization, no allocation, so a call can be
// captured in a CUDA graph. Buffers are allocated when a loop object is built.
// Values behind device pointers (token ids, positions, slots) are not read on the
// host: the API boundary validates them (anchor ids in [0, V), slots in range).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "sparkdraft/comm.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/packet.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/ops/markov.h"
#include "sparkdraft/ops/markov_head.h"

namespace sparkdraft::cuda {

// A (score, vocab id) pair: a block's or a row's best under the sampling rule.
struct MarkovCandidate {
  float value;
  int32_t id;
};
static_assert(sizeof(MarkovCandidate) == 8);

// A shard's per-row result of one step (core/packet.h, the one packet format).
using sparkdraft::MarkovPacket;

// ---- eager kernels (one op each, cpu/ops.h one to one) -----------------------------
// e[r] = w1[tokens[r * token_stride]]: exact bf16 copies of markov_rank-wide rows.
void markov_embed(const int64_t* tokens, int64_t token_stride, int rows, const bf16* w1,
                  int markov_rank, bf16* e, cudaStream_t stream);

// cpu::markov_bias: bias[r][v] = bf16(mma_chain(w2[v], e[r])); one warp per 16
// vocab entries x 8 rows, mma.sync straight from global memory. e [rows, markov_rank],
// w2 [vocab, markov_rank], bias [rows, vocab].
void markov_bias(const bf16* e, int rows, const bf16* w2, int vocab, int markov_rank, bf16* bias,
                 cudaStream_t stream);

// cpu::step_logits over the rows.num_rows rows: l = transform(bf16(base + bias)) into
// logits [rows, vocab]; also into cache + slot * cache_slot_stride for rows whose
// ops::step_slot(rows.cache_slots, rows.lengths, r, step) >= 0 (cache may be null: no store). base
// row r starts at base + r * base_stride. With a draft map (contract.md 11.2) entry v is stored at
// cache column ids[v] (the other columns are the caller's: markov_fill_cache).
struct DraftIdMap {
  const int32_t* ids = nullptr;  // device [vocab]: the target id of each entry; null: v itself
  int32_t fill = -1;             // the candidate (-inf, fill) joins each row's fold; -1: none
};
void markov_step_logits(const bf16* base, int64_t base_stride, const bf16* bias,
                        const ops::MarkovRows& rows, int step, int vocab,
                        const ops::LogitTransform& transform, bf16* logits, bf16* cache,
                        int64_t cache_slot_stride, cudaStream_t stream, const DraftIdMap& map = {});

// The top-k Markov loop (contract.md section 12), eager kernels:
// markov_topk_candidates: base [positions, vocab] -> ids [positions, k], each position's k
// candidates (12.1) in increasing id order (a radix select on the rule's 16-bit order key
// over slices of the row, then a compaction in id order: exact).
// Its scratch for up to `positions` rows of `vocab` ids: zero at allocation, and zero again
// after every call (the last kernel clears what the first ones add to).
class TopkScratch {
 public:
  TopkScratch() = default;
  TopkScratch(int positions, int vocab);
  int positions() const { return positions_; }
  int slices() const { return slices_; }
  int32_t* data() { return ints_.data(); }

 private:
  int positions_ = 0, slices_ = 0;
  DeviceBuffer<int32_t> ints_;
};
void markov_topk_candidates(const bf16* base, int positions, int vocab, int k, int32_t* ids,
                            TopkScratch& scratch, cudaStream_t stream);
// markov_topk_step: step `step` of every row, on a cache row (slot stride cache_slot_stride)
// that is -inf already (markov_fill_cache before the loop): on the candidates, the k ids[r *
// ids_stride ..] and (the union form, 12.5) the m = `more.count` ids more.ids[r * more.stride ..]
// (each list in increasing id order; an id in both is one candidate), the bias chain of their w2
// rows with e[r], the dense step's logit, the cache entry; the token by the rule folded with (-inf,
// the lowest id off the candidates) to tokens[r * token_stride].
struct TopkMoreIds {
  const int32_t* ids = nullptr;
  int64_t stride = 0;
  int count = 0;  // 0: the plain top-k loop
};
void markov_topk_step(const bf16* e, const bf16* w2, int markov_rank, const bf16* base,
                      int64_t base_stride, const int32_t* ids, int64_t ids_stride, int k,
                      const ops::MarkovRows& rows, int vocab, const ops::LogitTransform& transform,
                      int step, bf16* cache, int64_t cache_slot_stride, int64_t* tokens,
                      int64_t token_stride, cudaStream_t stream, const TopkMoreIds& more = {});

// The cache rows of a reduced vocabulary (contract.md 11.2) and of the top-k loop (12.2): every
// column of the rows [slot][0..steps) of width `vocab` of each row with a slot (those below its
// length) gets bf16 -inf (0xff80), 16 bytes a store; the entries are then stored over it step by
// step.
void markov_fill_cache(const ops::MarkovRows& rows, int steps, int vocab, bf16* cache,
                       cudaStream_t stream);

// Per-request lengths (contract.md 9.5): every loop skips the cache stores of a row's steps
// past its length (ops::step_slot) and ends with this: tokens [rows, steps] past each row's
// length -1 (nothing without rows.lengths).
void markov_truncate_tokens(const ops::MarkovRows& rows, int steps, int64_t* tokens,
                            cudaStream_t stream);

// The gated / rnn Markov head (ops/markov_head.h, contract.md section 13), eager: cpu::markov_head
// on the device. One kernel assembles each row's input x [rows, K] (one block per row; with
// zero_state the rnn state part is +0, step 0, and p.state is not read), the projection runs
// through cuda::gemm (M = rows, N = P, K, k_slices 1, fp32 out into acc [rows, P]), one
// elementwise kernel writes u (and the rnn state) from acc, the bias and x (one thread per
// unit; u may be p.e). x and acc are the caller's scratch (the workspace's head_x, head_acc).
void markov_head(const ops::MarkovHeadParams& p, bf16* x, float* acc, cudaStream_t stream,
                 bool zero_state = false);

// cpu::sample_row over the rows.num_rows rows: each block of kSampleBlockVocab entries
// writes its best (noised score, id + id_offset; with a draft map: score and noise keyed by
// map.ids[v]) to partials [rows, markov_sample_blocks(vocab)], a final kernel reduces them
// per row (with the map's (-inf, fill) candidate) into best[r] and, when tokens is not null,
// tokens[r * token_stride] = best id. Temperature rows.temperatures[r], step seed
// draft_step_seed(rows.seeds[r], rows.anchor_positions[r], step).
inline constexpr int kSampleBlockVocab = 2048;
int markov_sample_blocks(int vocab);
void markov_sample(const bf16* logits, const ops::MarkovRows& rows, int vocab, int64_t id_offset,
                   int step, MarkovCandidate* partials, MarkovCandidate* best, int64_t* tokens,
                   int64_t token_stride, cudaStream_t stream, const DraftIdMap& map = {});

// ---- the loop's inputs -------------------------------------------------------------
// Fixed at load (device pointers).
struct MarkovHead {
  const bf16* w1 = nullptr;  // [vocab, markov_rank] (indexed by target ids)
  const bf16* w2 = nullptr;  // [width(), markov_rank] (TP 1; the vocab-parallel loop takes shards)
  int vocab = 0;             // V: the target's ids, the width of a cache row
  int markov_rank = 0;       // K
  ops::LogitTransform transform;
  // A reduced draft vocabulary (contract.md section 11; the eager loop at TP 1 only):
  // draft_vocab = Vd < V entries, draft id d samples and caches as target id
  // draft_ids[d] (device [Vd]), and (-inf, fill) joins every row's fold (fill: the
  // lowest target id outside the map, -1 when none). draft_vocab 0: the full vocabulary.
  int draft_vocab = 0;
  const int32_t* draft_ids = nullptr;
  int32_t fill = -1;
  // The top-k loop (contract.md section 12; the eager loop at TP 1 only, full vocabulary):
  // per position the topk best base logits are the candidates, -inf elsewhere. 0 = dense.
  int topk = 0;
  // Its union form (12.5): the bias row's bias_topk best join each step's candidates. 0 = off.
  int bias_topk = 0;
  // The gated / rnn head (contract.md section 13; the eager loop at TP 1 only, full vocabulary,
  // dense): its projection (device [P, K] and [P]) over the batch's hidden states [rows, steps,
  // hidden]. vanilla: none.
  MarkovHeadType head_type = MarkovHeadType::vanilla;
  int hidden = 0;  // H
  const bf16* proj_w = nullptr;
  const bf16* proj_b = nullptr;
  bool head_proj() const { return head_type != MarkovHeadType::vanilla; }
  int width() const { return draft_vocab > 0 ? draft_vocab : vocab; }
  bool reduced() const { return draft_vocab > 0; }
};

// One call (device pointers): the request rows (ops/markov.h, the one per-request view)
// and the call's arrays.
struct MarkovBatch {
  ops::MarkovRows rows;
  int steps = 0;                      // N
  const bf16* base_logits = nullptr;  // [rows, steps, head.width()] (TP 1)
  int64_t* draft_tokens = nullptr;    // [rows, steps]
  bf16* cache = nullptr;              // [cache slots, steps, vocab]
  // The final normed hidden states [rows, steps, head.hidden] (the gated / rnn heads' h).
  const bf16* hidden = nullptr;
};

// One TP rank's shard of the vocab-parallel loop: ids [tp_rank * V/S, (tp_rank + 1) * V/S)
// at S = tp_size.
struct MarkovShard {
  const bf16* w2 = nullptr;           // [V/S, markov_rank]
  const bf16* base_logits = nullptr;  // [rows, steps, V/S]
};

// ---- the fused plan ------------------------------------------------------------------
// What decides whether the fused loop runs (all known at load).
struct MarkovPlanInput {
  int vocab = 0;                                       // V: width of the draft-logits cache
  int draft_vocab = 0;                                 // the draft head's vocabulary; 0 = V
  int markov_rank = 0;                                 // K; 0 = the draft has no Markov head
  int topk = 0;                                        // the top-k loop's k (section 12); 0 = dense
  MarkovHeadType head_type = MarkovHeadType::vanilla;  // section 13
  int tp_size = 1;                                     // vocab-parallel ranks
  int max_rows = 1;                                    // rows per call
  bool cache_bf16_contiguous = true;  // the cache is one contiguous bf16 [slots, N, V]
  const void* w1 = nullptr;           // when given, checked for 16-byte alignment
  const void* w2 = nullptr;           // (per TP rank: its shard)
};

// Why the fused loop cannot run this draft, or "" when it can.
std::string fused_markov_refusal(const MarkovPlanInput& in);

// Logs the message through the library's sink (sparkdraft/log.h, level info) the
// first time it is seen (thread safe); returns whether this call logged it.
bool markov_log_once(const std::string& message);

// Launch shape of the fused step for `rows` rows (the launcher-owned table,
// contract.md section 5: "block size chosen by row count"). 256 threads per block; each block
// walks a contiguous run of vocab tiles.
struct FusedStepShape {
  int blocks_per_sm = 0;  // target residency (memory-bound few rows: deep prefetch)
  int stages = 0;         // cp.async ring depth (w2 tiles in flight + 1)
  int smem_bytes = 0;     // dynamic shared memory per block
  int tile_vocab = 0;     // vocab entries per tile (256 / threads per entry)
};
// Returns false when no shape fits (rows * markov_rank too large for shared memory).
// max_smem_block: opt-in dynamic shared memory per block; smem_per_sm: per SM.
bool fused_step_shape(int rows, int markov_rank, int max_smem_block, int smem_per_sm,
                      FusedStepShape* shape);

class MarkovWorkspace;
// The fused step's launch over `width` vocab entries (one TP rank's shard): the shape of
// fused_step_shape for the workspace's device, and the grid (one wave: blocks
// per SM, lowered to what the registers allow, times the SMs, at most one block
// per tile). Throws InvalidArgument when no shape fits.
struct FusedStepLaunch {
  FusedStepShape shape;
  int blocks_per_sm = 0;  // after the register limit
  int grid = 0;
};
FusedStepLaunch fused_step_launch(const MarkovWorkspace& ws, int rows, int width);

// ---- workspace and loops ---------------------------------------------------------------
// Device buffers of one loop sized for max_rows rows and `steps` steps, allocated
// once (before any graph capture). At TP 1 (tp_size == 1) it holds the eager and
// the fused loop's buffers; with tp_size > 1 the fused and vocab-parallel ones
// (for every TP rank: the loopback runs them all in one workspace).
class MarkovWorkspace {
 public:
  MarkovWorkspace(int max_rows, int steps, int vocab, int markov_rank, int tp_size);

  int max_rows() const { return max_rows_; }
  int steps() const { return steps_; }
  int vocab() const { return vocab_; }
  int markov_rank() const { return markov_rank_; }
  int tp_size() const { return tp_size_; }
  int shard_width() const { return vocab_ / tp_size_; }
  int sm_count() const { return sm_count_; }
  int max_smem() const { return max_smem_; }
  int smem_per_sm() const { return smem_per_sm_; }
  // 256-thread fused step blocks per SM the registers allow.
  int fused_reg_blocks() const { return reg_blocks_; }
  // Largest fused grid for one TP rank's shard.
  int max_grid() const { return max_grid_; }
  // Programmatic dependent launch of the fused steps (on by default).
  bool pdl() const { return pdl_; }
  void set_pdl(bool on) { pdl_ = on; }
  // Walk the vocabulary backwards on odd steps (L2 keeps the tail of w2 the
  // previous step read); on by default.
  bool alternate_direction() const { return alternate_; }
  void set_alternate_direction(bool on) { alternate_ = on; }

  // Eager buffers (tp_size == 1).
  DeviceBuffer<bf16> e;                           // [max_rows, markov_rank]
  DeviceBuffer<bf16> bias;                        // [max_rows, vocab]
  DeviceBuffer<bf16> logits;                      // [max_rows, vocab]
  DeviceBuffer<MarkovCandidate> sample_partials;  // [max_rows, markov_sample_blocks(vocab)]
  DeviceBuffer<MarkovCandidate> sample_best;      // [max_rows]
  DeviceBuffer<int32_t> topk_ids;  // [max_rows, steps, k] (the top-k loop; MarkovLoop sizes it)
  DeviceBuffer<int32_t> bias_topk_ids;  // [max_rows, m] (the union form's bias candidates)
  TopkScratch topk_scratch;             // markov_topk_candidates' (the top-k loop)
  // The gated / rnn head (section 13; MarkovLoop sizes them): each row's input x, the
  // projection's fp32 chains, the rnn state.
  DeviceBuffer<bf16> head_x;      // [max_rows, K]
  DeviceBuffer<float> head_acc;   // [max_rows, P]
  DeviceBuffer<bf16> head_state;  // [max_rows, markov_rank] (rnn)
  // Fused buffers.
  DeviceBuffer<bf16> embeds;        // [steps + 1, max_rows, markov_rank]: row j is step j's e
  DeviceBuffer<uint32_t> arrivals;  // [tp_size, steps, max_rows]
  DeviceBuffer<int32_t> known;      // [tp_size, steps, max_rows] a lower bound of each
                                    // row's best score (order key), shared by the blocks
  DeviceBuffer<unsigned long long> row_best;  // [tp_size, steps, max_rows] packed best so far
  DeviceBuffer<float> noise_bound;            // per-bucket upper bounds of the Gumbel noise
  // Vocab-parallel buffers (tp_size > 1).
  DeviceBuffer<MarkovPacket> packets_send;  // [tp_size, max_rows] (local ranks' sends)
  DeviceBuffer<MarkovPacket> packets_recv;  // [tp_size, max_rows]
  DeviceBuffer<bf16> shard_cache;           // [tp_size, max_rows, steps, V/S]
  DeviceBuffer<bf16> gathered_cache;        // [tp_size, max_rows, steps, V/S]

 private:
  int max_rows_, steps_, vocab_, markov_rank_, tp_size_;
  int sm_count_ = 0, max_smem_ = 0, smem_per_sm_ = 0, max_grid_ = 0;
  int reg_blocks_ = 0;
  bool pdl_ = true, alternate_ = true;
};

// The eager loop (TP 1). Throws InvalidArgument on sizes that do not fit `ws`.
void eager_markov_loop(const MarkovHead& head, const MarkovBatch& batch, MarkovWorkspace& ws,
                       cudaStream_t stream);

// The fused loop (TP 1). Throws InvalidArgument when fused_markov_refusal refuses
// the shapes (the caller runs eager_markov_loop instead: MarkovLoop does).
void fused_markov_loop(const MarkovHead& head, const MarkovBatch& batch, MarkovWorkspace& ws,
                       cudaStream_t stream);

// The loop of a TP 1 draft: fused when the plan accepts it, else eager with the
// reason logged once (markov_log_once).
class MarkovLoop {
 public:
  // Throws ConfigError when the draft has no Markov head (no loop can run).
  MarkovLoop(const MarkovHead& head, int max_rows, int steps, bool cache_bf16_contiguous = true);
  bool fused() const { return refusal_.empty(); }
  const std::string& refusal() const { return refusal_; }
  MarkovWorkspace& workspace() { return ws_; }
  void run(const MarkovBatch& batch, cudaStream_t stream);

 private:
  MarkovHead head_;
  std::string refusal_;
  MarkovWorkspace ws_;
};

// The vocab-parallel loop (fused only: there is no eager sharded loop) over the
// ranks of a device communicator: per step one packet all-gather, after the loop
// one cache all-gather (comm.h, queued on the loop's stream). Tokens and cache are
// bit for bit those of TP 1.
class VocabParallelMarkov {
 public:
  // head.w2 is not read (the shards hold w2); `comm` must outlive the loop and
  // have device memory (InvalidArgument otherwise). Throws ConfigError with the
  // fused plan's reason when the fused loop cannot run this draft.
  VocabParallelMarkov(const MarkovHead& head, Communicator& comm, int max_rows, int steps,
                      bool cache_bf16_contiguous = true);
  MarkovWorkspace& workspace() { return ws_; }
  // `local` holds one MarkovShard per comm.local_ranks() entry, in that order;
  // batch.base_logits is not read.
  void run(const MarkovBatch& batch, std::span<const MarkovShard> local, cudaStream_t stream);

 private:
  MarkovHead head_;
  Communicator& comm_;
  MarkovWorkspace ws_;
};

}  // namespace sparkdraft::cuda
