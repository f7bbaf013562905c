// The CPU reference of the confidence head (contract.md section 9; ops/confidence.h).
#pragma once

#include "sparkdraft/ops/confidence.h"

namespace sparkdraft::cpu {

// Every value of p (p.check() first); `threads` (row, step) values at once.
void confidence(const ops::ConfidenceParams& p, int threads = 1);

}  // namespace sparkdraft::cpu
