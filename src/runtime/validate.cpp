// Input checks at the API boundary (SPEC section 4: bad input is refused with a
// clear error; no kernel runs on it). Shared by every backend.
#include <cmath>
#include <set>
#include <string>

#include "sparkdraft/draft.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

[[noreturn]] void refuse(const std::string& what) { throw InvalidArgument(what); }

void require(bool ok, const std::string& what) {
  if (!ok) refuse(what);
}

}  // namespace

void validate_context(const ModelConfig& c, const DraftOptions& o, const ContextBatch& b) {
  require(b.num_tokens >= 0, "store_context: num_tokens must be >= 0");
  if (b.num_tokens == 0) return;
  require(b.hidden && b.positions && b.slots,
          "store_context: hidden, positions and slots must all be given");
  const int64_t slots = static_cast<int64_t>(o.num_pages) * o.page_size;
  for (int t = 0; t < b.num_tokens; ++t) {
    const int64_t pos = b.positions[t], slot = b.slots[t];
    require(pos >= 0 && pos < o.max_positions(),
            "store_context: token " + std::to_string(t) + " position " + std::to_string(pos) +
                " is outside [0, " + std::to_string(o.max_positions()) + ")");
    require(slot >= -1 && slot < slots, "store_context: token " + std::to_string(t) + " slot " +
                                            std::to_string(slot) + " is outside [-1, " +
                                            std::to_string(slots) + ")");
  }
  (void)c;
}

void validate_propose(const ModelConfig& c, const DraftOptions& o, const ProposeBatch& b) {
  require(b.num_rows >= 1 && b.num_rows <= o.max_reqs,
          "propose: num_rows " + std::to_string(b.num_rows) + " is outside [1, max_reqs = " +
              std::to_string(o.max_reqs) + "]");
  require(b.anchor_tokens && b.anchor_positions && b.seeds && b.temperatures && b.cache_slots &&
              b.block_tables,
          "propose: every input array must be given");
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
    require(used_slots.insert(slot).second,
            row + "cache slot " + std::to_string(slot) + " is used by two rows");
    const int64_t tok = b.anchor_tokens[r];
    require(tok >= 0 && tok < c.vocab_size, row + "anchor token " + std::to_string(tok) +
                                                " is outside [0, " +
                                                std::to_string(c.vocab_size) + ")");
    const int64_t a = b.anchor_positions[r];
    require(a >= 0 && a + c.block_size <= o.max_positions(),
            row + "anchor position " + std::to_string(a) + " + block " +
                std::to_string(c.block_size) + " exceeds the block table's " +
                std::to_string(o.max_positions()) + " positions");
    const int pages = static_cast<int>((a + c.block_size + o.page_size - 1) / o.page_size);
    for (int p = 0; p < pages; ++p) {
      const int32_t page = b.block_tables[static_cast<int64_t>(r) * o.max_pages_per_req + p];
      require(page >= 0 && page < o.num_pages,
              row + "block table entry " + std::to_string(p) + " = " + std::to_string(page) +
                  " is outside [0, " + std::to_string(o.num_pages) + ")");
    }
  }
}

}  // namespace sparkdraft
