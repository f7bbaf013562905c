// The verifier's API boundary (contract.md section 8): validation, the op
// parameters of one call, and DraftBackend::verify on host buffers.
#include "sparkdraft/verify.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <thread>

#include "runtime/require.h"
#include "sparkdraft/cpu/verify.h"
#include "sparkdraft/draft.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

using runtime_detail::require;

}  // namespace

const char* to_string(VerifyMethod m) { return m == VerifyMethod::block ? "block" : "standard"; }
const char* to_string(LogitsDType d) { return d == LogitsDType::f32 ? "f32" : "bf16"; }

void validate_verify(const ModelConfig& c, const DraftOptions& o, const VerifyBatch& b) {
  require(b.num_rows >= 1 && b.num_rows <= o.max_reqs,
          "verify: num_rows " + std::to_string(b.num_rows) +
              " is outside [1, max_reqs = " + std::to_string(o.max_reqs) + "]");
  require(b.draft_tokens && b.anchor_positions && b.seeds && b.temperatures && b.cache_slots &&
              b.draft_logits && b.target_logits,
          "verify: draft_tokens, anchor_positions, seeds, temperatures, cache_slots, "
          "draft_logits and target_logits must all be given");
  require(b.method == VerifyMethod::standard || b.method == VerifyMethod::block,
          "verify: unknown method " + std::to_string(static_cast<int>(b.method)));
  require(b.target_dtype == LogitsDType::bf16 || b.target_dtype == LogitsDType::f32,
          "verify: unknown target dtype " + std::to_string(static_cast<int>(b.target_dtype)));
  const int N = c.block_size;
  // Positions a .. a + N key the streams: a + N within the block table and below 2^60.
  const int64_t limit = std::min(o.max_positions(), kVerifyPositionLimit);
  std::set<int64_t> used_slots;
  for (int r = 0; r < b.num_rows; ++r) {
    const std::string row = "verify: row " + std::to_string(r) + ": ";
    const int64_t slot = b.cache_slots[r];
    require(slot >= -1 && slot < o.cache_slots, row + "cache slot " + std::to_string(slot) +
                                                    " is outside [-1, " +
                                                    std::to_string(o.cache_slots) + ")");
    if (slot < 0) continue;  // padding row: nothing is read or written for it
    require(used_slots.insert(slot).second,
            row + "cache slot " + std::to_string(slot) + " is used by two rows");
    const float temp = b.temperatures[r];
    require(std::isfinite(temp) && temp >= 0.0f,
            row + "temperature " + std::to_string(temp) + " must be finite and >= 0");
    if (b.top_k)
      require(b.top_k[r] >= 0,
              row + "top_k " + std::to_string(b.top_k[r]) + " must be >= 0 (0 = off)");
    if (b.top_p)
      require(b.top_p[r] > 0.0f && b.top_p[r] <= 1.0f,
              row + "top_p " + std::to_string(b.top_p[r]) + " must be in (0, 1] (1 = off)");
    if (b.lengths)
      require(b.lengths[r] >= 0 && b.lengths[r] <= N,
              row + "length " + std::to_string(b.lengths[r]) +
                  " is outside [0, N = " + std::to_string(N) + "]");
    const int64_t a = b.anchor_positions[r];
    runtime_detail::require_anchor_position(a, N, limit, row, " a verify may key");
    for (int j = 0; j < N; ++j) {
      const int64_t x = b.draft_tokens[static_cast<int64_t>(r) * N + j];
      require(x >= 0 && x < c.vocab_size, row + "draft token " + std::to_string(j) + " = " +
                                              std::to_string(x) + " is outside [0, " +
                                              std::to_string(c.vocab_size) + ")");
    }
  }
}

ops::VerifyParams ops::verify_params(const ModelConfig& c, const DraftOptions& o,
                                     const VerifyBatch& b, const VerifyOutputs& out) {
  ops::VerifyParams p;
  p.rows = b.num_rows;
  p.n = c.block_size;
  p.vocab = c.vocab_size;
  p.cache_rows = o.cache_slots;
  p.draft_tokens = b.draft_tokens;
  p.anchor_positions = b.anchor_positions;
  p.seeds = b.seeds;
  p.temperatures = b.temperatures;
  p.top_k = b.top_k;
  p.top_p = b.top_p;
  p.lengths = b.lengths;
  p.cache_slots = b.cache_slots;
  p.draft_logits = b.draft_logits;
  p.target_logits = b.target_logits;
  p.target_dtype = b.target_dtype;
  p.method = b.method;
  p.num_accepted = out.num_accepted;
  p.tokens = out.tokens;
  return p;
}

void DraftBackend::verify(const VerifyBatch& b, const VerifyOutputs& out) {
  const ModelConfig& c = config();
  validate_verify(c, options(), b);
  require(out.num_accepted && out.tokens, "verify: num_accepted and tokens must be given");
  const ops::VerifyParams p = ops::verify_params(c, options(), b, out);
  // The vocabulary-parallel form: one slice per TP rank (validate_options: tp
  // divides V), combined in the fixed tree; the bits are TP 1's.
  const int threads = options().threads > 0 ? options().threads
                                            : static_cast<int>(std::thread::hardware_concurrency());
  cpu::verify(p, c.vocab_size / options().tp, threads);
}

}  // namespace sparkdraft
