// The backend-against-backend comparisons of `sparkdraft check` (check.h).
#include <cmath>
#include <cstring>
#include <sstream>
#include <utility>

#include "sparkdraft/check.h"
#include "sparkdraft/error.h"
#include "sparkdraft/plan.h"

namespace sparkdraft {

bool CheckReport::ok() const {
  for (const auto& l : lines)
    if (!l.equal) return false;
  return !lines.empty();
}

std::string CheckReport::text() const {
  std::ostringstream os;
  size_t bad = 0;
  for (const auto& l : lines) {
    os << (l.equal ? "  equal     " : "  DIFFERENT ") << l.what;
    if (!l.equal) {
      os << "  (" << l.detail << ")";
      ++bad;
    }
    os << "\n";
  }
  os << (bad == 0 ? "check: all " : "check: ") << (lines.size() - bad) << " of " << lines.size()
     << " comparisons bit for bit equal";
  if (!mode.empty()) os << " (" << mode << ")";
  os << "\n";
  return os.str();
}

namespace {

// Element by element: the first place where same(found, expected) fails, with both
// values' bits in hex; `index` names the place ("index" or "step").
template <class T, class Bits, class Same>
CheckLine compare_bits(const std::string& what, const std::vector<T>& found,
                       const std::vector<T>& expected, const char* index, Bits bits, Same same) {
  CheckLine line{what, true, ""};
  if (found.size() != expected.size()) {
    line.equal = false;
    line.detail =
        "sizes " + std::to_string(found.size()) + " vs " + std::to_string(expected.size());
    return line;
  }
  for (size_t i = 0; i < found.size(); ++i)
    if (!same(found[i], expected[i])) {
      std::ostringstream os;
      os << index << " " << i << ": found 0x" << std::hex << bits(found[i]) << " expected 0x"
         << bits(expected[i]);
      line.equal = false;
      line.detail = os.str();
      break;
    }
  return line;
}

}  // namespace

CheckLine compare_bf16(const std::string& what, const std::vector<bf16>& found,
                       const std::vector<bf16>& expected) {
  return compare_bits(
      what, found, expected, "index", [](bf16 x) { return x.bits; },
      [](bf16 x, bf16 y) { return x.bits == y.bits; });
}

namespace {

CheckLine compare_tokens(const std::string& what, const std::vector<int64_t>& found,
                         const std::vector<int64_t>& expected) {
  CheckLine line{what, found == expected, ""};
  if (!line.equal)
    for (size_t i = 0; i < found.size() && i < expected.size(); ++i)
      if (found[i] != expected[i]) {
        line.detail = "step " + std::to_string(i) + ": found " + std::to_string(found[i]) +
                      " expected " + std::to_string(expected[i]);
        break;
      }
  return line;
}

// fp32 values bit for bit, a NaN by NaN-ness (contract.md section 3).
CheckLine compare_f32(const std::string& what, const std::vector<float>& found,
                      const std::vector<float>& expected) {
  auto bits = [](float x) {
    uint32_t b;
    std::memcpy(&b, &x, 4);
    return b;
  };
  return compare_bits(what, found, expected, "step", bits, [&](float f, float e) {
    return (std::isnan(f) && std::isnan(e)) || bits(f) == bits(e);
  });
}

}  // namespace

CheckSide run_check_side(DraftBackend& backend, const ScenarioOptions& s) {
  CheckSide side;
  side.rounds = run_scenario(backend, s);
  for (int l = 0; l < backend.config().num_layers; ++l) side.kv.push_back(backend.kv_cache(l));
  return side;
}

void compare_check_sides(CheckReport& report, const CheckSide& expected, const CheckSide& found,
                         const std::string& names) {
  for (size_t round = 0; round < expected.rounds.size(); ++round)
    for (size_t i = 0; i < expected.rounds[round].drafts.size(); ++i) {
      const RequestDraft& de = expected.rounds[round].drafts[i];
      const RequestDraft& df = found.rounds[round].drafts[i];
      const std::string where =
          "round " + std::to_string(round) + " request " + std::to_string(de.request_id);
      report.lines.push_back(compare_tokens(where + " tokens: " + names, df.tokens, de.tokens));
      report.lines.push_back(compare_bf16(where + " draft logits: " + names, df.logits, de.logits));
      if (!de.confidences.empty() || !df.confidences.empty())
        report.lines.push_back(
            compare_f32(where + " confidences: " + names, df.confidences, de.confidences));
    }
  for (size_t l = 0; l < expected.kv.size(); ++l)
    report.lines.push_back(compare_bf16("KV cache layer " + std::to_string(l) + ": " + names,
                                        found.kv[l], expected.kv[l]));
}

CheckReport check_tp_invariance(std::shared_ptr<const Checkpoint> ckpt, const ScenarioOptions& s,
                                int tp_size) {
  if (tp_size < 2)
    throw InvalidArgument("check_tp_invariance: compares TP n >= 2 with TP 1, got tp " +
                          std::to_string(tp_size));
  DraftOptions o = scenario_draft_options(ckpt->config(), s);
  o.threads = 0;
  CheckSide one, many;
  {
    auto tp1 = make_cpu_backend(ckpt, o);
    one = run_check_side(*tp1, s);
  }
  o.tp = tp_size;
  CheckReport report;
  {
    auto tpn = make_cpu_backend(ckpt, o);
    const PlanPart& layers = tpn->plan().at("layers");
    report.mode = "CPU backend, TP " + std::to_string(tp_size) + " vs TP 1; layers " +
                  layers.variant + ": " + layers.reason;
    many = run_check_side(*tpn, s);
  }
  compare_check_sides(report, one, many, "cpu tp 1 vs cpu tp " + std::to_string(tp_size));
  return report;
}

}  // namespace sparkdraft
