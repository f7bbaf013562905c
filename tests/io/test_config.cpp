// ModelConfig: validation, our JSON round trip, the DeepSpec / HF import of a
// realistic Qwen3-8B DSpark config.json, and every refusal naming its cause.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "common/files.h"
#include "io/hf_config.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/config.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

using json = nlohmann::json;
using test::error_of;
using test::expect_mentions;

// The released Qwen3-8B draft's config.json as DeepSpec / HF write it
// (background doc section 4.1: the fields of the quoted 4B config with the 8B
// target's dimensions).
const char* kQwen3_8bDSpark = R"({
  "architectures": ["Qwen3DSparkModel"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "block_size": 7,
  "bos_token_id": 151643,
  "confidence_head_with_markov": true,
  "dtype": "bfloat16",
  "enable_confidence_head": true,
  "eos_token_id": 151645,
  "head_dim": 128,
  "hidden_act": "silu",
  "hidden_size": 4096,
  "initializer_range": 0.02,
  "intermediate_size": 12288,
  "layer_types": ["full_attention", "full_attention", "full_attention", "full_attention", "full_attention"],
  "markov_head_type": "vanilla",
  "markov_rank": 256,
  "mask_token_id": 151669,
  "max_position_embeddings": 40960,
  "max_window_layers": 36,
  "model_type": "qwen3",
  "num_anchors": 512,
  "num_attention_heads": 32,
  "num_hidden_layers": 5,
  "num_key_value_heads": 8,
  "num_target_layers": 36,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
  "sliding_window": null,
  "target_layer_ids": [1, 9, 17, 25, 33],
  "tie_word_embeddings": false,
  "transformers_version": "4.57.0",
  "use_cache": true,
  "use_sliding_window": false,
  "vocab_size": 151936
})";

json qwen3_8b() { return json::parse(kQwen3_8bDSpark); }

uint32_t bits(float x) {
  uint32_t u;
  std::memcpy(&u, &x, 4);
  return u;
}

// A config with every option away from its default.
ModelConfig unusual_config() {
  ModelConfig c = preset_config("tiny", "muse");
  c.architecture = "custom";
  c.num_heads = 6;
  c.num_kv_heads = 3;
  c.head_dim = 10;
  c.markov_rank = 3;  // not a power of two: valid, only the fused path cares
  c.block_size = 64;
  c.target_layer_ids = {-1, 0, 7};
  c.mask_token_id = 5;
  c.norm_gain = NormGain::none;
  c.rms_norm_eps = 1e-5f;
  c.stream_dtype = StreamDType::bf16;
  c.context_layer_norm = false;
  c.rope_theta = 12345.678;
  c.qk_norm = false;
  c.v_norm = true;
  c.output_gate = false;
  c.o_norm_weight = false;
  c.layer_attention = {{33, true}, {0, true}};  // mixed, causal full attention
  c.logit_multiplier.reset();
  c.logit_soft_cap = 0.1f;
  return c;
}

void expect_same(const ModelConfig& a, const ModelConfig& b) {
  EXPECT_EQ(config_to_json(a).dump(), config_to_json(b).dump());
  EXPECT_EQ(bits(a.rms_norm_eps), bits(b.rms_norm_eps));
  EXPECT_EQ(a.rope_theta, b.rope_theta);
  EXPECT_EQ(a.logit_multiplier.has_value(), b.logit_multiplier.has_value());
  if (a.logit_multiplier && b.logit_multiplier) {
    EXPECT_EQ(bits(*a.logit_multiplier), bits(*b.logit_multiplier));
  }
  EXPECT_EQ(a.logit_soft_cap.has_value(), b.logit_soft_cap.has_value());
  if (a.logit_soft_cap && b.logit_soft_cap) {
    EXPECT_EQ(bits(*a.logit_soft_cap), bits(*b.logit_soft_cap));
  }
}

TEST(Config, OurJsonRoundTripsEveryPresetAndOption) {
  std::vector<std::pair<std::string, ModelConfig>> cases;
  for (const auto& p : preset_names())
    for (const char* style : {"qwen3", "muse"})
      cases.emplace_back(p + "/" + style, preset_config(p, style));
  cases.emplace_back("unusual", unusual_config());
  for (const auto& [name, c] : cases) {
    SCOPED_TRACE(name);
    const std::string text = config_to_json(c).dump(2);
    const ModelConfig back = config_from_json(json::parse(text));
    expect_same(c, back);
    EXPECT_EQ(back.hidden_size, c.hidden_size);
    EXPECT_EQ(back.target_layer_ids, c.target_layer_ids);
    EXPECT_EQ(back.layer_style, c.layer_style);
    EXPECT_EQ(back.rope_style, c.rope_style);
  }
}

TEST(Config, OurJsonIsExplicitAndReadable) {
  const json j = config_to_json(preset_config("tiny", "muse"));
  EXPECT_EQ(j.at("format"), "sparkdraft");
  EXPECT_EQ(j.at("format_version"), 1);
  EXPECT_EQ(j.at("layer_style"), "sandwich");
  EXPECT_EQ(j.at("residual_kind"), "norm_preserving");
  EXPECT_EQ(j.at("stream_dtype"), "f32");
  EXPECT_EQ(j.at("norm_gain"), "one_plus_weight");
  EXPECT_EQ(j.at("rope_style"), "gptj");
  // fp32 values written as their shortest decimal, not as widened doubles.
  EXPECT_NE(j.dump().find("\"rms_norm_eps\":1e-06"), std::string::npos) << j.dump();
  EXPECT_NE(j.dump().find("\"logit_multiplier\":0.7,"), std::string::npos) << j.dump();
  const json q = config_to_json(preset_config("tiny", "qwen3"));
  EXPECT_TRUE(q.at("logit_multiplier").is_null());
  EXPECT_TRUE(q.at("logit_soft_cap").is_null());
  EXPECT_EQ(q.at("layer_style"), "pre_norm");
  EXPECT_EQ(q.at("norm_gain"), "weight");
  EXPECT_EQ(q.at("rope_style"), "neox");
}

TEST(Config, OurJsonRefusesUnknownMissingAndMistypedFields) {
  const json good = config_to_json(preset_config("tiny"));
  json j = good;
  j["hiden_size"] = 64;
  expect_mentions(error_of<ConfigError>([&] { config_from_json(j); }),
                  {"unknown field 'hiden_size'"});
  j = good;
  j.erase("rope_style");
  expect_mentions(error_of<ConfigError>([&] { config_from_json(j); }),
                  {"missing field 'rope_style'"});
  j = good;
  j["num_heads"] = "four";
  expect_mentions(error_of<ConfigError>([&] { config_from_json(j); }), {"'num_heads'", "integer"});
  j = good;
  j["layer_style"] = "post_norm";
  expect_mentions(error_of<ConfigError>([&] { config_from_json(j); }),
                  {"'layer_style'", "\"pre_norm\"", "\"sandwich\"", "post_norm"});
  j = good;
  j["qk_norm"] = 1;
  expect_mentions(error_of<ConfigError>([&] { config_from_json(j); }),
                  {"'qk_norm'", "true or false"});
  j = good;
  j["format_version"] = 2;
  expect_mentions(error_of<ConfigError>([&] { config_from_json(j); }), {"format_version 2"});
  j = good;
  j["hidden_size"] = 0;
  expect_mentions(error_of<ConfigError>([&] { config_from_json(j); }), {"'hidden_size'", ">= 1"});
  j = good;
  j["rms_norm_eps"] = 1e300;
  expect_mentions(error_of<ConfigError>([&] { config_from_json(j); }),
                  {"'rms_norm_eps'", "fp32 range"});
}

TEST(Config, ValidateNamesTheBadField) {
  struct Case {
    const char* field;
    void (*edit)(ModelConfig&);
  };
  const Case cases[] = {
      {"hidden_size", [](ModelConfig& c) { c.hidden_size = -1; }},
      {"num_layers", [](ModelConfig& c) { c.num_layers = 0; }},
      {"num_kv_heads", [](ModelConfig& c) { c.num_kv_heads = 0; }},
      {"num_heads", [](ModelConfig& c) { c.num_kv_heads = 3; }},
      {"head_dim", [](ModelConfig& c) { c.head_dim = 15; }},
      {"intermediate_size", [](ModelConfig& c) { c.intermediate_size = 0; }},
      {"vocab_size", [](ModelConfig& c) { c.vocab_size = 0; }},
      {"markov_rank", [](ModelConfig& c) { c.markov_rank = -1; }},
      {"block_size", [](ModelConfig& c) { c.block_size = 0; }},
      {"block_size", [](ModelConfig& c) { c.block_size = 65; }},
      {"target_hidden_size", [](ModelConfig& c) { c.target_hidden_size = 0; }},
      {"target_layer_ids", [](ModelConfig& c) { c.target_layer_ids = {}; }},
      {"target_layer_ids",
       [](ModelConfig& c) {
         c.target_layer_ids = {3, 3};
       }},
      {"target_layer_ids",
       [](ModelConfig& c) {
         c.target_layer_ids = {-2, 4};
       }},
      {"mask_token_id", [](ModelConfig& c) { c.mask_token_id = c.vocab_size; }},
      {"mask_token_id", [](ModelConfig& c) { c.mask_token_id = -1; }},
      {"max_position_embeddings", [](ModelConfig& c) { c.max_position_embeddings = 0; }},
      {"rms_norm_eps", [](ModelConfig& c) { c.rms_norm_eps = 0.0f; }},
      {"rms_norm_eps",
       [](ModelConfig& c) { c.rms_norm_eps = std::numeric_limits<float>::quiet_NaN(); }},
      {"rope_theta", [](ModelConfig& c) { c.rope_theta = -10000.0; }},
      // A denormal theta passed "> 0" and made every RoPE angle NaN (every token 0).
      {"rope_theta", [](ModelConfig& c) { c.rope_theta = 4.9e-324; }},
      {"rope_theta", [](ModelConfig& c) { c.rope_theta = 0.5; }},
      {"layer_attention",
       [](ModelConfig& c) {
         c.layer_attention = {{-1, false}, {0, false}};
       }},
      {"layer_attention",
       [](ModelConfig& c) {
         c.layer_attention = {{8, true}};
       }},
      {"logit_soft_cap", [](ModelConfig& c) { c.logit_soft_cap = 0.0f; }},
      {"logit_multiplier",
       [](ModelConfig& c) { c.logit_multiplier = std::numeric_limits<float>::infinity(); }},
      {"num_heads * head_dim",
       [](ModelConfig& c) { c.num_heads = 1 << 20, c.num_kv_heads = 1, c.head_dim = 1 << 12; }},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.field);
    ModelConfig c = preset_config("tiny");
    k.edit(c);
    expect_mentions(error_of<ConfigError>([&] { c.validate(); }), {k.field});
  }
  // The fill-in layout validates (contract.md section 14): 1 + N query slots.
  ModelConfig c = preset_config("tiny");
  c.sample_from_anchor = false;
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.query_slots(), c.block_size + 1);
  EXPECT_EQ(c.first_drafted_slot(), 1);
  EXPECT_EQ(preset_config("tiny").query_slots(), preset_config("tiny").block_size);
}

TEST(Config, ValidateAcceptsRankZeroAndAnyPositiveRank) {
  for (int rank : {0, 1, 3, 64, 100}) {
    SCOPED_TRACE(rank);
    ModelConfig c = preset_config("tiny");
    c.markov_rank = rank;
    EXPECT_NO_THROW(c.validate());
  }
  ModelConfig c = preset_config("tiny");
  c.markov_rank = 0;
  for (const TensorSpec& s : expected_tensors(c))
    EXPECT_EQ(s.name.find("markov"), std::string::npos) << s.name;
}

TEST(Config, ImportsTheQwen3_8bDSparkConfig) {
  const ModelConfig c = import_hf_config(qwen3_8b());
  EXPECT_EQ(c.architecture, "Qwen3DSparkModel");
  EXPECT_EQ(c.hidden_size, 4096);
  EXPECT_EQ(c.num_layers, 5);
  EXPECT_EQ(c.num_heads, 32);
  EXPECT_EQ(c.num_kv_heads, 8);
  EXPECT_EQ(c.head_dim, 128);
  EXPECT_EQ(c.intermediate_size, 12288);
  EXPECT_EQ(c.vocab_size, 151936);
  EXPECT_EQ(c.markov_rank, 256);
  EXPECT_EQ(c.block_size, 7);
  EXPECT_EQ(c.target_hidden_size, 4096);
  EXPECT_EQ(c.target_layer_ids, (std::vector<int>{1, 9, 17, 25, 33}));
  EXPECT_EQ(c.mask_token_id, 151669);
  EXPECT_EQ(c.max_position_embeddings, 40960);
  EXPECT_EQ(bits(c.rms_norm_eps), bits(1e-6f));
  EXPECT_EQ(c.rope_theta, 1e6);
  EXPECT_EQ(c.norm_gain, NormGain::weight);
  EXPECT_EQ(c.layer_style, LayerStyle::pre_norm);
  EXPECT_EQ(c.residual_kind, ResidualKind::plain);
  EXPECT_EQ(c.stream_dtype, StreamDType::bf16);
  EXPECT_FALSE(c.context_layer_norm);
  EXPECT_EQ(c.rope_style, RopeStyle::neox);
  EXPECT_TRUE(c.qk_norm);
  EXPECT_FALSE(c.v_norm);
  EXPECT_FALSE(c.output_gate);
  EXPECT_FALSE(c.o_norm);
  EXPECT_TRUE(c.o_norm_weight);
  ASSERT_EQ(c.layer_attention.size(), 5u);
  for (const LayerAttention& a : c.layer_attention) EXPECT_EQ(a, (LayerAttention{0, false}));
  EXPECT_FALSE(c.has_logit_transform());
  EXPECT_TRUE(c.sample_from_anchor);
  EXPECT_TRUE(c.confidence_head);
  EXPECT_TRUE(c.confidence_head_with_markov);
  EXPECT_EQ(c.confidence_inputs(), 4096 + 256);
  // The import and the qwen3-8b preset (plus the head) describe the same model.
  ModelConfig preset = preset_config("qwen3-8b");
  preset.confidence_head = preset.confidence_head_with_markov = true;
  EXPECT_EQ(config_to_json(c).dump(), config_to_json(preset).dump());
}

// The confidence head's flags (contract.md section 9): absent = off, with_markov
// means nothing without the head, and our JSON written before the flags loads.
TEST(Config, ConfidenceHeadFlags) {
  json j = qwen3_8b();
  j.erase("enable_confidence_head");
  EXPECT_FALSE(import_hf_config(j).confidence_head);
  EXPECT_FALSE(import_hf_config(j).confidence_head_with_markov);
  j["enable_confidence_head"] = true;
  j.erase("confidence_head_with_markov");
  EXPECT_TRUE(import_hf_config(j).confidence_head);
  EXPECT_FALSE(import_hf_config(j).confidence_head_with_markov);
  j["enable_confidence_head"] = "yes";
  expect_mentions(error_of<ConfigError>([&] { import_hf_config(j); }), {"enable_confidence_head"});

  ModelConfig c = preset_config("tiny-conf");
  json ours = config_to_json(c);
  EXPECT_EQ(ours.at("enable_confidence_head"), true);
  EXPECT_EQ(ours.at("confidence_head_with_markov"), true);
  ours.erase("enable_confidence_head");
  ours.erase("confidence_head_with_markov");
  const ModelConfig old = config_from_json(ours);
  EXPECT_FALSE(old.confidence_head || old.confidence_head_with_markov);

  c.confidence_head = false;
  expect_mentions(error_of<ConfigError>([&] { c.validate(); }),
                  {"confidence_head_with_markov", "enable_confidence_head is false"});
  c.confidence_head = true;
  c.markov_rank = 0;
  expect_mentions(error_of<ConfigError>([&] { c.validate(); }),
                  {"confidence_head_with_markov", "markov_rank is 0"});
  c.confidence_head_with_markov = false;
  EXPECT_NO_THROW(c.validate());
  EXPECT_EQ(c.confidence_inputs(), c.hidden_size);
}

TEST(Config, ImportsFieldVariants) {
  // Old-style top-level rope_theta, no head_dim, no kv heads, no eps.
  json j = qwen3_8b();
  j.erase("rope_parameters");
  j["rope_theta"] = 500000.0;
  j.erase("head_dim");
  j.erase("num_key_value_heads");
  j.erase("rms_norm_eps");
  j.erase("max_position_embeddings");
  j.erase("markov_head_type");
  ModelConfig c = import_hf_config(j);
  EXPECT_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.head_dim, 4096 / 32);
  EXPECT_EQ(c.num_kv_heads, 32);
  EXPECT_EQ(bits(c.rms_norm_eps), bits(1e-6f));
  EXPECT_EQ(c.max_position_embeddings, 32768);
  // Explicit sample_from_anchor, target hidden size, sliding layers, GPT-J RoPE.
  j = qwen3_8b();
  j["sample_from_anchor"] = true;
  j["target_hidden_size"] = 5120;
  j["layer_types"] = json::array();
  for (int i = 0; i < 5; ++i) j["layer_types"].push_back("sliding_attention");
  j["sliding_window"] = 2048;
  j["is_neox_style"] = false;
  c = import_hf_config(j);
  EXPECT_EQ(c.target_hidden_size, 5120);
  for (int l = 0; l < 5; ++l) EXPECT_EQ(c.attention_of(l), (LayerAttention{2048, true}));
  EXPECT_EQ(c.rope_style, RopeStyle::gptj);
  // The exported form reads back to the same config.
  expect_same(c, import_hf_config(io::export_hf_config(c)));
}

// layer_types may mix full and sliding layers; causality as vLLM resolves it:
// is_causal, else dflash_config.causal, else causal exactly for sliding layers.
TEST(Config, ImportsPerLayerAttention) {
  json j = qwen3_8b();
  j["layer_types"] = {"full_attention", "sliding_attention", "full_attention", "sliding_attention",
                      "sliding_attention"};
  j["sliding_window"] = 512;
  ModelConfig c = import_hf_config(j);
  const std::vector<LayerAttention> by_default = {
      {0, false}, {512, true}, {0, false}, {512, true}, {512, true}};
  EXPECT_EQ(c.layer_attention, by_default);
  expect_same(c, import_hf_config(io::export_hf_config(c)));
  // dflash_config.causal overrides the default for every layer ...
  j["dflash_config"] = {{"causal", false}};
  c = import_hf_config(j);
  for (int l = 0; l < 5; ++l) EXPECT_FALSE(c.attention_of(l).causal) << l;
  EXPECT_EQ(c.attention_of(1).window, 512);
  expect_same(c, import_hf_config(io::export_hf_config(c)));
  // ... and is_causal overrides dflash_config.
  j["is_causal"] = true;
  c = import_hf_config(j);
  for (int l = 0; l < 5; ++l) EXPECT_TRUE(c.attention_of(l).causal) << l;
  EXPECT_EQ(c.attention_of(0).window, 0);
  expect_same(c, import_hf_config(io::export_hf_config(c)));
  // A dflash_config without causal leaves the default.
  j.erase("is_causal");
  j["dflash_config"] = {{"mask_token_id", 5}};
  EXPECT_EQ(import_hf_config(j).layer_attention, by_default);
  // No layer_types: every layer full; is_causal still applies.
  j = qwen3_8b();
  j.erase("layer_types");
  j["is_causal"] = true;
  c = import_hf_config(j);
  for (int l = 0; l < 5; ++l) EXPECT_EQ(c.attention_of(l), (LayerAttention{0, true})) << l;
  // Our JSON carries the list and refuses bad entries.
  ModelConfig ours = preset_config("tiny", "qwen3");
  ours.layer_attention = {{7, false}, {0, true}};
  expect_same(ours, config_from_json(config_to_json(ours)));
  json oj = config_to_json(ours);
  EXPECT_EQ(oj.at("layer_attention"),
            json::parse(R"([{"window":7,"causal":false},{"window":0,"causal":true}])"));
  oj["layer_attention"] = json::array({{{"window", 7}, {"causal", false}}});
  expect_mentions(error_of<ConfigError>([&] { config_from_json(oj); }),
                  {"layer_attention", "one entry per layer"});
  oj["layer_attention"] =
      json::array({{{"window", 7}, {"causal", "no"}}, {{"window", 0}, {"causal", true}}});
  expect_mentions(error_of<ConfigError>([&] { config_from_json(oj); }), {"'causal'"});
  oj["layer_attention"] =
      json::array({{{"window", -7}, {"causal", false}}, {{"window", 0}, {"causal", true}}});
  expect_mentions(error_of<ConfigError>([&] { config_from_json(oj); }), {"'window'"});
  oj["layer_attention"] = json::array(
      {{{"window", 7}, {"causal", false}, {"sink", 1}}, {{"window", 0}, {"causal", true}}});
  expect_mentions(error_of<ConfigError>([&] { config_from_json(oj); }), {"unknown field 'sink'"});
  oj["layer_attention"] = 5;
  expect_mentions(error_of<ConfigError>([&] { config_from_json(oj); }), {"'layer_attention'"});
  // Per-layer causality the HF form cannot say (not the sliding default, not one value).
  ModelConfig odd = preset_config("tiny", "qwen3");
  odd.layer_attention = {{0, true}, {0, false}};
  std::string why;
  EXPECT_FALSE(io::hf_expressible(odd, &why));
  EXPECT_NE(why.find("causality"), std::string::npos) << why;
  odd.layer_attention = {{16, true}, {32, true}};
  EXPECT_FALSE(io::hf_expressible(odd, &why));
  EXPECT_NE(why.find("windows"), std::string::npos) << why;
}

TEST(Config, HfExportRoundTripsAndRefusesMuseStyle) {
  ModelConfig c = preset_config("tiny", "qwen3");
  expect_same(c, import_hf_config(io::export_hf_config(c)));
  ModelConfig muse = preset_config("tiny", "muse");
  std::string why;
  EXPECT_FALSE(io::hf_expressible(muse, &why));
  EXPECT_FALSE(why.empty());
  expect_mentions(error_of<ConfigError>([&] { io::export_hf_config(muse); }),
                  {"no DeepSpec/HF config.json form"});
}

TEST(Config, ImportsAReducedDraftVocabularyAndTheSpeculatorsFormat) {
  // The speculators config format (contract.md section 14): the layer dims under
  // transformer_layer_config with Qwen3Config's defaults for what to_diff_dict leaves
  // out, the DSpark fields at the top level, block_size counting the query slots.
  const json j = json::parse(R"({
    "architectures": ["DSparkDraftModel"],
    "speculators_model_type": "dspark",
    "draft_vocab_size": 32000,
    "block_size": 8,
    "markov_rank": 256,
    "markov_head_type": "vanilla",
    "mask_token_id": 4,
    "target_hidden_size": 2816,
    "aux_hidden_state_layer_ids": [3, 10, 18, 25, 28],
    "sample_from_anchor": true,
    "transformer_layer_config": {"model_type": "qwen3", "hidden_size": 2816, "vocab_size": 262144,
                                 "num_hidden_layers": 5}
  })");
  const ModelConfig s = import_hf_config(j);
  EXPECT_EQ(s.architecture, "DSparkDraftModel");
  EXPECT_TRUE(s.sample_from_anchor);
  EXPECT_EQ(s.block_size, 8);  // the anchor layout: block_size = N
  EXPECT_EQ(s.query_slots(), 8);
  EXPECT_EQ(s.hidden_size, 2816);
  EXPECT_EQ(s.vocab_size, 262144);
  EXPECT_EQ(s.draft_vocab(), 32000);
  EXPECT_EQ(s.num_layers, 5);
  EXPECT_EQ(s.num_heads, 32);  // Qwen3Config's defaults
  EXPECT_EQ(s.num_kv_heads, 32);
  EXPECT_EQ(s.head_dim, 128);
  EXPECT_EQ(s.intermediate_size, 22016);
  EXPECT_EQ(s.rope_theta, 10000.0);
  EXPECT_EQ(s.max_position_embeddings, 32768);
  EXPECT_EQ(s.target_hidden_size, 2816);
  EXPECT_EQ(s.target_layer_ids, (std::vector<int>{3, 10, 18, 25, 28}));
  EXPECT_EQ(s.mask_token_id, 4);
  EXPECT_EQ(s.markov_rank, 256);
  // The fill-in layout: block_size 8 = 1 + 7 query slots, N = 7.
  json fill = j;
  fill["sample_from_anchor"] = false;
  const ModelConfig f = import_speculators_config(fill);
  EXPECT_FALSE(f.sample_from_anchor);
  EXPECT_EQ(f.block_size, 7);
  EXPECT_EQ(f.query_slots(), 8);
  // The Markov head's type reads and writes back (gated and rnn heads, section 13).
  for (const MarkovHeadType t : {MarkovHeadType::gated, MarkovHeadType::rnn}) {
    ModelConfig h = f;
    h.markov_head_type = t;
    h.draft_vocab_size = 0;  // the heads run the full vocabulary
    const json out = io::export_speculators_config(h);
    EXPECT_EQ(out.at("markov_head_type"), to_string(t));
    EXPECT_EQ(import_speculators_config(out).markov_head_type, t);
  }
  // Sliding layers: causal, unless sliding_window_non_causal.
  json sliding = fill;
  sliding["transformer_layer_config"]["layer_types"] = {"sliding_attention", "full_attention",
                                                        "sliding_attention", "full_attention",
                                                        "full_attention"};
  sliding["transformer_layer_config"]["sliding_window"] = 2048;
  const ModelConfig causal = import_speculators_config(sliding);
  EXPECT_EQ(causal.attention_of(0), (LayerAttention{2048, true}));
  EXPECT_EQ(causal.attention_of(1), (LayerAttention{0, false}));
  sliding["sliding_window_non_causal"] = true;
  const ModelConfig non_causal = import_speculators_config(sliding);
  EXPECT_EQ(non_causal.attention_of(0), (LayerAttention{2048, false}));
  EXPECT_EQ(non_causal.attention_of(1), (LayerAttention{0, false}));
  // What the form cannot map is refused by name.
  const std::vector<std::pair<void (*)(json&), std::vector<std::string>>> refusals = {
      {[](json& x) { x["speculators_model_type"] = "eagle3"; }, {"'eagle3'", "only 'dspark'"}},
      {[](json& x) { x["architectures"] = {"Eagle3Speculator"}; }, {"DSparkDraftModel"}},
      {[](json& x) { x.erase("sample_from_anchor"); }, {"sample_from_anchor"}},
      {[](json& x) { x.erase("block_size"); }, {"block_size"}},
      {[](json& x) { x.erase("draft_vocab_size"); }, {"draft_vocab_size"}},
      {[](json& x) { x.erase("aux_hidden_state_layer_ids"); }, {"aux_hidden_state_layer_ids"}},
      {[](json& x) { x.erase("transformer_layer_config"); }, {"transformer_layer_config"}},
      {[](json& x) {
         x["sample_from_anchor"] = false;
         x["block_size"] = 1;
       },
       {"block_size", ">= 2"}},
      {[](json& x) { x["markov_head_type"] = "gated"; }, {"markov_head_type 'gated'"}},
      {[](json& x) { x["topk_context"] = 64; }, {"topk_context"}},
      {[](json& x) { x["projector_type"] = "domino"; }, {"projector_type 'domino'"}},
      {[](json& x) { x["shift_label"] = true; }, {"shift_label"}},
      {[](json& x) { x["transformer_layer_config"]["model_type"] = "llama"; },
       {"transformer_layer_config.model_type", "llama"}},
      {[](json& x) { x["transformer_layer_config"]["tie_word_embeddings"] = true; },
       {"tie_word_embeddings"}},
  };
  for (const auto& [edit, needles] : refusals) {
    json bad = j;
    edit(bad);
    SCOPED_TRACE(bad.dump());
    expect_mentions(error_of<ConfigError>([&] { import_hf_config(bad); }), needles);
  }
  // draft_vocab_size in the HF form (contract.md section 11).
  json flat = qwen3_8b();
  flat["draft_vocab_size"] = 32000;
  const ModelConfig c = import_hf_config(flat);
  EXPECT_TRUE(c.reduced_vocab());
  EXPECT_EQ(c.draft_vocab(), 32000);
  EXPECT_EQ(c.vocab_size, 151936);
  // Written back in both forms and read again.
  EXPECT_EQ(io::export_hf_config(c).at("draft_vocab_size"), 32000);
  EXPECT_EQ(import_hf_config(io::export_hf_config(c)).draft_vocab_size, 32000);
  EXPECT_EQ(config_from_json(config_to_json(c)).draft_vocab_size, 32000);
  flat["draft_vocab_size"] = 151936;  // the full vocabulary: no map
  EXPECT_FALSE(import_hf_config(flat).reduced_vocab());
  EXPECT_FALSE(config_to_json(import_hf_config(flat)).contains("draft_vocab_size"));
  flat["draft_vocab_size"] = 151937;
  expect_mentions(error_of<ConfigError>([&] { import_hf_config(flat); }),
                  {"draft_vocab_size", "151937", "exceeds vocab_size", "151936"});
  flat["draft_vocab_size"] = 0;
  expect_mentions(error_of<ConfigError>([&] { import_hf_config(flat); }),
                  {"draft_vocab_size", ">= 1"});
  // Our form: in [1, V], V meaning the full vocabulary; validate() names the field.
  json ours = config_to_json(c);
  ours["draft_vocab_size"] = 151936;
  EXPECT_FALSE(config_from_json(ours).reduced_vocab());
  ours["draft_vocab_size"] = 200000;
  expect_mentions(error_of<ConfigError>([&] { config_from_json(ours); }),
                  {"draft_vocab_size", "200000", "[1, vocab_size = 151936)"});
  ModelConfig bad = c;
  bad.draft_vocab_size = -3;
  expect_mentions(error_of<ConfigError>([&] { bad.validate(); }), {"draft_vocab_size", "-3"});
}

TEST(Config, RefusesDeepSeekV4Drafts) {
  const json v4 = json::parse(R"({
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "hidden_size": 4096,
    "kv_lora_rank": 512,
    "n_routed_experts": 256,
    "dspark_target_layer_ids": [40, 41, 42],
    "dspark_block_size": 5,
    "markov_rank": 256,
    "vocab_size": 129280
  })");
  expect_mentions(error_of<ConfigError>([&] { import_hf_config(v4); }),
                  {"DeepSeek-V4 MLA/MoE drafts are not supported"});
  for (const char* field : {"kv_lora_rank", "n_routed_experts", "dspark_target_layer_ids",
                            "num_nextn_predict_layers"}) {
    SCOPED_TRACE(field);
    json j = qwen3_8b();
    j[field] = 3;
    expect_mentions(error_of<ConfigError>([&] { import_hf_config(j); }),
                    {"DeepSeek-V4 MLA/MoE drafts are not supported", field});
  }
  json mt = qwen3_8b();
  mt["model_type"] = "deepseek_v4";
  expect_mentions(error_of<ConfigError>([&] { import_hf_config(mt); }),
                  {"DeepSeek-V4", "deepseek_v4"});
}

TEST(Config, RefusesWhatTheRuntimeCannotRunExactly) {
  struct Case {
    const char* what;
    void (*edit)(json&);
    std::vector<std::string> needles;
  };
  const std::vector<Case> cases = {
      {"fill-in in the HF form",
       [](json& j) { j["sample_from_anchor"] = false; },
       {"the fill-in layout (sample_from_anchor = false) in a Qwen3DSparkModel config.json",
        "speculators form"}},
      {"unknown head",
       [](json& j) { j["markov_head_type"] = "lstm"; },
       {"markov_head_type", "lstm", "\"vanilla\", \"gated\", \"rnn\""}},
      {"other arch",
       [](json& j) { j["architectures"] = {"Gemma4DSparkModel"}; },
       {"Gemma4DSparkModel", "Qwen3DSparkModel"}},
      {"no arch", [](json& j) { j.erase("architectures"); }, {"'architectures'"}},
      {"model type", [](json& j) { j["model_type"] = "gemma4"; }, {"model_type 'gemma4'"}},
      {"tied", [](json& j) { j["tie_word_embeddings"] = true; }, {"tie_word_embeddings"}},
      {"bias", [](json& j) { j["attention_bias"] = true; }, {"attention_bias"}},
      {"act", [](json& j) { j["hidden_act"] = "gelu"; }, {"hidden_act 'gelu'"}},
      {"yarn", [](json& j) { j["rope_parameters"]["rope_type"] = "yarn"; }, {"rope_type 'yarn'"}},
      {"rope scaling",
       [](json& j) {
         j["rope_scaling"] = {{"type", "linear"}, {"factor", 2}};
       },
       {"RoPE scaling"}},
      {"no theta", [](json& j) { j.erase("rope_parameters"); }, {"rope_theta"}},
      {"mixed layers without a window",
       [](json& j) { j["layer_types"][2] = "sliding_attention"; },
       {"'sliding_window'"}},
      {"is_causal not a bool", [](json& j) { j["is_causal"] = "yes"; }, {"'is_causal'"}},
      {"dflash_config not an object",
       [](json& j) { j["dflash_config"] = 3; },
       {"'dflash_config'", "object"}},
      {"dflash_config.causal not a bool",
       [](json& j) {
         j["dflash_config"] = {{"causal", 1}};
       },
       {"dflash_config", "'causal'"}},
      {"negative window",
       [](json& j) {
         j["layer_types"][0] = "sliding_attention";
         j["sliding_window"] = -4;
       },
       {"'sliding_window'"}},
      {"layer count",
       [](json& j) { j["layer_types"].erase(0); },
       {"'layer_types'", "one entry per layer"}},
      {"odd layer",
       [](json& j) { j["layer_types"][0] = "chunked_attention"; },
       {"chunked_attention"}},
      {"window missing",
       [](json& j) {
         for (auto& t : j["layer_types"]) t = "sliding_attention";
       },
       {"'sliding_window'"}},
      {"implicit sliding",
       [](json& j) { j.erase("layer_types"), j["use_sliding_window"] = true; },
       {"use_sliding_window"}},
      {"final tap",
       [](json& j) {
         j["target_layer_ids"] = {1, 9, 35};
       },
       {"target_layer_ids", "35", "num_target_layers 36"}},
      {"missing block", [](json& j) { j.erase("block_size"); }, {"missing field 'block_size'"}},
      {"missing rank", [](json& j) { j.erase("markov_rank"); }, {"missing field 'markov_rank'"}},
      {"missing mask",
       [](json& j) { j.erase("mask_token_id"); },
       {"missing field 'mask_token_id'"}},
      {"string size", [](json& j) { j["hidden_size"] = "4096"; }, {"'hidden_size'", "integer"}},
      {"negative layers",
       [](json& j) { j["num_hidden_layers"] = -5; },
       {"'num_hidden_layers'", ">= 1"}},
      {"heads vs kv", [](json& j) { j["num_key_value_heads"] = 5; }, {"num_heads", "num_kv_heads"}},
      {"head_dim odd", [](json& j) { j["head_dim"] = 127; }, {"head_dim", "even"}},
      {"block 65", [](json& j) { j["block_size"] = 65; }, {"block_size", "[1, 64]"}},
      {"mask id", [](json& j) { j["mask_token_id"] = 151936; }, {"mask_token_id"}},
      {"not increasing",
       [](json& j) {
         j["target_layer_ids"] = {9, 1};
       },
       {"target_layer_ids", "increasing"}},
      {"eps", [](json& j) { j["rms_norm_eps"] = 0; }, {"rms_norm_eps"}},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    json j = qwen3_8b();
    k.edit(j);
    expect_mentions(error_of<ConfigError>([&] { import_hf_config(j); }), k.needles);
  }
}

TEST(Config, FilesAreDetectedAndErrorsNameThePath) {
  test::TempDir dir;
  const ModelConfig muse = preset_config("tiny", "muse");
  save_config_file(muse, dir / "ours.json");
  expect_same(muse, load_config_file(dir / "ours.json"));
  test::write_file(dir / "hf.json", kQwen3_8bDSpark);
  EXPECT_EQ(load_config_file(dir / "hf.json").architecture, "Qwen3DSparkModel");

  test::write_file(dir / "broken.json", "{\"hidden_size\": 4096,");
  expect_mentions(error_of<ConfigError>([&] { load_config_file(dir / "broken.json"); }),
                  {dir / "broken.json", "not valid JSON"});
  // A text file as config.json: where the syntax breaks, never its bytes.
  test::write_file(dir / "text.json", "{\"hidden_size\": \"SECRET-WORD:/root:/bin/bash\n");
  const std::string text_msg = error_of<ConfigError>([&] { load_config_file(dir / "text.json"); });
  expect_mentions(text_msg, {"not valid JSON", "byte"});
  EXPECT_EQ(text_msg.find("SECRET"), std::string::npos) << text_msg;
  json fill_in = qwen3_8b();
  fill_in["sample_from_anchor"] = false;
  test::write_file(dir / "fill.json", fill_in.dump());
  expect_mentions(error_of<ConfigError>([&] { load_config_file(dir / "fill.json"); }),
                  {dir / "fill.json", "sample_from_anchor = false"});
  expect_mentions(error_of<ConfigError>([&] { load_config_file(dir / "absent.json"); }),
                  {dir / "absent.json"});
  ModelConfig bad = muse;
  bad.head_dim = 7;
  expect_mentions(error_of<ConfigError>([&] { save_config_file(bad, dir / "bad.json"); }),
                  {"head_dim"});
}

TEST(Config, EnumNames) {
  EXPECT_STREQ(to_string(NormGain::weight), "weight");
  EXPECT_STREQ(to_string(NormGain::one_plus_weight), "one_plus_weight");
  EXPECT_STREQ(to_string(NormGain::none), "none");
  EXPECT_STREQ(to_string(LayerStyle::pre_norm), "pre_norm");
  EXPECT_STREQ(to_string(LayerStyle::sandwich), "sandwich");
  EXPECT_STREQ(to_string(ResidualKind::plain), "plain");
  EXPECT_STREQ(to_string(ResidualKind::norm_preserving), "norm_preserving");
  EXPECT_STREQ(to_string(StreamDType::bf16), "bf16");
  EXPECT_STREQ(to_string(StreamDType::f32), "f32");
  EXPECT_STREQ(to_string(RopeStyle::neox), "neox");
  EXPECT_STREQ(to_string(RopeStyle::gptj), "gptj");
}

// Per-position calibration of the confidences (STS, contract.md 9.1): `confidence_temperatures`
// in both forms, read back exactly as fp32; refused without the head, with a count other than
// block_size, and with a value that is not finite and > 0.
TEST(Config, ConfidenceTemperaturesRoundTripAndRefusals) {
  json flat = qwen3_8b();
  flat["enable_confidence_head"] = true;
  flat["confidence_head_with_markov"] = true;
  EXPECT_TRUE(import_hf_config(flat).confidence_temperatures.empty());
  const std::vector<float> t = {0.9f, 1.0f, 1.1f, 1.25f, 1.5f, 2.0f, 0.3f};
  flat["confidence_temperatures"] = t;
  const ModelConfig c = import_hf_config(flat);
  EXPECT_EQ(c.confidence_temperatures, t);
  EXPECT_EQ(import_hf_config(io::export_hf_config(c)).confidence_temperatures, t);
  EXPECT_EQ(config_from_json(config_to_json(c)).confidence_temperatures, t);
  flat["confidence_temperatures"] = std::vector<float>{1.0f, 2.0f};
  expect_mentions(error_of<ConfigError>([&] { import_hf_config(flat); }),
                  {"confidence_temperatures", "block_size 7", "got 2"});
  flat["confidence_temperatures"] = std::vector<double>{1, 1, 1, 0, 1, 1, 1};
  expect_mentions(error_of<ConfigError>([&] { import_hf_config(flat); }),
                  {"confidence_temperatures", "entry 3", "> 0"});
  flat["confidence_temperatures"] = std::vector<double>{1, 1, 1, 1, 1, 1, 1e300};
  expect_mentions(error_of<ConfigError>([&] { import_hf_config(flat); }),
                  {"confidence_temperatures", "fp32"});
  flat["confidence_temperatures"] = "1.0";
  expect_mentions(error_of<ConfigError>([&] { import_hf_config(flat); }),
                  {"confidence_temperatures", "list"});
  json ours = config_to_json(c);
  ours["enable_confidence_head"] = false;
  ours["confidence_head_with_markov"] = false;
  expect_mentions(error_of<ConfigError>([&] { config_from_json(ours); }),
                  {"confidence_temperatures", "off"});
}

// The top-k Markov variant (contract.md section 12): `markov_topk` in both forms, 0 = off,
// refused below 0, above V, without a Markov head and with a reduced vocabulary; the union
// form (`markov_bias_topk`, 12.5) in both forms, refused out of range and without markov_topk.
TEST(Config, MarkovTopkRoundTripsAndIsRefusedWhereItCannotRun) {
  json flat = qwen3_8b();
  EXPECT_EQ(import_hf_config(flat).markov_topk, 0);
  EXPECT_FALSE(config_to_json(import_hf_config(flat)).contains("markov_topk"));
  flat["markov_topk"] = 64;
  const ModelConfig c = import_hf_config(flat);
  EXPECT_TRUE(c.topk_markov());
  EXPECT_EQ(c.markov_topk, 64);
  EXPECT_EQ(io::export_hf_config(c).at("markov_topk"), 64);
  EXPECT_EQ(import_hf_config(io::export_hf_config(c)).markov_topk, 64);
  EXPECT_EQ(config_to_json(c).at("markov_topk"), 64);
  EXPECT_EQ(config_from_json(config_to_json(c)).markov_topk, 64);
  flat["markov_topk"] = 151936;  // k = V: every id a candidate
  EXPECT_EQ(import_hf_config(flat).markov_topk, 151936);
  flat["markov_topk"] = 151937;
  expect_mentions(error_of<ConfigError>([&] { import_hf_config(flat); }),
                  {"markov_topk", "151937", "vocab_size = 151936"});
  flat["markov_topk"] = -1;
  expect_mentions(error_of<ConfigError>([&] { import_hf_config(flat); }), {"markov_topk", "-1"});
  flat["markov_topk"] = 8;
  flat["markov_bias_topk"] = 0;  // the union form off: accepted
  EXPECT_EQ(import_hf_config(flat).markov_topk, 8);
  flat["markov_bias_topk"] = 16;
  const ModelConfig u = import_hf_config(flat);
  EXPECT_EQ(u.markov_bias_topk, 16);
  EXPECT_EQ(io::export_hf_config(u).at("markov_bias_topk"), 16);
  EXPECT_EQ(config_from_json(config_to_json(u)).markov_bias_topk, 16);
  EXPECT_FALSE(config_to_json(c).contains("markov_bias_topk"));
  flat["markov_bias_topk"] = 151937;
  expect_mentions(error_of<ConfigError>([&] { import_hf_config(flat); }),
                  {"markov_bias_topk", "151937"});
  flat["markov_bias_topk"] = -2;
  expect_mentions(error_of<ConfigError>([&] { import_hf_config(flat); }),
                  {"markov_bias_topk", "-2"});
  flat["markov_bias_topk"] = 16;
  flat["markov_topk"] = 0;
  expect_mentions(error_of<ConfigError>([&] { import_hf_config(flat); }),
                  {"markov_bias_topk", "markov_topk"});
  flat["markov_topk"] = 8;
  flat.erase("markov_bias_topk");
  flat["draft_vocab_size"] = 32000;
  expect_mentions(error_of<ConfigError>([&] { import_hf_config(flat); }),
                  {"markov_topk", "reduced draft vocabulary", "32000"});
  // Our form: the same field, the same refusals (validate() names it).
  json ours = config_to_json(c);
  ours["markov_topk"] = -5;
  expect_mentions(error_of<ConfigError>([&] { config_from_json(ours); }), {"markov_topk", "-5"});
  ours["markov_topk"] = 0;
  EXPECT_FALSE(config_from_json(ours).topk_markov());
  ours["markov_topk"] = "8";
  expect_mentions(error_of<ConfigError>([&] { config_from_json(ours); }),
                  {"markov_topk", "integer"});
  ours["markov_topk"] = 4;
  ours["markov_bias_topk"] = 4;
  EXPECT_EQ(config_from_json(ours).markov_bias_topk, 4);
  ours["markov_bias_topk"] = -4;
  expect_mentions(error_of<ConfigError>([&] { config_from_json(ours); }),
                  {"markov_bias_topk", "-4"});
  ours.erase("markov_bias_topk");
  ModelConfig no_head = c;
  no_head.markov_rank = 0;
  no_head.confidence_head = no_head.confidence_head_with_markov = false;
  expect_mentions(error_of<ConfigError>([&] { no_head.validate(); }),
                  {"markov_topk", "markov_rank is 0"});
}

// The gated and rnn Markov heads (contract.md section 13): markov_head_type in both forms
// (absent = vanilla, written by our JSON only when not vanilla), round trips, and the refusals
// (no Markov head, the top-k loop, a reduced vocabulary, an unknown type).
TEST(Config, MarkovHeadTypeRoundTripsAndIsRefusedWhereItCannotRun) {
  json flat = qwen3_8b();
  EXPECT_EQ(import_hf_config(flat).markov_head_type, MarkovHeadType::vanilla);
  EXPECT_FALSE(config_to_json(import_hf_config(flat)).contains("markov_head_type"));
  for (const char* type : {"gated", "rnn"}) {
    SCOPED_TRACE(type);
    flat["markov_head_type"] = type;
    const ModelConfig c = import_hf_config(flat);
    EXPECT_TRUE(c.markov_head_proj());
    EXPECT_EQ(std::string(to_string(c.markov_head_type)), type);
    const bool rnn = std::string(type) == "rnn";
    EXPECT_EQ(c.markov_proj_rows(), rnn ? 3 * 256 : 256);
    EXPECT_EQ(c.markov_proj_inputs(), rnn ? 2 * 256 + 4096 : 4096 + 256);
    EXPECT_EQ(io::export_hf_config(c).at("markov_head_type"), type);
    EXPECT_EQ(import_hf_config(io::export_hf_config(c)).markov_head_type, c.markov_head_type);
    EXPECT_EQ(config_to_json(c).at("markov_head_type"), type);
    EXPECT_EQ(config_from_json(config_to_json(c)).markov_head_type, c.markov_head_type);
    json topk = flat;
    topk["markov_topk"] = 8;
    expect_mentions(error_of<ConfigError>([&] { import_hf_config(topk); }),
                    {"markov_head_type", type, "markov_topk 8", "not supported"});
    json reduced = flat;
    reduced["draft_vocab_size"] = 32000;
    expect_mentions(error_of<ConfigError>([&] { import_hf_config(reduced); }),
                    {"markov_head_type", type, "reduced draft vocabulary", "32000"});
    json no_head = flat;
    no_head["markov_rank"] = 0;
    no_head["enable_confidence_head"] = false;
    expect_mentions(error_of<ConfigError>([&] { import_hf_config(no_head); }),
                    {"markov_head_type", type, "markov_rank is 0"});
    json ours = config_to_json(c);
    ours["markov_head_type"] = "Gated";
    expect_mentions(error_of<ConfigError>([&] { config_from_json(ours); }),
                    {"markov_head_type", "Gated", "\"vanilla\", \"gated\", \"rnn\""});
    ours["markov_head_type"] = 1;
    expect_mentions(error_of<ConfigError>([&] { config_from_json(ours); }), {"markov_head_type"});
    ours["markov_head_type"] = "vanilla";
    EXPECT_FALSE(config_from_json(ours).markov_head_proj());
  }
  EXPECT_EQ(preset_config("tiny-gated").markov_head_type, MarkovHeadType::gated);
  EXPECT_EQ(preset_config("tiny-rnn", "muse").markov_head_type, MarkovHeadType::rnn);
}

}  // namespace
}  // namespace sparkdraft
