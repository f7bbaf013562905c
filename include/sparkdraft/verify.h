// The lossless verifier (contract.md section 8): the host API beside propose.
//
// One call verifies the drafts of `num_rows` rows against the target's logits:
// per row it accepts k of the N draft tokens (standard speculative sampling or
// block verification) and emits one more token, so that the emitted sequence is
// distributed as the target's own samples. The bits are the same on every
// backend, batch composition and vocabulary split. Rows whose cache slot is -1
// are padding: nothing is read or written for them.
#pragma once

#include <cstdint>

#include "sparkdraft/config.h"
#include "sparkdraft/core/bf16.h"

namespace sparkdraft {

struct DraftOptions;

enum class VerifyMethod { standard, block };
enum class LogitsDType { bf16, f32 };

const char* to_string(VerifyMethod m);
const char* to_string(LogitsDType d);

// One verify call. N = the config's block_size, V = its vocab_size. Host pointers
// for DraftBackend::verify (device pointers for cuda::CudaDraft::verify_device).
struct VerifyBatch {
  int num_rows = 0;
  const int64_t* draft_tokens = nullptr;      // [rows, N]  (propose's out.draft_tokens)
  const int64_t* anchor_positions = nullptr;  // [rows]     a, as given to propose
  const int64_t* seeds = nullptr;             // [rows]
  const float* temperatures = nullptr;        // [rows] >= 0, finite
  const int32_t* top_k = nullptr;             // [rows] 0 = off; nullptr = off for every row
  const float* top_p = nullptr;               // [rows] in (0, 1], 1 = off; nullptr = off
  // [rows] n_r in [0, N]: verify drafts x_0 .. x_{n_r - 1} only (the adaptive length of
  // contract.md 8.5; the bonus is drawn at position n_r); nullptr = N for every row.
  const int32_t* lengths = nullptr;
  const int64_t* cache_slots = nullptr;  // [rows] row of the draft-logits cache, -1 = padding
  const bf16* draft_logits = nullptr;    // [cache_slots, N, V] (propose's out.draft_logits)
  const void* target_logits = nullptr;   // [rows, N + 1, V] in target_dtype
  LogitsDType target_dtype = LogitsDType::bf16;
  VerifyMethod method = VerifyMethod::standard;
};

struct VerifyOutputs {
  int32_t* num_accepted = nullptr;  // [rows] k in [0, n_r]; padding rows untouched
  int64_t* tokens = nullptr;  // [rows, N + 1]: the k accepted drafts, the emitted token, then -1
};

// Refuses bad input at the API boundary (InvalidArgument naming the row and the
// field): num_rows in [1, max_reqs], every required array given, slots in
// [-1, cache_slots) and no slot used twice, and for every non-padding row: draft
// tokens in [0, V), a temperature finite and >= 0, top_k >= 0, top_p in (0, 1], a
// length in [0, N],
// and an anchor position a >= 0 with a + N within the options' positions and
// at most 2^60 (the verifier's key space, section 8.4). Reads only the host arrays
// named above (not the logits).
void validate_verify(const ModelConfig& c, const DraftOptions& o, const VerifyBatch& b);

}  // namespace sparkdraft
