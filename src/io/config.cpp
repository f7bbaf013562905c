// ModelConfig: validation, our own JSON form, and the DeepSpec / HF import.
//
// Why so strict: a silently wrong option (RoPE style, theta, a reduced
// vocabulary) does not crash, it collapses acceptance. So every field is
// checked, our JSON refuses unknown and missing keys, and the HF and speculators
// imports refuse every format they cannot run exactly (DeepSeek-V4 MLA/MoE, the
// fill-in layout in the HF form, tied or biased projections, RoPE scaling).
#include "sparkdraft/config.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "io/file_util.h"
#include "io/hf_config.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

using json = nlohmann::json;
constexpr int kFormatVersion = 1;
constexpr int64_t kIntMax = std::numeric_limits<int>::max();

std::string fmt_double(double v) {
  std::ostringstream s;
  s.precision(9);
  s << v;
  return s.str();
}

std::string fmt_ids(const std::vector<int>& ids) {
  std::string s = "[";
  for (size_t i = 0; i < ids.size(); ++i) s += (i ? ", " : "") + std::to_string(ids[i]);
  return s + "]";
}

// The shortest decimal that reads back as `f` (1e-06 rather than
// 9.999999974752427e-07), so that our JSON stays readable and exact.
double float_to_json_number(float f) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), f);
  const double d = std::strtod(std::string(buf, res.ptr).c_str(), nullptr);
  return static_cast<float>(d) == f ? d : static_cast<double>(f);
}

// The calibration temperatures as JSON numbers that read back exactly.
nlohmann::json temperatures_json(const ModelConfig& c) {
  nlohmann::json a = nlohmann::json::array();
  for (float t : c.confidence_temperatures) a.push_back(float_to_json_number(t));
  return a;
}

// Typed access to the fields of one JSON object; every error names the field.
class Fields {
 public:
  Fields(const json& j, std::string where) : j_(j), where_(std::move(where)) {}

  bool has(const char* key) const { return j_.contains(key) && !j_.at(key).is_null(); }
  const json& at(const char* key) const {
    if (!has(key)) fail(std::string("missing field '") + key + "'");
    return j_.at(key);
  }
  int64_t integer(const char* key, int64_t lo, int64_t hi = kIntMax) const {
    const json& v = at(key);
    if (!v.is_number_integer())
      fail(std::string("field '") + key + "' must be an integer (got " + io::excerpt(v.dump()) +
           ")");
    int64_t x = 0;
    if (v.is_number_unsigned()) {
      const uint64_t u = v.get<uint64_t>();
      if (u > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()))
        fail(std::string("field '") + key + "' is out of range (got " + io::excerpt(v.dump()) +
             ")");
      x = static_cast<int64_t>(u);
    } else {
      x = v.get<int64_t>();
    }
    if (x < lo)
      fail(std::string("field '") + key + "' must be >= " + std::to_string(lo) + " (got " +
           std::to_string(x) + ")");
    if (x > hi)
      fail(std::string("field '") + key + "' must be <= " + std::to_string(hi) + " (got " +
           std::to_string(x) + ")");
    return x;
  }
  double number(const char* key) const {
    const json& v = at(key);
    if (!v.is_number())
      fail(std::string("field '") + key + "' must be a number (got " + io::excerpt(v.dump()) + ")");
    return v.get<double>();
  }
  float number_f32(const char* key) const {
    const double d = number(key);
    if (std::fabs(d) > std::numeric_limits<float>::max())
      fail(std::string("field '") + key + "' is out of fp32 range (got " + fmt_double(d) + ")");
    return static_cast<float>(d);
  }
  bool boolean(const char* key) const {
    const json& v = at(key);
    if (!v.is_boolean())
      fail(std::string("field '") + key + "' must be true or false (got " + io::excerpt(v.dump()) +
           ")");
    return v.get<bool>();
  }
  std::string string(const char* key) const {
    const json& v = at(key);
    if (!v.is_string())
      fail(std::string("field '") + key + "' must be a string (got " + io::excerpt(v.dump()) + ")");
    return v.get<std::string>();
  }
  std::vector<int> int_list(const char* key) const {
    const json& v = at(key);
    if (!v.is_array())
      fail(std::string("field '") + key + "' must be a list of integers (got " +
           io::excerpt(v.dump()) + ")");
    std::vector<int> out;
    for (const json& e : v) {
      if (!e.is_number_integer() || e.get<int64_t>() < std::numeric_limits<int>::min() ||
          e.get<int64_t>() > kIntMax)
        fail(std::string("field '") + key + "' must be a list of integers (got " +
             io::excerpt(v.dump()) + ")");
      out.push_back(static_cast<int>(e.get<int64_t>()));
    }
    return out;
  }
  // A list of numbers, each rounded to fp32 (validate() judges the values).
  std::vector<float> f32_list(const char* key) const {
    const json& v = at(key);
    std::vector<float> out;
    if (v.is_array())
      for (const json& e : v) {
        if (!e.is_number() || std::fabs(e.get<double>()) > std::numeric_limits<float>::max()) break;
        out.push_back(static_cast<float>(e.get<double>()));
      }
    if (!v.is_array() || out.size() != v.size())
      fail(std::string("field '") + key + "' must be a list of fp32 numbers (got " +
           io::excerpt(v.dump()) + ")");
    return out;
  }
  [[noreturn]] void fail(const std::string& msg) const { throw ConfigError(where_ + ": " + msg); }

 private:
  const json& j_;
  std::string where_;
};

// The names of the enums in config.json, in the order a refusal lists them:
// to_string and parse_enum read the same table.
template <class E>
struct EnumName {
  E value;
  const char* name;
};
constexpr EnumName<NormGain> kNormGainNames[] = {{NormGain::weight, "weight"},
                                                 {NormGain::one_plus_weight, "one_plus_weight"},
                                                 {NormGain::none, "none"}};
constexpr EnumName<LayerStyle> kLayerStyleNames[] = {{LayerStyle::pre_norm, "pre_norm"},
                                                     {LayerStyle::sandwich, "sandwich"}};
constexpr EnumName<ResidualKind> kResidualKindNames[] = {
    {ResidualKind::plain, "plain"}, {ResidualKind::norm_preserving, "norm_preserving"}};
constexpr EnumName<StreamDType> kStreamDTypeNames[] = {{StreamDType::bf16, "bf16"},
                                                       {StreamDType::f32, "f32"}};
constexpr EnumName<RopeStyle> kRopeStyleNames[] = {{RopeStyle::neox, "neox"},
                                                   {RopeStyle::gptj, "gptj"}};
constexpr EnumName<MarkovHeadType> kMarkovHeadTypeNames[] = {{MarkovHeadType::vanilla, "vanilla"},
                                                             {MarkovHeadType::gated, "gated"},
                                                             {MarkovHeadType::rnn, "rnn"}};

template <class E, size_t N>
const char* name_in(const EnumName<E> (&names)[N], E value) {
  for (const EnumName<E>& n : names)
    if (n.value == value) return n.name;
  return "?";
}

template <class E, size_t N>
E parse_enum(const Fields& f, const char* key, const EnumName<E> (&names)[N]) {
  const std::string s = f.string(key);
  std::string accepted;
  for (const EnumName<E>& n : names) {
    if (s == n.name) return n.value;
    accepted += (accepted.empty() ? "\"" : ", \"") + std::string(n.name) + "\"";
  }
  f.fail(std::string("field '") + key + "' must be one of " + accepted + " (got \"" +
         io::excerpt(s) + "\")");
}

// The int fields of our format that are read and written as they are, in the
// order they are read, with the least value each accepts.
struct IntField {
  const char* name;
  int ModelConfig::*member;
  int64_t min;
};
constexpr IntField kIntFields[] = {
    {"hidden_size", &ModelConfig::hidden_size, 1},
    {"num_layers", &ModelConfig::num_layers, 1},
    {"num_heads", &ModelConfig::num_heads, 1},
    {"num_kv_heads", &ModelConfig::num_kv_heads, 1},
    {"head_dim", &ModelConfig::head_dim, 1},
    {"intermediate_size", &ModelConfig::intermediate_size, 1},
    {"vocab_size", &ModelConfig::vocab_size, 1},
    {"markov_rank", &ModelConfig::markov_rank, 0},
    {"block_size", &ModelConfig::block_size, 1},
    {"target_hidden_size", &ModelConfig::target_hidden_size, 1},
};

const std::set<std::string>& our_keys() {
  static const std::set<std::string> keys = {"format",
                                             "format_version",
                                             "architecture",
                                             "hidden_size",
                                             "num_layers",
                                             "num_heads",
                                             "num_kv_heads",
                                             "head_dim",
                                             "intermediate_size",
                                             "vocab_size",
                                             "markov_rank",
                                             "block_size",
                                             "target_hidden_size",
                                             "target_layer_ids",
                                             "mask_token_id",
                                             "max_position_embeddings",
                                             "norm_gain",
                                             "rms_norm_eps",
                                             "layer_style",
                                             "residual_kind",
                                             "stream_dtype",
                                             "context_layer_norm",
                                             "rope_style",
                                             "rope_theta",
                                             "qk_norm",
                                             "v_norm",
                                             "output_gate",
                                             "o_norm",
                                             "o_norm_weight",
                                             "layer_attention",
                                             "logit_multiplier",
                                             "logit_soft_cap",
                                             "sample_from_anchor"};
  return keys;
}

// Keys of our JSON that may be absent (configs written before they existed): the
// confidence head's flags, default off; draft_vocab_size, default the full vocabulary;
// markov_topk, default 0; markov_head_type, default "vanilla".
const std::set<std::string>& our_optional_keys() {
  static const std::set<std::string> keys = {
      "enable_confidence_head", "confidence_head_with_markov", "draft_vocab_size", "markov_topk",
      "markov_bias_topk",       "confidence_temperatures",     "markov_head_type"};
  return keys;
}

// Fields whose presence marks a DeepSeek-V4 (MLA / MoE / mHC / MTP) draft.
constexpr const char* kDeepSeekV4Fields[] = {
    "dspark_target_layer_ids",  "kv_lora_rank", "q_lora_rank", "n_routed_experts",
    "num_nextn_predict_layers", "n_mtp_layers", "hc_mult"};

}  // namespace

const char* to_string(NormGain g) { return name_in(kNormGainNames, g); }
const char* to_string(LayerStyle s) { return name_in(kLayerStyleNames, s); }
const char* to_string(ResidualKind k) { return name_in(kResidualKindNames, k); }
const char* to_string(StreamDType d) { return name_in(kStreamDTypeNames, d); }
const char* to_string(RopeStyle s) { return name_in(kRopeStyleNames, s); }
const char* to_string(MarkovHeadType t) { return name_in(kMarkovHeadTypeNames, t); }

void ModelConfig::validate() const {
  auto bad = [](const std::string& field, const std::string& why) {
    throw ConfigError("invalid config: " + field + " " + why);
  };
  auto positive = [&](const char* field, int64_t v) {
    if (v <= 0) bad(field, "must be > 0 (got " + std::to_string(v) + ")");
  };
  positive("hidden_size", hidden_size);
  positive("num_layers", num_layers);
  positive("num_heads", num_heads);
  positive("num_kv_heads", num_kv_heads);
  positive("head_dim", head_dim);
  positive("intermediate_size", intermediate_size);
  positive("vocab_size", vocab_size);
  positive("target_hidden_size", target_hidden_size);
  positive("max_position_embeddings", max_position_embeddings);
  if (num_heads % num_kv_heads != 0)
    bad("num_heads", "(" + std::to_string(num_heads) + ") must be a multiple of num_kv_heads (" +
                         std::to_string(num_kv_heads) + ")");
  if (head_dim % 2 != 0)
    bad("head_dim", "must be even for RoPE (got " + std::to_string(head_dim) + ")");
  // 0 = no Markov head: no markov_w1/w2 tensors, the step logits are the base
  // logits. Any rank > 0 is valid; the fused Markov kernels need a power of two
  // and the plan falls back to the eager loop otherwise.
  if (markov_rank < 0) bad("markov_rank", "must be >= 0 (got " + std::to_string(markov_rank) + ")");
  if (block_size < 1 || block_size > 64)
    bad("block_size", "must be in [1, 64] (got " + std::to_string(block_size) + ")");
  if (target_layer_ids.empty()) bad("target_layer_ids", "must list at least one target layer");
  for (size_t i = 0; i < target_layer_ids.size(); ++i) {
    if (target_layer_ids[i] < -1)
      bad("target_layer_ids",
          "entries must be >= -1 (-1 = the embedding output), got " + fmt_ids(target_layer_ids));
    if (i > 0 && target_layer_ids[i] <= target_layer_ids[i - 1])
      bad("target_layer_ids",
          "must be strictly increasing (got " + fmt_ids(target_layer_ids) + ")");
  }
  if (mask_token_id < 0 || mask_token_id >= vocab_size)
    bad("mask_token_id", "must be in [0, vocab_size = " + std::to_string(vocab_size) + ") (got " +
                             std::to_string(mask_token_id) + ")");
  if (!(std::isfinite(rms_norm_eps) && rms_norm_eps > 0))
    bad("rms_norm_eps", "must be finite and > 0 (got " + fmt_double(rms_norm_eps) + ")");
  // theta < 1 makes RoPE frequencies theta^(-2i/d) above one radian a position, and
  // a tiny (denormal) theta makes them infinite: every angle NaN, every token 0.
  if (!(std::isfinite(rope_theta) && rope_theta >= 1.0))
    bad("rope_theta", "must be finite and >= 1 (got " + fmt_double(rope_theta) + ")");
  if (!layer_attention.empty() && static_cast<int>(layer_attention.size()) != num_layers)
    bad("layer_attention", "must list one entry per layer (" + std::to_string(num_layers) +
                               "), got " + std::to_string(layer_attention.size()));
  for (size_t l = 0; l < layer_attention.size(); ++l)
    if (layer_attention[l].window < 0)
      bad("layer_attention", "window of layer " + std::to_string(l) +
                                 " must be >= 0, 0 = full attention (got " +
                                 std::to_string(layer_attention[l].window) + ")");
  if (logit_multiplier && !(std::isfinite(*logit_multiplier) && *logit_multiplier != 0.0f))
    bad("logit_multiplier",
        "must be finite and non-zero (got " + fmt_double(*logit_multiplier) + ")");
  if (logit_soft_cap && !(std::isfinite(*logit_soft_cap) && *logit_soft_cap > 0.0f))
    bad("logit_soft_cap", "must be finite and > 0 (got " + fmt_double(*logit_soft_cap) + ")");
  // Every product the ops take as an `int` must fit one.
  auto fits = [&](const char* what, int64_t v) {
    if (v > kIntMax) bad(what, "= " + std::to_string(v) + " does not fit a 32-bit int");
  };
  fits("num_heads * head_dim", static_cast<int64_t>(num_heads) * head_dim);
  fits("taps * target_hidden_size", static_cast<int64_t>(taps()) * target_hidden_size);
  fits("2 * intermediate_size", 2 * static_cast<int64_t>(intermediate_size));
  if (confidence_head_with_markov && !confidence_head)
    bad("confidence_head_with_markov", "is true but enable_confidence_head is false");
  if (confidence_head_with_markov && markov_rank == 0)
    bad("confidence_head_with_markov", "needs a Markov head (markov_rank is 0)");
  fits("hidden_size + markov_rank (the confidence head's input)",
       static_cast<int64_t>(hidden_size) + markov_rank);
  if (draft_vocab_size < 0 || draft_vocab_size >= vocab_size)
    bad("draft_vocab_size", "must be in [1, vocab_size = " + std::to_string(vocab_size) +
                                ") for a reduced draft vocabulary, or 0 for the full one (got " +
                                std::to_string(draft_vocab_size) + ")");
  if (markov_topk < 0 || markov_topk > vocab_size)
    bad("markov_topk", "must be in [1, vocab_size = " + std::to_string(vocab_size) +
                           "] for the top-k Markov loop, or 0 for the dense one (got " +
                           std::to_string(markov_topk) + ")");
  if (markov_topk > 0 && markov_rank == 0)
    bad("markov_topk", "needs a Markov head (markov_rank is 0)");
  if (markov_topk > 0 && reduced_vocab())
    bad("markov_topk", "with a reduced draft vocabulary (draft_vocab_size " +
                           std::to_string(draft_vocab_size) + ") is not supported");
  if (!confidence_temperatures.empty()) {
    if (!confidence_head)
      bad("confidence_temperatures", "calibrates the confidence head, which is off");
    if (static_cast<int>(confidence_temperatures.size()) != block_size)
      bad("confidence_temperatures", "must hold one temperature per drafted position (block_size " +
                                         std::to_string(block_size) + "), got " +
                                         std::to_string(confidence_temperatures.size()));
    for (size_t i = 0; i < confidence_temperatures.size(); ++i)
      if (!(std::isfinite(confidence_temperatures[i]) && confidence_temperatures[i] > 0.0f))
        bad("confidence_temperatures", "entry " + std::to_string(i) +
                                           " must be finite and > 0 (got " +
                                           fmt_double(confidence_temperatures[i]) + ")");
  }
  if (markov_bias_topk < 0 || markov_bias_topk > vocab_size)
    bad("markov_bias_topk", "must be in [1, vocab_size = " + std::to_string(vocab_size) +
                                "] for the union form of the top-k loop, or 0 (got " +
                                std::to_string(markov_bias_topk) + ")");
  if (markov_bias_topk > 0 && markov_topk == 0)
    bad("markov_bias_topk", "needs the top-k Markov loop (markov_topk > 0)");
  // The gated and rnn heads (contract.md section 13).
  if (markov_head_proj()) {
    const std::string type = std::string("markov_head_type '") + to_string(markov_head_type) + "'";
    if (markov_rank == 0) bad(type, "needs a Markov head (markov_rank is 0)");
    if (markov_topk > 0)
      bad(type, "with the top-k Markov loop (markov_topk " + std::to_string(markov_topk) +
                    ") is not supported");
    if (reduced_vocab())
      bad(type, "with a reduced draft vocabulary (draft_vocab_size " +
                    std::to_string(draft_vocab_size) + ") is not supported");
    fits("the Markov head projection's input width",
         static_cast<int64_t>(hidden_size) + 2 * static_cast<int64_t>(markov_rank));
    fits("the Markov head projection's rows", 3 * static_cast<int64_t>(markov_rank));
  }
}

nlohmann::json config_to_json(const ModelConfig& c) {
  json j;
  j["format"] = "sparkdraft";
  j["format_version"] = kFormatVersion;
  j["architecture"] = c.architecture;
  for (const IntField& k : kIntFields) j[k.name] = c.*k.member;
  j["target_layer_ids"] = c.target_layer_ids;
  j["mask_token_id"] = c.mask_token_id;
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["norm_gain"] = to_string(c.norm_gain);
  j["rms_norm_eps"] = float_to_json_number(c.rms_norm_eps);
  j["layer_style"] = to_string(c.layer_style);
  j["residual_kind"] = to_string(c.residual_kind);
  j["stream_dtype"] = to_string(c.stream_dtype);
  j["context_layer_norm"] = c.context_layer_norm;
  j["rope_style"] = to_string(c.rope_style);
  j["rope_theta"] = c.rope_theta;
  j["qk_norm"] = c.qk_norm;
  j["v_norm"] = c.v_norm;
  j["output_gate"] = c.output_gate;
  j["o_norm"] = c.o_norm;
  j["o_norm_weight"] = c.o_norm_weight;
  j["layer_attention"] = json::array();
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerAttention a = c.attention_of(l);
    j["layer_attention"].push_back({{"window", a.window}, {"causal", a.causal}});
  }
  j["logit_multiplier"] =
      c.logit_multiplier ? json(float_to_json_number(*c.logit_multiplier)) : json(nullptr);
  j["logit_soft_cap"] =
      c.logit_soft_cap ? json(float_to_json_number(*c.logit_soft_cap)) : json(nullptr);
  j["sample_from_anchor"] = c.sample_from_anchor;
  j["enable_confidence_head"] = c.confidence_head;
  j["confidence_head_with_markov"] = c.confidence_head_with_markov;
  if (!c.confidence_temperatures.empty()) j["confidence_temperatures"] = temperatures_json(c);
  if (c.reduced_vocab()) j["draft_vocab_size"] = c.draft_vocab_size;
  if (c.topk_markov()) j["markov_topk"] = c.markov_topk;
  if (c.markov_bias_topk > 0) j["markov_bias_topk"] = c.markov_bias_topk;
  if (c.markov_head_proj()) j["markov_head_type"] = to_string(c.markov_head_type);
  return j;
}

ModelConfig config_from_json(const nlohmann::json& j) {
  if (!j.is_object()) throw ConfigError("config: top level must be a JSON object");
  Fields f(j, "config");
  if (f.string("format") != "sparkdraft")
    f.fail("field 'format' must be \"sparkdraft\" (got \"" + f.string("format") + "\")");
  if (f.integer("format_version", 1) != kFormatVersion)
    f.fail("format_version " + std::to_string(f.integer("format_version", 1)) +
           " is not supported (this build reads " + std::to_string(kFormatVersion) + ")");
  for (const auto& item : j.items())
    if (!our_keys().count(item.key()) && !our_optional_keys().count(item.key()))
      f.fail("unknown field '" + io::excerpt(item.key()) + "'");
  for (const std::string& key : our_keys())
    if (!j.contains(key)) f.fail("missing field '" + key + "'");

  ModelConfig c;
  c.architecture = f.string("architecture");
  for (const IntField& k : kIntFields) c.*k.member = static_cast<int>(f.integer(k.name, k.min));
  c.target_layer_ids = f.int_list("target_layer_ids");
  c.mask_token_id = f.integer("mask_token_id", 0, std::numeric_limits<int64_t>::max());
  c.max_position_embeddings = static_cast<int>(f.integer("max_position_embeddings", 1));
  c.norm_gain = parse_enum(f, "norm_gain", kNormGainNames);
  c.rms_norm_eps = f.number_f32("rms_norm_eps");
  c.layer_style = parse_enum(f, "layer_style", kLayerStyleNames);
  c.residual_kind = parse_enum(f, "residual_kind", kResidualKindNames);
  c.stream_dtype = parse_enum(f, "stream_dtype", kStreamDTypeNames);
  c.context_layer_norm = f.boolean("context_layer_norm");
  c.rope_style = parse_enum(f, "rope_style", kRopeStyleNames);
  c.rope_theta = f.number("rope_theta");
  c.qk_norm = f.boolean("qk_norm");
  c.v_norm = f.boolean("v_norm");
  c.output_gate = f.boolean("output_gate");
  c.o_norm = f.boolean("o_norm");
  c.o_norm_weight = f.boolean("o_norm_weight");
  {
    const json& la = f.at("layer_attention");
    if (!la.is_array())
      f.fail("field 'layer_attention' must be a list of {\"window\", \"causal\"} objects (got " +
             io::excerpt(la.dump()) + ")");
    for (size_t l = 0; l < la.size(); ++l) {
      if (!la[l].is_object())
        f.fail("field 'layer_attention' entry " + std::to_string(l) + " must be an object (got " +
               io::excerpt(la[l].dump()) + ")");
      Fields e(la[l], "config: layer_attention[" + std::to_string(l) + "]");
      for (const auto& item : la[l].items())
        if (item.key() != "window" && item.key() != "causal")
          e.fail("unknown field '" + io::excerpt(item.key()) + "'");
      LayerAttention a;
      a.window = static_cast<int>(e.integer("window", 0));
      a.causal = e.boolean("causal");
      c.layer_attention.push_back(a);
    }
  }
  if (f.has("logit_multiplier")) c.logit_multiplier = f.number_f32("logit_multiplier");
  if (f.has("logit_soft_cap")) c.logit_soft_cap = f.number_f32("logit_soft_cap");
  c.sample_from_anchor = f.boolean("sample_from_anchor");
  if (f.has("enable_confidence_head")) c.confidence_head = f.boolean("enable_confidence_head");
  if (f.has("confidence_head_with_markov"))
    c.confidence_head_with_markov = f.boolean("confidence_head_with_markov");
  if (f.has("confidence_temperatures"))
    c.confidence_temperatures = f.f32_list("confidence_temperatures");
  // draft_vocab_size == vocab_size is the full vocabulary (no d2t map).
  if (f.has("draft_vocab_size")) {
    const int64_t dv = f.integer("draft_vocab_size", 1);
    c.draft_vocab_size = dv == c.vocab_size ? 0 : static_cast<int>(std::min(dv, kIntMax));
  }
  // The top-k Markov variant (contract.md section 12); validate() refuses k < 0 or > V.
  if (f.has("markov_topk"))
    c.markov_topk = static_cast<int>(f.integer("markov_topk", std::numeric_limits<int>::min()));
  if (f.has("markov_bias_topk"))
    c.markov_bias_topk =
        static_cast<int>(f.integer("markov_bias_topk", std::numeric_limits<int>::min()));
  // The Markov head's type (contract.md section 13); absent: vanilla.
  if (f.has("markov_head_type"))
    c.markov_head_type = parse_enum(f, "markov_head_type", kMarkovHeadTypeNames);
  c.validate();
  return c;
}

namespace {

// The Qwen3DSparkModel import of `j` (the HF form, or the flat form a speculators
// config maps onto): `fill_in` is the layout the caller read (the HF form itself
// refuses sample_from_anchor = false before this).
ModelConfig import_qwen3_dspark(const nlohmann::json& j, bool fill_in);

}  // namespace

ModelConfig import_hf_config(const nlohmann::json& j) {
  if (!j.is_object()) throw ConfigError("config.json: top level must be a JSON object");
  Fields f(j, "config.json");
  if (f.has("speculators_model_type")) return import_speculators_config(j);
  // The fill-in layout (contract.md section 14) loads from our JSON and the speculators
  // form; in a Qwen3DSparkModel config.json `block_size` has no agreed reading for it.
  if (f.has("sample_from_anchor") && !f.boolean("sample_from_anchor"))
    throw ConfigError(
        "config.json: the fill-in layout (sample_from_anchor = false) in a Qwen3DSparkModel "
        "config.json is not supported (its block_size has no agreed reading there); give the "
        "speculators form (speculators_model_type \"dspark\") or our own JSON");
  return import_qwen3_dspark(j, false);
}

// The speculators form (contract.md section 14): the layer dims under
// transformer_layer_config (a Qwen3Config written by to_diff_dict: absent fields are
// Qwen3Config's defaults), the DSpark fields at the top level, `block_size` counting
// the query slots (1 + N when sample_from_anchor is false).
ModelConfig import_speculators_config(const nlohmann::json& j) {
  if (!j.is_object()) throw ConfigError("config.json: top level must be a JSON object");
  Fields f(j, "config.json");
  const std::string type = f.string("speculators_model_type");
  if (type != "dspark")
    f.fail("speculators_model_type '" + type + "' is not supported (only 'dspark')");
  if (f.has("architectures")) {
    const json& archs = f.at("architectures");
    bool known = archs.is_array() && !archs.empty();
    for (const json& a : archs)
      known = known && a.is_string() &&
              (a.get<std::string>() == "DSparkDraftModel" ||
               a.get<std::string>() == "DSparkSpeculator");
    if (!known)
      f.fail("architectures " + io::excerpt(archs.dump()) +
             " are not supported: a speculators dspark draft is DSparkDraftModel");
  }
  // Training-time options that change the draft's forward pass.
  if (f.has("topk_context") && f.integer("topk_context", std::numeric_limits<int>::min()) != 0)
    f.fail("topk_context > 0 (the top-k context indexer) is not supported");
  if (f.has("draft_adapter_rank") &&
      f.integer("draft_adapter_rank", std::numeric_limits<int>::min()) != 0)
    f.fail("draft_adapter_rank > 0 (a residual draft adapter) is not supported");
  if (f.has("projector_type") && f.string("projector_type") != "dflash")
    f.fail("projector_type '" + f.string("projector_type") + "' is not supported (only 'dflash')");
  if (f.has("shift_label") && f.boolean("shift_label"))
    f.fail("shift_label = true (targets shifted by one position) is not supported");
  const json& tl = f.at("transformer_layer_config");
  if (!tl.is_object())
    f.fail("field 'transformer_layer_config' must be an object (got " + io::excerpt(tl.dump()) +
           ")");
  json hf = tl;
  if (hf.contains("model_type") && hf["model_type"] != "qwen3")
    f.fail("transformer_layer_config.model_type " + io::excerpt(hf["model_type"].dump()) +
           " is not supported (only 'qwen3')");
  // Qwen3Config's defaults for the fields to_diff_dict leaves out.
  const std::pair<const char*, json> defaults[] = {{"vocab_size", 151936},
                                                   {"hidden_size", 4096},
                                                   {"intermediate_size", 22016},
                                                   {"num_hidden_layers", 32},
                                                   {"num_attention_heads", 32},
                                                   {"num_key_value_heads", 32},
                                                   {"head_dim", 128},
                                                   {"max_position_embeddings", 32768},
                                                   {"rms_norm_eps", 1e-6},
                                                   {"hidden_act", "silu"},
                                                   {"tie_word_embeddings", false},
                                                   {"attention_bias", false}};
  for (const auto& [key, value] : defaults)
    if (!hf.contains(key) || hf[key].is_null()) hf[key] = value;
  if (!hf.contains("rope_parameters") && (!hf.contains("rope_theta") || hf["rope_theta"].is_null()))
    hf["rope_theta"] = 10000.0;
  // The DSpark fields: block_size counts the query slots.
  const bool anchor = f.boolean("sample_from_anchor");
  const int64_t slots = f.integer("block_size", anchor ? 1 : 2);
  hf["architectures"] = json::array({"Qwen3DSparkModel"});
  hf["model_type"] = "qwen3";
  hf["block_size"] = anchor ? slots : slots - 1;
  hf["target_layer_ids"] = f.at("aux_hidden_state_layer_ids");
  hf["mask_token_id"] = f.at("mask_token_id");
  hf["draft_vocab_size"] = f.at("draft_vocab_size");
  hf["markov_rank"] = f.has("markov_rank") ? f.at("markov_rank") : json(0);
  hf["markov_head_type"] = f.has("markov_head_type") ? f.at("markov_head_type") : json("vanilla");
  hf["enable_confidence_head"] =
      f.has("enable_confidence_head") ? f.at("enable_confidence_head") : json(false);
  hf["confidence_head_with_markov"] =
      f.has("confidence_head_with_markov") ? f.at("confidence_head_with_markov") : json(false);
  // The speculators' sliding layers are causal unless sliding_window_non_causal (full
  // layers never are): is_causal false for every layer then.
  if (f.has("sliding_window_non_causal") && f.boolean("sliding_window_non_causal") &&
      !hf.contains("is_causal"))
    hf["is_causal"] = false;
  if (f.has("target_hidden_size"))
    hf["target_hidden_size"] = f.at("target_hidden_size");
  else
    hf.erase("target_hidden_size");
  for (const char* key : {"sample_from_anchor", "markov_topk", "markov_bias_topk",
                          "num_target_layers", "speculators_model_type"})
    hf.erase(key);
  ModelConfig c = import_qwen3_dspark(hf, !anchor);
  c.architecture = "DSparkDraftModel";
  return c;
}

namespace {

ModelConfig import_qwen3_dspark(const nlohmann::json& j, bool fill_in) {
  Fields f(j, "config.json");
  // Formats out of scope first, so that their message is the one the user sees.
  for (const char* key : kDeepSeekV4Fields)
    if (j.contains(key))
      f.fail(std::string("DeepSeek-V4 MLA/MoE drafts are not supported (found field '") + key +
             "')");
  if (f.has("model_type") && f.at("model_type").is_string() &&
      f.string("model_type").rfind("deepseek", 0) == 0)
    f.fail("DeepSeek-V4 MLA/MoE drafts are not supported (model_type '" + f.string("model_type") +
           "')");

  const json& archs = f.at("architectures");
  if (!archs.is_array())
    f.fail("field 'architectures' must be a list of strings (got " + io::excerpt(archs.dump()) +
           ")");
  bool qwen3_dspark = false;
  for (const json& a : archs) {
    if (!a.is_string())
      f.fail("field 'architectures' must be a list of strings (got " + io::excerpt(archs.dump()) +
             ")");
    const std::string name = a.get<std::string>();
    if (name.rfind("Deepseek", 0) == 0 || name.rfind("DeepSeek", 0) == 0)
      f.fail("DeepSeek-V4 MLA/MoE drafts are not supported (architecture '" + name + "')");
    if (name == "Qwen3DSparkModel") qwen3_dspark = true;
  }
  if (!qwen3_dspark)
    f.fail("architectures " + io::excerpt(archs.dump()) +
           " are not supported: only Qwen3DSparkModel (DeepSpec) configs are imported");
  if (f.has("model_type") && f.string("model_type") != "qwen3")
    f.fail("model_type '" + f.string("model_type") +
           "' is not supported (a Qwen3DSparkModel has model_type 'qwen3')");

  // Options the Qwen3 layers we run do not have.
  if (f.has("tie_word_embeddings") && f.boolean("tie_word_embeddings"))
    f.fail(
        "tie_word_embeddings = true is not supported (the draft must ship its own lm_head.weight)");
  if (f.has("attention_bias") && f.boolean("attention_bias"))
    f.fail("attention_bias = true is not supported (projections have no bias)");
  if (f.has("mlp_bias") && f.boolean("mlp_bias"))
    f.fail("mlp_bias = true is not supported (projections have no bias)");
  if (f.has("hidden_act") && f.string("hidden_act") != "silu")
    f.fail("hidden_act '" + f.string("hidden_act") + "' is not supported (only 'silu', SwiGLU)");

  ModelConfig c;
  // DeepSpec's Markov head (contract.md section 13): vanilla (absent), gated or rnn.
  if (f.has("markov_head_type"))
    c.markov_head_type = parse_enum(f, "markov_head_type", kMarkovHeadTypeNames);
  c.architecture = "Qwen3DSparkModel";
  c.hidden_size = static_cast<int>(f.integer("hidden_size", 1));
  c.num_layers = static_cast<int>(f.integer("num_hidden_layers", 1));
  c.num_heads = static_cast<int>(f.integer("num_attention_heads", 1));
  c.num_kv_heads = f.has("num_key_value_heads")
                       ? static_cast<int>(f.integer("num_key_value_heads", 1))
                       : c.num_heads;
  if (f.has("head_dim")) {
    c.head_dim = static_cast<int>(f.integer("head_dim", 1));
  } else {
    if (c.hidden_size % c.num_heads != 0)
      f.fail("head_dim is absent and hidden_size (" + std::to_string(c.hidden_size) +
             ") is not a multiple of num_attention_heads (" + std::to_string(c.num_heads) + ")");
    c.head_dim = c.hidden_size / c.num_heads;
  }
  c.intermediate_size = static_cast<int>(f.integer("intermediate_size", 1));
  c.vocab_size = static_cast<int>(f.integer("vocab_size", 1));
  // A reduced draft vocabulary (contract.md section 11): draft_vocab_size ids mapped by the
  // checkpoint's d2t tensor; equal to vocab_size, the full vocabulary.
  if (f.has("draft_vocab_size")) {
    const int64_t dv = f.integer("draft_vocab_size", 1);
    if (dv > c.vocab_size)
      f.fail("field 'draft_vocab_size' (" + std::to_string(dv) + ") exceeds vocab_size (" +
             std::to_string(c.vocab_size) + ")");
    c.draft_vocab_size = dv == c.vocab_size ? 0 : static_cast<int>(dv);
  }
  c.rms_norm_eps =
      f.has("rms_norm_eps") ? f.number_f32("rms_norm_eps") : 1e-6f;  // HF Qwen3 default

  // RoPE: theta from rope_parameters (new HF form) or rope_theta; no scaling.
  bool have_theta = false;
  if (f.has("rope_parameters")) {
    const json& rp = f.at("rope_parameters");
    if (!rp.is_object())
      f.fail("field 'rope_parameters' must be an object (got " + io::excerpt(rp.dump()) + ")");
    Fields r(rp, "config.json: rope_parameters");
    if (r.has("rope_type") && r.string("rope_type") != "default")
      r.fail("rope_type '" + r.string("rope_type") +
             "' is not supported (only 'default', no RoPE scaling)");
    if (r.has("rope_theta")) {
      c.rope_theta = r.number("rope_theta");
      have_theta = true;
    }
  }
  if (f.has("rope_scaling")) {
    const json& rs = f.at("rope_scaling");
    if (!rs.is_object())
      f.fail("field 'rope_scaling' must be an object or null (got " + io::excerpt(rs.dump()) + ")");
    Fields r(rs, "config.json: rope_scaling");
    const char* key = r.has("rope_type") ? "rope_type" : "type";
    if (!r.has(key) || r.string(key) != "default")
      f.fail("RoPE scaling " + io::excerpt(rs.dump()) + " is not supported");
  }
  if (!have_theta && f.has("rope_theta")) {
    c.rope_theta = f.number("rope_theta");
    have_theta = true;
  }
  if (!have_theta)
    f.fail("missing field 'rope_theta' (neither rope_theta nor rope_parameters.rope_theta is set)");
  if (f.has("is_neox_style"))
    c.rope_style = f.boolean("is_neox_style") ? RopeStyle::neox : RopeStyle::gptj;
  c.max_position_embeddings = f.has("max_position_embeddings")
                                  ? static_cast<int>(f.integer("max_position_embeddings", 1))
                                  : 32768;

  // Attention per layer: layer_types (full or sliding, mixed allowed), the window of
  // the sliding ones, causality as vLLM resolves it (is_causal, else
  // dflash_config.causal, else causal exactly for sliding_attention layers).
  std::vector<bool> sliding(static_cast<size_t>(c.num_layers), false);
  if (f.has("layer_types")) {
    const json& lt = f.at("layer_types");
    if (!lt.is_array() || static_cast<int>(lt.size()) != c.num_layers)
      f.fail("field 'layer_types' must list one entry per layer (" + std::to_string(c.num_layers) +
             "), got " + io::excerpt(lt.dump()));
    for (size_t l = 0; l < lt.size(); ++l) {
      if (!lt[l].is_string())
        f.fail("field 'layer_types' must be a list of strings (got " + io::excerpt(lt.dump()) +
               ")");
      const std::string kind = lt[l].get<std::string>();
      if (kind != "full_attention" && kind != "sliding_attention")
        f.fail("layer type '" + kind +
               "' is not supported (only 'full_attention' and 'sliding_attention')");
      sliding[l] = kind == "sliding_attention";
    }
  } else if (f.has("use_sliding_window") && f.boolean("use_sliding_window")) {
    f.fail(
        "use_sliding_window = true without layer_types is not supported (give layer_types per "
        "layer)");
  }
  const bool any_sliding = std::find(sliding.begin(), sliding.end(), true) != sliding.end();
  const int window = any_sliding ? static_cast<int>(f.integer("sliding_window", 1)) : 0;
  std::optional<bool> causal_override;
  if (f.has("is_causal")) {
    causal_override = f.boolean("is_causal");
  } else if (f.has("dflash_config")) {
    const json& dc = f.at("dflash_config");
    if (!dc.is_object())
      f.fail("field 'dflash_config' must be an object (got " + io::excerpt(dc.dump()) + ")");
    Fields d(dc, "config.json: dflash_config");
    if (d.has("causal")) causal_override = d.boolean("causal");
  }
  for (int l = 0; l < c.num_layers; ++l) {
    LayerAttention a;
    a.window = sliding[static_cast<size_t>(l)] ? window : 0;
    a.causal = causal_override.value_or(sliding[static_cast<size_t>(l)]);
    c.layer_attention.push_back(a);
  }

  // DSpark fields.
  c.block_size = static_cast<int>(f.integer("block_size", 1));
  c.target_layer_ids = f.int_list("target_layer_ids");
  if (f.has("num_target_layers")) {
    const int64_t target_layers = f.integer("num_target_layers", 1);
    for (int id : c.target_layer_ids)
      if (id >= target_layers - 1)
        f.fail("target_layer_ids " + fmt_ids(c.target_layer_ids) + ": layer " + std::to_string(id) +
               " is not before the final target layer (num_target_layers " +
               std::to_string(target_layers) +
               "; the final layer's slot holds the post-norm state)");
  }
  c.mask_token_id = f.integer("mask_token_id", 0, std::numeric_limits<int64_t>::max());
  c.markov_rank = static_cast<int>(f.integer("markov_rank", 0));
  // The confidence head (contract.md section 9): absent flags are off, as in DeepSpec's
  // config class; without the head, confidence_head_with_markov says nothing.
  c.confidence_head = f.has("enable_confidence_head") && f.boolean("enable_confidence_head");
  c.confidence_head_with_markov = c.confidence_head && f.has("confidence_head_with_markov") &&
                                  f.boolean("confidence_head_with_markov");
  if (f.has("confidence_temperatures"))
    c.confidence_temperatures = f.f32_list("confidence_temperatures");
  // The top-k Markov variant (contract.md section 12), vLLM's `markov_topk`, and its union
  // form (`markov_bias_topk`, the bias's own top-m added to the candidates, 12.5).
  if (f.has("markov_topk"))
    c.markov_topk = static_cast<int>(f.integer("markov_topk", std::numeric_limits<int>::min()));
  if (f.has("markov_bias_topk"))
    c.markov_bias_topk =
        static_cast<int>(f.integer("markov_bias_topk", std::numeric_limits<int>::min()));
  c.target_hidden_size = f.has("target_hidden_size")
                             ? static_cast<int>(f.integer("target_hidden_size", 1))
                             : c.hidden_size;

  // Qwen3 layers: pre-norm, plain bf16 residual, w gain, QK-norm, no gate, no transform.
  c.norm_gain = NormGain::weight;
  c.layer_style = LayerStyle::pre_norm;
  c.residual_kind = ResidualKind::plain;
  c.stream_dtype = StreamDType::bf16;
  c.context_layer_norm = false;
  c.qk_norm = true;
  c.v_norm = false;
  c.output_gate = false;
  c.o_norm = false;
  c.o_norm_weight = true;
  c.sample_from_anchor = !fill_in;
  try {
    c.validate();
  } catch (const ConfigError& e) {
    throw ConfigError(std::string("config.json: ") + e.what());
  }
  return c;
}

}  // namespace

ModelConfig load_config_file(const std::string& path) {
  // A regular file only: a directory, a FIFO or a symlink loop is refused by name.
  const std::string text = io::read_regular_file<ConfigError>(path, "config file");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    // Where, not what: the parser's message quotes the file's bytes.
    throw ConfigError(path + ": not valid JSON (a syntax error at byte " + std::to_string(e.byte) +
                      ")");
  } catch (const json::exception& e) {
    throw ConfigError(path + ": not valid JSON (" + io::excerpt(e.what()) + ")");
  }
  try {
    return io::is_sparkdraft_json(j) ? config_from_json(j) : import_hf_config(j);
  } catch (const ConfigError& e) {
    // Name the file in place of the generic "config:" / "config.json:" prefix.
    std::string msg = e.what();
    for (const char* prefix : {"config.json: ", "config: "})
      if (msg.rfind(prefix, 0) == 0) msg = msg.substr(std::string(prefix).size());
    throw ConfigError(path + ": " + msg);
  }
}

void save_config_file(const ModelConfig& config, const std::string& path) {
  config.validate();
  std::ofstream out(path);
  if (!out) throw IoError("cannot create config file '" + path + "'");
  out << config_to_json(config).dump(2) << "\n";
  out.close();
  if (!out) throw IoError("cannot write config file '" + path + "'");
}

namespace io {

bool is_sparkdraft_json(const nlohmann::json& j) {
  return j.is_object() && j.contains("format") && j["format"] == "sparkdraft";
}

bool hf_expressible(const ModelConfig& c, std::string* why) {
  auto no = [&](const std::string& reason) {
    if (why) *why = reason;
    return false;
  };
  if (c.layer_style != LayerStyle::pre_norm) return no("layer_style sandwich");
  if (c.residual_kind != ResidualKind::plain) return no("residual_kind norm_preserving");
  if (c.stream_dtype != StreamDType::bf16) return no("stream_dtype f32");
  if (c.norm_gain != NormGain::weight)
    return no(std::string("norm_gain ") + to_string(c.norm_gain));
  if (c.context_layer_norm) return no("context_layer_norm");
  if (!c.qk_norm) return no("qk_norm off");
  if (c.v_norm) return no("v_norm");
  if (c.output_gate) return no("output_gate");
  if (c.o_norm) return no("o_norm");
  // layer_types carries one sliding_window; causality that the default rule
  // (causal = sliding) does not give must be one value for every layer (is_causal).
  int window = 0;
  bool default_causality = true, first = true, uniform = true, causal0 = false;
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerAttention a = c.attention_of(l);
    if (a.window > 0 && window > 0 && a.window != window)
      return no("sliding layers with different windows (" + std::to_string(window) + ", " +
                std::to_string(a.window) + ")");
    if (a.window > 0) window = a.window;
    default_causality = default_causality && a.causal == (a.window > 0);
    if (first) causal0 = a.causal;
    uniform = uniform && a.causal == causal0;
    first = false;
  }
  if (!default_causality && !uniform)
    return no("per-layer causality that is neither the sliding-layer default nor one value");
  if (c.has_logit_transform()) return no("an output-logit transform");
  if (!c.sample_from_anchor) return no("the fill-in layout");
  return true;
}

nlohmann::json export_hf_config(const ModelConfig& c) {
  std::string why;
  if (!hf_expressible(c, &why))
    throw ConfigError("config has no DeepSpec/HF config.json form (" + why +
                      "); write our own JSON instead");
  json j;
  j["architectures"] = json::array({"Qwen3DSparkModel"});
  j["model_type"] = "qwen3";
  j["dtype"] = "bfloat16";
  j["hidden_size"] = c.hidden_size;
  j["intermediate_size"] = c.intermediate_size;
  j["num_hidden_layers"] = c.num_layers;
  j["num_attention_heads"] = c.num_heads;
  j["num_key_value_heads"] = c.num_kv_heads;
  j["head_dim"] = c.head_dim;
  j["vocab_size"] = c.vocab_size;
  j["rms_norm_eps"] = float_to_json_number(c.rms_norm_eps);
  j["rope_parameters"] = {{"rope_theta", c.rope_theta}, {"rope_type", "default"}};
  j["max_position_embeddings"] = c.max_position_embeddings;
  j["hidden_act"] = "silu";
  j["attention_bias"] = false;
  j["tie_word_embeddings"] = false;
  j["block_size"] = c.block_size;
  j["target_layer_ids"] = c.target_layer_ids;
  j["mask_token_id"] = c.mask_token_id;
  j["markov_rank"] = c.markov_rank;
  j["markov_head_type"] = to_string(c.markov_head_type);
  j["enable_confidence_head"] = c.confidence_head;
  if (c.confidence_head) j["confidence_head_with_markov"] = c.confidence_head_with_markov;
  j["layer_types"] = json::array();
  int window = 0;
  bool default_causality = true;
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerAttention a = c.attention_of(l);
    j["layer_types"].push_back(a.window > 0 ? "sliding_attention" : "full_attention");
    if (a.window > 0) window = a.window;
    default_causality = default_causality && a.causal == (a.window > 0);
  }
  if (window > 0) j["sliding_window"] = window;
  if (!default_causality) j["is_causal"] = c.attention_of(0).causal;
  if (c.target_hidden_size != c.hidden_size) j["target_hidden_size"] = c.target_hidden_size;
  if (c.reduced_vocab()) j["draft_vocab_size"] = c.draft_vocab_size;
  if (c.topk_markov()) j["markov_topk"] = c.markov_topk;
  if (c.markov_bias_topk > 0) j["markov_bias_topk"] = c.markov_bias_topk;
  if (!c.confidence_temperatures.empty()) j["confidence_temperatures"] = temperatures_json(c);
  if (c.rope_style == RopeStyle::gptj) j["is_neox_style"] = false;
  return j;
}

bool speculators_expressible(const ModelConfig& c, std::string* why) {
  ModelConfig anchor = c;
  anchor.sample_from_anchor = true;
  if (!hf_expressible(anchor, why)) return false;
  if (c.topk_markov()) {
    if (why) *why = "markov_topk (no speculators field)";
    return false;
  }
  if (c.target_layer_ids.empty()) {
    if (why) *why = "no target layers";
    return false;
  }
  return true;
}

nlohmann::json export_speculators_config(const ModelConfig& c) {
  std::string why;
  if (!speculators_expressible(c, &why))
    throw ConfigError("config has no speculators config.json form (" + why +
                      "); write our own JSON instead");
  ModelConfig anchor = c;
  anchor.sample_from_anchor = true;
  json layer = export_hf_config(anchor);
  json j;
  j["architectures"] = json::array({"DSparkDraftModel"});
  j["speculators_model_type"] = "dspark";
  j["block_size"] = c.query_slots();
  j["sample_from_anchor"] = c.sample_from_anchor;
  j["draft_vocab_size"] = c.draft_vocab();
  j["num_anchors"] = 256;  // training only
  j["target_hidden_size"] = c.target_hidden_size;
  j["aux_hidden_state_layer_ids"] = c.target_layer_ids;
  j["mask_token_id"] = c.mask_token_id;
  j["markov_rank"] = c.markov_rank;
  j["markov_head_type"] = to_string(c.markov_head_type);
  j["enable_confidence_head"] = c.confidence_head;
  j["confidence_head_with_markov"] = c.confidence_head_with_markov;
  for (const char* key :
       {"architectures", "block_size", "target_layer_ids", "mask_token_id", "markov_rank",
        "markov_head_type", "enable_confidence_head", "confidence_head_with_markov",
        "target_hidden_size", "draft_vocab_size", "dtype"})
    layer.erase(key);
  j["transformer_layer_config"] = layer;
  return j;
}

}  // namespace io
}  // namespace sparkdraft
