// Option validators and option helpers shared by the subcommands: every value is
// checked when the command line is parsed, so a bad one is a usage error (exit
// status 2) before anything runs or prints.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <string>
#include <type_traits>

#include <CLI/CLI.hpp>

#include "sparkdraft/checkpoint.h"
#include "sparkdraft/scenario.h"

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

// --allow-unused-weights, on every command that loads a checkpoint.
inline void add_allow_unused(CLI::App* sub, bool& flag) {
  sub->add_flag("--allow-unused-weights", flag,
                "Load a checkpoint even when it holds draft tensors its config switches off "
                "(e.g. q_norm weights with qk_norm false; refused by default, naming the tensor "
                "and the switch)");
}

// The loading flags of every command that loads a checkpoint, and their LoadOptions.
struct LoadFlags {
  bool allow_nonfinite = false, allow_unused = false;
  std::string target_model;
  LoadOptions options() const {
    LoadOptions lo;
    lo.allow_nonfinite = allow_nonfinite;
    lo.allow_unused_weights = allow_unused;
    lo.target_dir = target_model;
    return lo;
  }
};

// --allow-nonfinite-weights, --allow-unused-weights and --target-model.
inline void add_load_flags(CLI::App* sub, LoadFlags& f) {
  add_allow_nonfinite(sub, f.allow_nonfinite);
  add_allow_unused(sub, f.allow_unused);
  sub->add_option("--target-model", f.target_model,
                  "The target model's directory (its config.json and safetensors, e.g. a Hugging "
                  "Face snapshot): a speculators checkpoint omits the verifier's "
                  "embed_tokens.weight and, with the full vocabulary, lm_head.weight, and they are "
                  "read from there (only those; the draft's own always win)")
      ->check(non_empty(""));
}

// A finite number: CLI::Range compares, and NaN fails no comparison, so "nan" would pass it.
inline CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& s) -> std::string {
        double v = 0;
        if (!CLI::detail::lexical_cast(s, v)) return "'" + s + "' is not a number";
        return std::isfinite(v) ? "" : "'" + s + "' is not a finite number";
      },
      "");
}

// An option whose value must lie in [lo, hi] (and, for a floating-point value, be finite);
// --help shows its default.
template <class T, class Bound>
CLI::Option* add_bounded(CLI::App* sub, const std::string& name, T& value, const std::string& help,
                         Bound lo, Bound hi) {
  CLI::Option* o = sub->add_option(name, value, help);
  if constexpr (std::is_floating_point_v<T>) o->check(finite_number());
  return o->check(CLI::Range(lo, hi))->capture_default_str();
}

// --seed: a uint64 (uint64_value); --help shows its default.
inline CLI::Option* add_seed(CLI::App* sub, uint64_t& seed, const std::string& help) {
  return sub->add_option("--seed", seed, help)->check(uint64_value())->capture_default_str();
}

// The scenario of --requests (request ids 0 .. requests - 1), --rounds and --seed.
inline ScenarioOptions scenario_of(int requests, int rounds, uint64_t seed) {
  ScenarioOptions s;
  s.request_ids.clear();
  for (int r = 0; r < requests; ++r) s.request_ids.push_back(r);
  s.rounds = rounds;
  s.seed = seed;
  return s;
}

}  // namespace sparkdraft::cli
