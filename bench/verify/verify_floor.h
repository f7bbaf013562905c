// The floor of one verify call (contract.md section 8; `sparkdraft bench verify`):
// the bytes it must read at least, from the shape alone (host code, no GPU).
//   target_logits  rows x (N + 1) x V in the target's dtype (2 bytes bf16, 4 fp32)
//   draft_logits   the draft-logits cache rows of the call: rows x N x V bf16
// Not counted (small next to these): the tokens, seeds, temperatures and slots, the
// outputs, the kernels' partials. The bench divides the total by the copy bandwidth
// it measures.
#pragma once

#include "sparkdraft/verify.h"

namespace sparkdraft::bench {

struct VerifyFloorBytes {
  double target_logits = 0;
  double draft_logits = 0;
  double total() const { return target_logits + draft_logits; }
};

VerifyFloorBytes verify_floor_bytes(int rows, int n, int vocab, LogitsDType target_dtype);

}  // namespace sparkdraft::bench
