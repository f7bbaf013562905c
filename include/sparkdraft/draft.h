// The draft job (contract.md section 1) behind one backend interface.
//
//   store_context: target hidden states of newly verified tokens -> fc ->
//                  hidden_norm -> (per-layer input norm) -> K/V -> K-norm ->
//                  RoPE -> insert into every layer's paged KV cache.
//   propose:       per request the query block (anchor at position a, N-1 mask
//                  tokens) -> backbone -> final norm -> lm_head -> Markov loop
//                  -> draft_tokens [rows, N] and the draft-logits cache
//                  [cache_slots, N, V]; with the confidence head, also
//                  confidences [rows, N] (contract.md section 9).
//
// The KV cache of each layer is [pages, page_size, kv_heads, 2*head_dim] bf16 and
// belongs to the backend; slot = page * page_size + offset through the request's
// block table. Inputs here are host buffers (the CLI and tests); the CUDA backend
// also takes device pointers on the caller's stream (cuda/draft.h).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "sparkdraft/checkpoint.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/plan.h"
#include "sparkdraft/verify.h"

namespace sparkdraft {

// Upper bounds of DraftOptions (validate_options refuses more).
constexpr int kMaxThreads = 1024;  // CPU worker threads
constexpr int kMaxReqs = 1 << 16;  // rows per propose call
constexpr int kMaxTp = 1024;       // TP ranks
// The RoPE table (position_limit() rows of head_dim floats) is refused beyond this.
constexpr int64_t kMaxRopeTableBytes = int64_t{4} << 30;

struct DraftOptions {
  int max_reqs = 8;            // rows per propose call
  int num_pages = 256;         // KV cache pages per layer
  int page_size = 16;          // positions per page
  int max_pages_per_req = 64;  // block table row width
  int cache_slots = 8;         // rows of the draft-logits cache
  // TP ranks (contract.md section 6). The CPU backend runs them as threads: lm_head and the
  // Markov loop shard the vocabulary, and the layers shard too (heads, intermediate
  // columns, canonical K slices, KV heads) where the config splits over tp ranks,
  // else they stay replicated (cpu_plan says which and why); the bits are TP 1's
  // either way. The CUDA backend drafts at tp 1.
  int tp = 1;
  int threads = 0;  // CPU worker threads (0 = hardware concurrency)
  // The caller's KV caches, for an engine that owns every layer's KV memory: empty =
  // the backend allocates its own (zeroed); else one pointer per layer to
  // [num_pages * page_size, kv_heads, 2 * head_dim] bf16 (host memory for the CPU
  // backend, device memory of the backend's GPU for the CUDA backend) that the caller
  // keeps alive for the backend's lifetime. The backend neither clears nor frees them
  // and writes only the slots store_context names. tp 1 only.
  std::vector<bf16*> kv_caches;
  int64_t max_positions() const { return static_cast<int64_t>(max_pages_per_req) * page_size; }
};

// Newly verified tokens of any requests, flattened.
struct ContextBatch {
  int num_tokens = 0;
  const bf16* hidden = nullptr;        // [T, taps * H_t] target hidden states
  const int64_t* positions = nullptr;  // [T] absolute positions
  const int64_t* slots = nullptr;      // [T] KV slots (-1: skip)
};

// One propose call over `num_rows` rows (requests or padding rows).
struct ProposeBatch {
  int num_rows = 0;
  const int64_t* anchor_tokens = nullptr;     // [rows] the target's last sampled token
  const int64_t* anchor_positions = nullptr;  // [rows] a: the anchor's absolute position
  const int64_t* seeds = nullptr;             // [rows]
  const float* temperatures = nullptr;        // [rows] >= 0, finite
  const int64_t* cache_slots = nullptr;       // [rows] draft-logits cache row, -1 = padding
  const int32_t* block_tables = nullptr;      // [rows, max_pages_per_req]
  // [rows] n_r in [0, N] or null (N): row r drafts steps j < n_r only; past its length its
  // tokens are -1, its cache rows are not written and its confidences are +0. The backbone
  // runs the whole block, so the first n_r steps are bit for bit a propose without lengths
  // (contract.md 9.5).
  const int32_t* lengths = nullptr;
};

struct ProposeOutputs {
  int64_t* draft_tokens = nullptr;  // [rows, N]
  bf16* draft_logits = nullptr;     // [cache_slots, N, V]
  // [rows, N] fp32: the confidence head's value of every drafted position
  // (contract.md section 9; padding rows +0). Written when the config has the head
  // and this is given; refused (InvalidArgument) for a config without the head.
  float* confidences = nullptr;
};

struct StageTimings {
  double context_ms = 0, embed_ms = 0, backbone_ms = 0, lm_head_ms = 0, markov_ms = 0;
  // Set when the step ran as one CUDA graph: only the whole step was timed.
  double graph_ms = -1;
  double total_ms() const {
    return graph_ms >= 0 ? graph_ms : embed_ms + backbone_ms + lm_head_ms + markov_ms;
  }
};

class DraftBackend {
 public:
  virtual ~DraftBackend() = default;
  virtual std::string name() const = 0;
  virtual const ModelConfig& config() const = 0;
  virtual const DraftOptions& options() const = 0;
  virtual void store_context(const ContextBatch& batch) = 0;
  virtual void propose(const ProposeBatch& batch, const ProposeOutputs& out) = 0;
  // The lossless verifier (contract.md section 8) on host buffers: validates (validate_verify)
  // and writes num_accepted and tokens of every non-padding row. This definition runs
  // the CPU reference (the vocabulary in one slice per TP rank); a backend with its
  // own kernel overrides it with the same bits.
  virtual void verify(const VerifyBatch& batch, const VerifyOutputs& out);
  virtual StageTimings last_timings() const = 0;
  // Host copy of one layer's KV cache [pages * page_size * kv_heads * 2 * head_dim].
  virtual std::vector<bf16> kv_cache(int layer) const = 0;
  // Where one layer's KV cache lives (the layout above; host memory for the CPU
  // backend, device memory for the CUDA backend; DraftOptions::kv_caches[layer] when
  // the caller gave them), for a zero-copy view. InvalidArgument for a layer out of
  // range; Unavailable where the cache is sharded over TP ranks.
  virtual bf16* kv_cache_data(int layer) {
    (void)layer;
    throw Unavailable("kv_cache_data: the " + name() +
                      " backend keeps its KV caches sharded over TP ranks (no single buffer)");
  }
  // What runs (computed once at construction; the backend follows it).
  virtual const StepPlan& plan() const = 0;
};

// Refuses options no backend can honour: max_reqs, num_pages, page_size,
// max_pages_per_req and cache_slots >= 1, max_reqs <= kMaxReqs, threads in
// [0, kMaxThreads], tp a power of two <= kMaxTp dividing the vocabulary, a
// KV cache of at most 1 TiB, a RoPE table of at most kMaxRopeTableBytes,
// logits buffers of at most 1 TiB, and kv_caches empty or one non-null pointer per
// layer and only at tp 1 (InvalidArgument naming the field).
void validate_options(const ModelConfig& c, const DraftOptions& o);

// Positions a backend takes: [0, position_limit), the block table's reach
// (max_pages_per_req x page_size) cut at the config's max_position_embeddings.
// The RoPE table has this many rows.
int64_t position_limit(const ModelConfig& c, const DraftOptions& o);

// Refuses bad input at the API boundary (InvalidArgument naming row and field):
// positions outside [0, position_limit) (a propose's whole block a .. a + N - 1),
// slots, pages, ids and temperatures out of range. Every bound is checked without
// an overflowing sum or product, whatever int64 the caller passes. store_context
// also refuses two tokens of one batch writing the same KV slot.
void validate_context(const ModelConfig& c, const DraftOptions& o, const ContextBatch& b);
void validate_propose(const ModelConfig& c, const DraftOptions& o, const ProposeBatch& b);

// Every refusal of make_cpu_backend that needs no weights (the config's and the
// options' checks): what `sparkdraft plan --backend cpu` runs before it prints.
void validate_cpu_backend(const ModelConfig& c, const DraftOptions& o);

std::unique_ptr<DraftBackend> make_cpu_backend(std::shared_ptr<const Checkpoint> ckpt,
                                               const DraftOptions& options);

}  // namespace sparkdraft
