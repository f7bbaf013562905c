// The CPU reference of the verifier (contract.md section 8; ops/verify.h).
#pragma once

#include <cstdint>

#include "sparkdraft/ops/verify.h"

namespace sparkdraft::cpu {

// Verifies every row of p (p.check() first). The vocabulary is processed in
// slices of `slice` ids (0: one slice), each producing the partials of
// ops/verify.h stage (a), combined in the fixed tree of contract.md section 6: the
// bits do not depend on `slice` (the tests check it). `threads` rows run at once.
void verify(const ops::VerifyParams& p, int64_t slice = 0, int threads = 1);

}  // namespace sparkdraft::cpu
