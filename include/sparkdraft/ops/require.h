// The refusal helpers of the ops' check() functions: one message form for both
// backends, InvalidArgument("<op>: <what>").
#pragma once

#include <string>

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/error.h"
#include "sparkdraft/ops/kinds.h"

namespace sparkdraft::ops {

inline void require(bool ok, const char* op, const std::string& what) {
  if (!ok) throw InvalidArgument(std::string(op) + ": " + what);
}

// eps of a norm: finite and >= 0.
inline void require_eps(float eps, const char* op) {
  require(eps >= 0.0f && eps <= 3.0e38f, op,
          "eps must be finite and >= 0, got " + std::to_string(eps));
}

// A norm weight may be null only with NormGain::none.
inline void require_gain_weight(const bf16* weight, NormGain gain, const char* op,
                                const char* field) {
  require(gain == NormGain::none || weight != nullptr, op,
          std::string(field) + " is null but the norm gain is " + to_string(gain));
}

}  // namespace sparkdraft::ops
