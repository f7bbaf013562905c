// The exit statuses of the sparkdraft tool: one table, printed by
// `sparkdraft --help` and tested one by one (tests/cli). Only the tool maps
// errors to statuses; the library throws typed errors (sparkdraft/error.h).
#pragma once

#include <string>

namespace sparkdraft::cli {

enum ExitStatus : int {
  kExitOk = 0,
  kExitDifference = 1,   // check: a difference was found
  kExitUsage = 2,        // bad command line: unknown flag, bad or out-of-range value
  kExitBadInput = 3,     // bad checkpoint or config (missing, malformed, NaN/inf weights, ...)
  kExitUnavailable = 4,  // needs the CUDA backend or a GPU that is absent
  kExitIo = 5,           // file system: output exists (no --force), cannot create or write
  kExitDevice = 6,       // a CUDA / NCCL call failed
  kExitInternal = 7,     // an unexpected error (a bug: please report it)
};

struct ExitStatusInfo {
  int code;
  const char* meaning;
};

inline constexpr ExitStatusInfo kExitStatuses[] = {
    {kExitOk, "success"},
    {kExitDifference, "check found a difference"},
    {kExitUsage, "bad command line (unknown flag, bad or out-of-range value)"},
    {kExitBadInput, "bad checkpoint or config (missing, malformed, NaN/inf weights, ...)"},
    {kExitUnavailable, "needs the CUDA backend or a CUDA GPU, and this build or machine has none"},
    {kExitIo, "file system error (output exists without --force, cannot create or write)"},
    {kExitDevice, "a CUDA / NCCL call failed"},
    {kExitInternal, "unexpected internal error"},
};

inline std::string exit_status_table() {
  std::string s = "Exit statuses:\n";
  for (const auto& e : kExitStatuses) s += "  " + std::to_string(e.code) + "  " + e.meaning + "\n";
  return s;
}

}  // namespace sparkdraft::cli
