// Input checks at the API boundary (contract.md section 4: bad input is refused with a
// clear error; no kernel runs on it). Shared by every backend.
#include <algorithm>
#include <cmath>
#include <map>
#include <set>
#include <string>

#include "runtime/require.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

using runtime_detail::require;
using runtime_detail::require_anchor_position;

// Which bound made position_limit() what it is, for the refusals.
std::string limit_reason(const ModelConfig& c, const DraftOptions& o) {
  return o.max_positions() <= c.max_position_embeddings
             ? " (the block table's max_pages_per_req x page_size)"
             : " (the config's max_position_embeddings)";
}

}  // namespace

void validate_options(const ModelConfig& c, const DraftOptions& o) {
  auto at_least_one = [](int v, const char* field) {
    require(v >= 1,
            std::string("DraftOptions: ") + field + " " + std::to_string(v) + " must be >= 1");
  };
  at_least_one(o.max_reqs, "max_reqs");
  at_least_one(o.num_pages, "num_pages");
  at_least_one(o.page_size, "page_size");
  at_least_one(o.max_pages_per_req, "max_pages_per_req");
  at_least_one(o.cache_slots, "cache_slots");
  require(o.max_reqs <= kMaxReqs, "DraftOptions: max_reqs " + std::to_string(o.max_reqs) +
                                      " exceeds " + std::to_string(kMaxReqs));
  require(o.threads >= 0 && o.threads <= kMaxThreads,
          "DraftOptions: threads " + std::to_string(o.threads) + " is outside [0, " +
              std::to_string(kMaxThreads) + "] (0 = hardware concurrency)");
  // The vocabulary that shards is the draft's (contract.md section 11).
  require(o.tp >= 1 && o.tp <= kMaxTp && (o.tp & (o.tp - 1)) == 0 && c.draft_vocab() % o.tp == 0,
          "tp " + std::to_string(o.tp) + " must be a power of two <= " + std::to_string(kMaxTp) +
              " dividing the " + (c.reduced_vocab() ? "draft vocabulary (" : "vocabulary (") +
              std::to_string(c.draft_vocab()) + ")");
  if (!o.kv_caches.empty()) {
    require(o.kv_caches.size() == static_cast<size_t>(c.num_layers),
            "DraftOptions: kv_caches has " + std::to_string(o.kv_caches.size()) +
                " entries; give none or one per layer (" + std::to_string(c.num_layers) + ")");
    for (size_t l = 0; l < o.kv_caches.size(); ++l)
      require(o.kv_caches[l] != nullptr,
              "DraftOptions: kv_caches[" + std::to_string(l) + "] is null");
    require(o.tp == 1, "DraftOptions: kv_caches (the caller's KV caches) need tp 1 (got tp " +
                           std::to_string(o.tp) + ")");
  }
  // Elements of one layer's KV cache: refused when the product overflows (the
  // allocation itself reports a size that is merely too large).
  int64_t kv = 0;
  const bool overflow =
      __builtin_mul_overflow(static_cast<int64_t>(o.num_pages), o.page_size, &kv) ||
      __builtin_mul_overflow(kv, static_cast<int64_t>(c.num_kv_heads) * 2 * c.head_dim, &kv);
  require(!overflow, "DraftOptions: num_pages " + std::to_string(o.num_pages) + " x page_size " +
                         std::to_string(o.page_size) + " (x max_pages_per_req " +
                         std::to_string(o.max_pages_per_req) + ") overflows the KV cache size");
  // Beyond 1 TiB no machine of this kind holds it: refused here, by name,
  // rather than left to the allocator (std::length_error, or an abort under ASan).
  const int64_t kv_bytes =
      kv <= (int64_t{1} << 40) / 2 / std::max(c.num_layers, 1) ? kv * 2 * c.num_layers : -1;
  require(kv_bytes >= 0, "DraftOptions: num_pages " + std::to_string(o.num_pages) +
                             " x page_size " + std::to_string(o.page_size) +
                             " makes a KV cache of more than 1 TiB (" +
                             std::to_string(c.num_layers) + " layers x " + std::to_string(kv) +
                             " bf16 values each)");
  // The RoPE table holds position_limit() rows of head_dim floats (max_pages_per_req x
  // page_size, at most max_position_embeddings); bounded like the KV cache.
  const int64_t rope_rows = position_limit(c, o);
  require(rope_rows <= kMaxRopeTableBytes / 4 / std::max<int64_t>(c.head_dim, 1),
          "DraftOptions: the RoPE table of " + std::to_string(rope_rows) +
              " positions (max_pages_per_req " + std::to_string(o.max_pages_per_req) +
              " x page_size " + std::to_string(o.page_size) + ", at most max_position_embeddings " +
              std::to_string(c.max_position_embeddings) + ") x head_dim " +
              std::to_string(c.head_dim) + " floats exceeds " +
              std::to_string(kMaxRopeTableBytes >> 30) + " GiB");
  // The logits buffers a backend holds: [max_reqs * N, V] fp32 and the draft-logits
  // cache [cache_slots, N, V] bf16 (also what a caller allocates for the outputs).
  const int64_t row_logits = static_cast<int64_t>(c.block_size) * c.vocab_size;  // < 2^37
  require(o.max_reqs <= (int64_t{1} << 40) / 4 / row_logits,
          "DraftOptions: max_reqs " + std::to_string(o.max_reqs) + " x block " +
              std::to_string(c.block_size) + " x vocabulary " + std::to_string(c.vocab_size) +
              " makes logits buffers of more than 1 TiB");
  require(o.cache_slots <= (int64_t{1} << 40) / 2 / row_logits,
          "DraftOptions: cache_slots " + std::to_string(o.cache_slots) + " x block " +
              std::to_string(c.block_size) + " x vocabulary " + std::to_string(c.vocab_size) +
              " makes a draft-logits cache of more than 1 TiB");
}

int64_t position_limit(const ModelConfig& c, const DraftOptions& o) {
  return std::min<int64_t>(o.max_positions(), std::max(c.max_position_embeddings, 0));
}

void validate_context(const ModelConfig& c, const DraftOptions& o, const ContextBatch& b) {
  require(b.num_tokens >= 0, "store_context: num_tokens must be >= 0");
  if (b.num_tokens == 0) return;
  require(b.hidden && b.positions && b.slots,
          "store_context: hidden, positions and slots must all be given");
  const int64_t slots = static_cast<int64_t>(o.num_pages) * o.page_size;
  const int64_t limit = position_limit(c, o);
  std::map<int64_t, int> writer;  // slot -> first token writing it
  for (int t = 0; t < b.num_tokens; ++t) {
    const int64_t pos = b.positions[t], slot = b.slots[t];
    require(pos >= 0 && pos < limit, "store_context: token " + std::to_string(t) + " position " +
                                         std::to_string(pos) + " is outside [0, " +
                                         std::to_string(limit) + ")" + limit_reason(c, o));
    require(slot >= -1 && slot < slots, "store_context: token " + std::to_string(t) + " slot " +
                                            std::to_string(slot) + " is outside [-1, " +
                                            std::to_string(slots) + ")");
    if (slot < 0) continue;
    const auto [it, fresh] = writer.emplace(slot, t);
    require(fresh, "store_context: tokens " + std::to_string(it->second) + " and " +
                       std::to_string(t) + " both write KV slot " + std::to_string(slot));
  }
}

void validate_propose(const ModelConfig& c, const DraftOptions& o, const ProposeBatch& b) {
  require(b.num_rows >= 1 && b.num_rows <= o.max_reqs,
          "propose: num_rows " + std::to_string(b.num_rows) +
              " is outside [1, max_reqs = " + std::to_string(o.max_reqs) + "]");
  require(b.anchor_tokens && b.anchor_positions && b.seeds && b.temperatures && b.cache_slots &&
              b.block_tables,
          "propose: every input array must be given");
  const int64_t limit = position_limit(c, o);
  std::set<int64_t> used_slots;
  for (int r = 0; r < b.num_rows; ++r) {
    const std::string row = "propose: row " + std::to_string(r) + ": ";
    const float temp = b.temperatures[r];
    require(std::isfinite(temp) && temp >= 0.0f,
            row + "temperature " + std::to_string(temp) + " must be finite and >= 0");
    const int64_t slot = b.cache_slots[r];
    require(slot >= -1 && slot < o.cache_slots, row + "cache slot " + std::to_string(slot) +
                                                    " is outside [-1, " +
                                                    std::to_string(o.cache_slots) + ")");
    if (slot < 0) continue;  // padding row: nothing is read or written for it
    if (b.lengths)           // contract.md 9.5
      require(b.lengths[r] >= 0 && b.lengths[r] <= c.block_size,
              row + "length " + std::to_string(b.lengths[r]) +
                  " is outside [0, block_size = " + std::to_string(c.block_size) + "]");
    require(used_slots.insert(slot).second,
            row + "cache slot " + std::to_string(slot) + " is used by two rows");
    const int64_t tok = b.anchor_tokens[r];
    require(tok >= 0 && tok < c.vocab_size, row + "anchor token " + std::to_string(tok) +
                                                " is outside [0, " + std::to_string(c.vocab_size) +
                                                ")");
    // a + Q <= limit (Q = the query slots: N, or 1 + N in the fill-in layout).
    const int64_t a = b.anchor_positions[r];
    const int Q = c.query_slots();
    require_anchor_position(a, Q, limit, row, limit_reason(c, o));
    const int pages = static_cast<int>((a + Q + o.page_size - 1) / o.page_size);
    for (int p = 0; p < pages; ++p) {
      const int32_t page = b.block_tables[static_cast<int64_t>(r) * o.max_pages_per_req + p];
      require(page >= 0 && page < o.num_pages,
              row + "block table entry " + std::to_string(p) + " = " + std::to_string(page) +
                  " is outside [0, " + std::to_string(o.num_pages) + ")");
    }
  }
}

}  // namespace sparkdraft
