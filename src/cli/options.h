// Option validators shared by the subcommands: every value is checked when the
// command line is parsed, so a bad one is a usage error (exit status 2) before
// anything runs or prints.
#pragma once

#include <charconv>
#include <cstdint>
#include <string>

#include <CLI/CLI.hpp>

namespace sparkdraft::cli {

// A decimal integer in [0, 2^64 - 1]: "-1" and values above 2^64 - 1 are
// refused (CLI11 would otherwise saturate them to one seed).
inline CLI::Validator uint64_value() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        uint64_t v = 0;
        const char* end = s.data() + s.size();
        if (s.empty() || s.find_first_not_of("0123456789") != std::string::npos)
          return "'" + s + "' is not a non-negative decimal integer";
        const auto r = std::from_chars(s.data(), end, v);
        if (r.ec == std::errc::result_out_of_range) return "'" + s + "' exceeds 2^64 - 1";
        if (r.ec != std::errc() || r.ptr != end) return "'" + s + "' is not a decimal integer";
        return "";
      },
      "UINT64");
}

// A power of two in [1, max] (the vocab-parallel ranks).
inline CLI::Validator power_of_two(int max) {
  return CLI::Validator(
      [max](std::string& s) -> std::string {
        int v = 0;
        const auto r = std::from_chars(s.data(), s.data() + s.size(), v);
        if (r.ec != std::errc() || r.ptr != s.data() + s.size() || v < 1 || v > max ||
            (v & (v - 1)))
          return "tp " + s + " must be a power of two in [1, " + std::to_string(max) + "]";
        return "";
      },
      "POW2");
}

// A path that is not the empty string.
inline CLI::Validator non_empty(const std::string& hint) {
  return CLI::Validator(
      [hint](std::string& s) -> std::string { return s.empty() ? "must not be empty" + hint : ""; },
      "");
}

// --allow-nonfinite-weights, on every command that loads a checkpoint.
inline void add_allow_nonfinite(CLI::App* sub, bool& flag) {
  sub->add_flag("--allow-nonfinite-weights", flag,
                "Load a checkpoint even when a tensor holds NaN or infinity (refused by default, "
                "naming the tensor and the first bad index)");
}

}  // namespace sparkdraft::cli
