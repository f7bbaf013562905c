// The floor of one verify call (verify_floor.h).
#include "verify/verify_floor.h"

namespace sparkdraft::bench {

VerifyFloorBytes verify_floor_bytes(int rows, int n, int vocab, LogitsDType target_dtype) {
  const double r = rows, v = vocab;
  const double target_bytes = target_dtype == LogitsDType::f32 ? 4.0 : 2.0;
  VerifyFloorBytes f;
  f.target_logits = r * (n + 1) * v * target_bytes;
  f.draft_logits = r * n * v * 2.0;
  return f;
}

}  // namespace sparkdraft::bench
