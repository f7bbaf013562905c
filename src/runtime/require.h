// The checks at the API boundary shared by validate_propose / validate_options
// (validate.cpp) and validate_verify (verify.cpp): one refusal per bad input, an
// InvalidArgument naming the row and the field.
#pragma once

#include <cstdint>
#include <string>

#include "sparkdraft/error.h"

namespace sparkdraft::runtime_detail {

inline void require(bool ok, const std::string& what) {
  if (!ok) throw InvalidArgument(what);
}

// An anchor position a whose block of `span` positions a .. a + span - 1 must lie below
// `limit`: a negative a is refused as such, a too large one with its bound (`why`: which
// bound). Written so that no sum can overflow (a may be INT64_MAX).
inline void require_anchor_position(int64_t a, int64_t span, int64_t limit, const std::string& row,
                                    const std::string& why) {
  require(a >= 0, row + "anchor position " + std::to_string(a) + " is negative");
  require(a <= limit - span, row + "anchor position " + std::to_string(a) + " + block " +
                                 std::to_string(span) + " exceeds the " + std::to_string(limit) +
                                 " positions" + why);
}

}  // namespace sparkdraft::runtime_detail
