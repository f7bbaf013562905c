// Checkpoints: synthetic tiny checkpoints of both styles load, are non-zero,
// sanely scaled and deterministic per seed; every malformed or unsupported
// checkpoint is refused with a message naming the tensor, field or file.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <filesystem>

#include <nlohmann/json.hpp>

#include "common/errors.h"
#include "common/files.h"
#include "io/hf_config.h"
#include "io/poke.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using test::error_of;
using test::expect_mentions;

// Tensors to write by hand: the expected set, fp32 first (alignment), each
// filled with a constant non-zero byte so that tests can edit the list freely.
std::vector<TensorSpec> aligned_specs(const ModelConfig& c) {
  std::vector<TensorSpec> specs = expected_tensors(c);
  std::stable_sort(specs.begin(), specs.end(), [](const TensorSpec& a, const TensorSpec& b) {
    return dtype_size(a.dtype) > dtype_size(b.dtype);
  });
  return specs;
}

void write_tensors(const std::string& path, const std::vector<TensorSpec>& specs,
                   uint8_t byte = 0x3c) {
  SafetensorsWriter w;
  for (const TensorSpec& s : specs)
    w.add(s.name, s.dtype, s.shape, [byte](uint8_t* d, size_t n) { std::fill(d, d + n, byte); });
  w.write(path);
}

// A checkpoint directory with our config.json and the given tensors.
void write_checkpoint(const std::string& dir, const ModelConfig& c,
                      const std::vector<TensorSpec>& specs) {
  fs::create_directories(dir);
  save_config_file(c, (fs::path(dir) / "config.json").string());
  write_tensors((fs::path(dir) / "model.safetensors").string(), specs);
}

TensorSpec& spec_named(std::vector<TensorSpec>& specs, const std::string& name) {
  for (TensorSpec& s : specs)
    if (s.name == name) return s;
  throw std::runtime_error("no spec " + name);
}

float bf16_value(const uint8_t* p, int64_t i) {
  bf16 b;
  std::memcpy(&b, p + 2 * i, 2);
  return to_f32(b);
}

struct Stats {
  double min = INFINITY, max = -INFINITY, mean = 0, rms = 0;
  int64_t zeros = 0, non_finite = 0;
};

Stats stats_of(const TensorInfo& t) {
  Stats s;
  const int64_t n = t.numel();
  double sum = 0, sq = 0;
  for (int64_t i = 0; i < n; ++i) {
    float v;
    if (t.dtype == DType::f32)
      std::memcpy(&v, t.data + 4 * i, 4);
    else
      v = bf16_value(t.data, i);
    if (!std::isfinite(v)) ++s.non_finite;
    if (v == 0.0f) ++s.zeros;
    s.min = std::min<double>(s.min, v);
    s.max = std::max<double>(s.max, v);
    sum += v;
    sq += static_cast<double>(v) * v;
  }
  s.mean = sum / n;
  s.rms = std::sqrt(sq / n);
  return s;
}

TEST(Checkpoint, ExpectedTensorsFollowTheConfig) {
  const ModelConfig q = preset_config("tiny", "qwen3");
  const ModelConfig m = preset_config("tiny", "muse");
  EXPECT_EQ(expected_tensors(q).size(), 7u + 2 * 11);
  EXPECT_EQ(expected_tensors(m).size(), 7u + 2 * 18);  // the o-norm has no weight
  const auto specs = expected_tensors(q);
  auto find = [&](const std::vector<TensorSpec>& v, const std::string& name) -> const TensorSpec* {
    for (const auto& s : v)
      if (s.name == name) return &s;
    return nullptr;
  };
  ASSERT_NE(find(specs, "fc.weight"), nullptr);
  EXPECT_EQ(find(specs, "fc.weight")->shape, (std::vector<int64_t>{64, 3 * 48}));
  EXPECT_EQ(find(specs, "layers.1.self_attn.k_proj.weight")->shape, (std::vector<int64_t>{32, 64}));
  EXPECT_EQ(find(specs, "layers.1.self_attn.o_proj.weight")->shape, (std::vector<int64_t>{64, 64}));
  EXPECT_EQ(find(specs, "layers.0.mlp.down_proj.weight")->shape, (std::vector<int64_t>{64, 160}));
  EXPECT_EQ(find(specs, "markov_head.markov_w2.weight")->shape, (std::vector<int64_t>{1000, 64}));
  EXPECT_EQ(find(specs, "layers.0.self_attn.g_proj.weight"), nullptr);
  const auto mspecs = expected_tensors(m);
  ASSERT_NE(find(mspecs, "layers.1.mlp_residual.beta"), nullptr);
  EXPECT_EQ(find(mspecs, "layers.1.mlp_residual.beta")->dtype, DType::f32);
  EXPECT_EQ(find(mspecs, "layers.0.self_attn.o_norm.weight"), nullptr);
  ModelConfig weighted = m;
  weighted.o_norm_weight = true;
  ASSERT_NE(find(expected_tensors(weighted), "layers.0.self_attn.o_norm.weight"), nullptr);
  EXPECT_EQ(find(expected_tensors(weighted), "layers.0.self_attn.o_norm.weight")->shape,
            (std::vector<int64_t>{16}));
  EXPECT_NE(find(mspecs, "layers.0.pre_feedforward_layernorm.weight"), nullptr);
  ModelConfig none = q;
  none.norm_gain = NormGain::none;
  for (const auto& s : expected_tensors(none))
    EXPECT_EQ(s.name.find("norm"), std::string::npos) << s.name;
  // The published Qwen3-8B draft: 2,371,077,376 bf16 parameters (4.74 GB).
  size_t bytes = 0;
  for (const auto& s : expected_tensors(preset_config("qwen3-8b"))) {
    size_t n = dtype_size(s.dtype);
    for (int64_t d : s.shape) n *= static_cast<size_t>(d);
    bytes += n;
  }
  EXPECT_EQ(bytes, size_t{2371077376} * 2);
}

TEST(Checkpoint, Presets) {
  EXPECT_EQ(preset_names(), (std::vector<std::string>{"tiny", "tiny-conf", "tiny-d2t", "tiny-topk",
                                                      "tiny-topk-union", "tiny-gated", "tiny-rnn",
                                                      "tiny-fillin", "qwen3-8b", "muse"}));
  EXPECT_EQ(preset_config("tiny-gated").markov_head_type, MarkovHeadType::gated);
  EXPECT_EQ(preset_config("tiny-rnn", "muse").markov_head_type, MarkovHeadType::rnn);
  EXPECT_EQ(preset_config("tiny").markov_head_type, MarkovHeadType::vanilla);
  const ModelConfig fill = preset_config("tiny-fillin");
  EXPECT_FALSE(fill.sample_from_anchor);
  EXPECT_EQ(fill.block_size, 7);
  EXPECT_EQ(fill.query_slots(), 8);
  EXPECT_EQ(preset_config("tiny-topk").markov_topk, 16);
  EXPECT_EQ(preset_config("tiny-topk-union").markov_topk, 16);
  EXPECT_EQ(preset_config("tiny-topk-union").markov_bias_topk, 8);
  EXPECT_EQ(preset_config("tiny-topk", "muse").markov_topk, 16);
  const ModelConfig d2t = preset_config("tiny-d2t");
  EXPECT_TRUE(d2t.reduced_vocab());
  EXPECT_EQ(d2t.draft_vocab(), 612);
  EXPECT_EQ(d2t.vocab_size, 1000);
  EXPECT_FALSE(preset_config("tiny").reduced_vocab());
  const ModelConfig conf = preset_config("tiny-conf");
  EXPECT_TRUE(conf.confidence_head && conf.confidence_head_with_markov);
  EXPECT_EQ(conf.confidence_inputs(), 64 + 64);
  EXPECT_FALSE(preset_config("tiny").confidence_head);
  const ModelConfig q8 = preset_config("qwen3-8b");
  EXPECT_EQ(q8.hidden_size, 4096);
  EXPECT_EQ(q8.vocab_size, 151936);
  EXPECT_EQ(q8.target_layer_ids, (std::vector<int>{1, 9, 17, 25, 33}));
  EXPECT_EQ(q8.layer_style, LayerStyle::pre_norm);
  const ModelConfig muse = preset_config("muse");
  EXPECT_EQ(muse.num_heads, 128);
  EXPECT_EQ(muse.head_dim, 64);
  EXPECT_EQ(muse.layer_style, LayerStyle::sandwich);
  EXPECT_EQ(muse.residual_kind, ResidualKind::norm_preserving);
  EXPECT_EQ(muse.stream_dtype, StreamDType::f32);
  EXPECT_EQ(muse.norm_gain, NormGain::one_plus_weight);
  EXPECT_EQ(muse.rope_style, RopeStyle::gptj);
  EXPECT_TRUE(muse.output_gate && muse.o_norm && muse.qk_norm && muse.context_layer_norm);
  EXPECT_FALSE(muse.o_norm_weight);  // the open Muse Spark draft's o-norm has no weight
  EXPECT_EQ(muse.o_norm_gain(), NormGain::none);
  for (int l = 0; l < muse.num_layers; ++l)
    EXPECT_EQ(muse.attention_of(l), (LayerAttention{2048, true})) << "layer " << l;
  EXPECT_TRUE(q8.layer_attention.empty());
  EXPECT_FALSE(muse.v_norm);
  ASSERT_TRUE(muse.logit_multiplier && muse.logit_soft_cap);
  EXPECT_EQ(*muse.logit_multiplier, 0.7f);
  EXPECT_EQ(*muse.logit_soft_cap, 30.0f);
  EXPECT_EQ(preset_config("qwen3-8b", "muse").layer_style, LayerStyle::sandwich);
  EXPECT_EQ(preset_config("muse", "qwen3").layer_style, LayerStyle::pre_norm);
  expect_mentions(error_of<ConfigError>([] { preset_config("llama"); }),
                  {"'llama'", "tiny", "qwen3-8b", "muse"});
  expect_mentions(error_of<ConfigError>([] { preset_config("tiny", "gemma"); }),
                  {"'gemma'", "qwen3", "muse"});
}

TEST(Checkpoint, SyntheticQwen3StyleLoadsWithAnHfConfig) {
  test::TempDir dir;
  const ModelConfig c = preset_config("tiny", "qwen3");
  SyntheticOptions o;
  o.seed = 11;
  std::vector<std::pair<size_t, size_t>> calls;
  o.progress = [&](size_t done, size_t total) { calls.emplace_back(done, total); };
  write_synthetic_checkpoint(c, dir.path(), o);
  ASSERT_FALSE(calls.empty());
  for (size_t i = 1; i < calls.size(); ++i) EXPECT_GE(calls[i].first, calls[i - 1].first);

  // The DeepSpec path: config.json is the HF form.
  const json cj = json::parse(test::read_file(dir / "config.json"));
  EXPECT_EQ(cj.at("architectures"), json::array({"Qwen3DSparkModel"}));
  EXPECT_FALSE(cj.contains("format"));

  const Checkpoint ck = Checkpoint::load(dir.path());
  EXPECT_EQ(config_to_json(ck.config()), config_to_json(c));
  EXPECT_EQ(ck.dir(), dir.path());
  EXPECT_EQ(ck.total_bytes(), calls.back().second);
  EXPECT_EQ(calls.back().first, calls.back().second);
  const DraftWeights& w = ck.weights();
  for (const bf16* p :
       {w.embed, w.lm_head, w.fc, w.hidden_norm, w.final_norm, w.markov_w1, w.markov_w2})
    EXPECT_NE(p, nullptr);
  ASSERT_EQ(w.layers.size(), 2u);
  for (const LayerWeights& l : w.layers) {
    for (const bf16* p : {l.input_norm, l.post_attn_norm, l.q_proj, l.k_proj, l.v_proj, l.o_proj,
                          l.q_norm, l.k_norm, l.gate_proj, l.up_proj, l.down_proj})
      EXPECT_NE(p, nullptr);
    for (const bf16* p : {l.pre_ffn_norm, l.post_ffn_norm, l.g_proj, l.o_norm})
      EXPECT_EQ(p, nullptr);
    for (const float* p : {l.attn_alpha, l.attn_beta, l.mlp_alpha, l.mlp_beta})
      EXPECT_EQ(p, nullptr);
  }
  // Pointers are into the file: the embedding row of the mask token is the file's.
  auto file = SafetensorsFile::open(dir / "model.safetensors");
  const TensorInfo* embed = file->find("embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(std::memcmp(embed->data, w.embed, embed->nbytes), 0);
}

TEST(Checkpoint, SyntheticWeightsAreNonZeroAndSanelyScaled) {
  for (const char* style : {"qwen3", "muse"}) {
    SCOPED_TRACE(style);
    test::TempDir dir;
    const ModelConfig c = preset_config("tiny", style);
    SyntheticOptions o;
    o.seed = 3;
    write_synthetic_checkpoint(c, dir.path(), o);
    auto file = SafetensorsFile::open(dir / "model.safetensors");
    EXPECT_EQ(file->metadata().at("seed"), "3");
    for (const TensorSpec& spec : expected_tensors(c)) {
      SCOPED_TRACE(spec.name);
      const TensorInfo* t = file->find(spec.name);
      ASSERT_NE(t, nullptr);
      const Stats s = stats_of(*t);
      EXPECT_EQ(s.zeros, 0);
      EXPECT_EQ(s.non_finite, 0);
      const std::string& n = spec.name;
      if (spec.dtype == DType::f32) {  // residual alpha / beta
        EXPECT_GT(s.min, 0.9);
        EXPECT_LT(s.max, 1.1);
      } else if (spec.shape.size() == 1) {  // norm gains: center +- 0.1, then rounded to bf16
        const float center = c.norm_gain == NormGain::one_plus_weight ? 0.0f : 1.0f;
        EXPECT_GE(s.min, round_bf16(center - 0.1f));
        EXPECT_LE(s.max, round_bf16(center + 0.1f));
        EXPECT_GT(s.max - s.min, 0.05);
      } else if (n == "embed_tokens.weight" || n == "markov_head.markov_w1.weight") {
        EXPECT_NEAR(s.rms, 1.0, 0.05);
        EXPECT_NEAR(s.mean, 0.0, 0.05);
      } else {  // projections: variance 1 / fan_in
        const double expected = 1.0 / std::sqrt(static_cast<double>(spec.shape[1]));
        EXPECT_NEAR(s.rms, expected, 0.1 * expected);
        EXPECT_LT(std::fabs(s.mean), 0.1 * expected);
      }
    }
    // The Markov bias w2 @ w1[prev] is O(1).
    const TensorInfo* w1 = file->find("markov_head.markov_w1.weight");
    const TensorInfo* w2 = file->find("markov_head.markov_w2.weight");
    const int r = c.markov_rank;
    for (int64_t prev : {int64_t{0}, int64_t{17}, c.mask_token_id}) {
      double sq = 0;
      for (int v = 0; v < c.vocab_size; ++v) {
        float acc = 0;
        for (int k = 0; k < r; ++k)
          acc += bf16_value(w2->data, int64_t{v} * r + k) * bf16_value(w1->data, prev * r + k);
        sq += static_cast<double>(acc) * acc;
      }
      const double rms = std::sqrt(sq / c.vocab_size);
      EXPECT_GT(rms, 0.5) << "prev " << prev;
      EXPECT_LT(rms, 2.0) << "prev " << prev;
    }
  }
}

TEST(Checkpoint, SyntheticMuseStyleLoadsWithOurConfig) {
  test::TempDir dir;
  const ModelConfig c = preset_config("tiny", "muse");
  write_synthetic_checkpoint(c, dir.path(), SyntheticOptions{});
  const json cj = json::parse(test::read_file(dir / "config.json"));
  EXPECT_EQ(cj.at("format"), "sparkdraft");
  const Checkpoint ck = Checkpoint::load(dir.path());
  EXPECT_EQ(config_to_json(ck.config()), config_to_json(c));
  for (const LayerWeights& l : ck.weights().layers) {
    for (const bf16* p : {l.input_norm, l.post_attn_norm, l.pre_ffn_norm, l.post_ffn_norm, l.g_proj,
                          l.q_norm, l.k_norm})
      EXPECT_NE(p, nullptr);
    EXPECT_EQ(l.o_norm, nullptr);  // weightless o-norm: nothing stored, nothing loaded
    for (const float* p : {l.attn_alpha, l.attn_beta, l.mlp_alpha, l.mlp_beta}) {
      ASSERT_NE(p, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % alignof(float), 0u);
      for (int i = 0; i < c.hidden_size; ++i) {
        EXPECT_GT(p[i], 0.9f) << "i " << i;
        EXPECT_LT(p[i], 1.1f) << "i " << i;
      }
    }
  }
  // A qwen3-style config asked for without the HF form gets ours.
  test::TempDir ours;
  SyntheticOptions o;
  o.hf_config = false;
  write_synthetic_checkpoint(preset_config("tiny", "qwen3"), ours.path(), o);
  EXPECT_EQ(json::parse(test::read_file(ours / "config.json")).at("format"), "sparkdraft");
  EXPECT_NO_THROW(Checkpoint::load(ours.path()));
}

TEST(Checkpoint, SyntheticIsDeterministicPerSeed) {
  for (const char* style : {"qwen3", "muse"}) {
    SCOPED_TRACE(style);
    const ModelConfig c = preset_config("tiny", style);
    test::TempDir a, b, other;
    SyntheticOptions o;
    o.seed = 1234;
    write_synthetic_checkpoint(c, a.path(), o);
    write_synthetic_checkpoint(c, b.path(), o);
    o.seed = 1235;
    write_synthetic_checkpoint(c, other.path(), o);
    const std::string fa = test::read_file(a / "model.safetensors"),
                      fb = test::read_file(b / "model.safetensors");
    const std::string fo = test::read_file(other / "model.safetensors");
    EXPECT_EQ(fa, fb);
    EXPECT_EQ(test::read_file(a / "config.json"), test::read_file(b / "config.json"));
    ASSERT_EQ(fa.size(), fo.size());
    // Same header layout, different weights: compare each tensor.
    auto ta = SafetensorsFile::open(a / "model.safetensors");
    auto to = SafetensorsFile::open(other / "model.safetensors");
    for (const auto& [name, info] : ta->tensors()) {
      const TensorInfo* x = to->find(name);
      ASSERT_NE(x, nullptr) << name;
      size_t same = 0;
      for (size_t i = 0; i < info.nbytes; i += dtype_size(info.dtype))
        same += std::memcmp(info.data + i, x->data + i, dtype_size(info.dtype)) == 0;
      const size_t n = info.nbytes / dtype_size(info.dtype);
      EXPECT_LT(same, n / 2 + 1) << name << ": " << same << " of " << n
                                 << " elements equal across seeds";
    }
  }
}

// Each value depends only on (seed, name, index): the first 1.28M embedding
// values are split across two threads at V = 20000 and made by one thread at
// V = 40000, and must be the same bytes.
TEST(Checkpoint, SyntheticValuesDoNotDependOnTheThreadSplit) {
  ModelConfig small = preset_config("tiny");
  small.vocab_size = 20000;
  ModelConfig large = small;
  large.vocab_size = 40000;
  test::TempDir a, b;
  write_synthetic_checkpoint(small, a.path(), SyntheticOptions{});
  write_synthetic_checkpoint(large, b.path(), SyntheticOptions{});
  auto fa = SafetensorsFile::open(a / "model.safetensors");
  auto fb = SafetensorsFile::open(b / "model.safetensors");
  for (const char* name :
       {"embed_tokens.weight", "lm_head.weight", "markov_head.markov_w2.weight"}) {
    const TensorInfo* x = fa->find(name);
    const TensorInfo* y = fb->find(name);
    ASSERT_TRUE(x && y) << name;
    for (size_t i = 0; i < x->nbytes; i += 2) {
      uint16_t u, v;
      std::memcpy(&u, x->data + i, 2);
      std::memcpy(&v, y->data + i, 2);
      ASSERT_EQ(u, v) << name << " element " << i / 2;
    }
  }
}

TEST(Checkpoint, RefusesAMissingTensor) {
  test::TempDir dir;
  const ModelConfig c = preset_config("tiny");
  auto specs = aligned_specs(c);
  specs.erase(std::remove_if(
                  specs.begin(), specs.end(),
                  [](const TensorSpec& s) { return s.name == "layers.1.self_attn.k_proj.weight"; }),
              specs.end());
  write_checkpoint(dir.path(), c, specs);
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                  {"missing tensor 'layers.1.self_attn.k_proj.weight' in " + dir.path()});
}

// The open Muse Spark draft's o-norm has no weight: its checkpoint stores no
// self_attn.o_norm.weight and loads (o_norm_weight false); the same files with a
// config that asks for a weighted o-norm are refused naming the tensor.
TEST(Checkpoint, WeightlessONormLoadsAndAWeightedOneNeedsItsTensor) {
  test::TempDir dir;
  const ModelConfig c = preset_config("tiny", "muse");
  ASSERT_TRUE(c.o_norm && !c.o_norm_weight);
  write_synthetic_checkpoint(c, dir.path(), SyntheticOptions{});
  const Checkpoint ck = Checkpoint::load(dir.path());
  EXPECT_FALSE(ck.config().o_norm_weight);
  for (const LayerWeights& l : ck.weights().layers) EXPECT_EQ(l.o_norm, nullptr);
  json cj = json::parse(test::read_file(dir / "config.json"));
  EXPECT_EQ(cj.at("o_norm_weight"), false);
  cj["o_norm_weight"] = true;
  test::write_file(dir / "config.json", cj.dump());
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                  {"missing tensor 'layers.0.self_attn.o_norm.weight'"});
}

TEST(Checkpoint, RefusesAWrongShape) {
  test::TempDir dir;
  const ModelConfig c = preset_config("tiny");
  auto specs = aligned_specs(c);
  spec_named(specs, "layers.0.self_attn.o_proj.weight").shape = {64, 65};
  write_checkpoint(dir.path(), c, specs);
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                  {"'layers.0.self_attn.o_proj.weight'", "shape [64, 65]", "expected [64, 64]",
                   "model.safetensors"});
}

TEST(Checkpoint, RefusesAWrongDType) {
  test::TempDir dir;
  const ModelConfig c = preset_config("tiny");
  auto specs = aligned_specs(c);
  spec_named(specs, "layers.1.self_attn.q_norm.weight").dtype = DType::f32;
  write_checkpoint(dir.path(), c, specs);
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                  {"'layers.1.self_attn.q_norm.weight'", "dtype F32, expected BF16"});
  test::TempDir muse_dir;
  const ModelConfig m = preset_config("tiny", "muse");
  auto mspecs = aligned_specs(m);
  spec_named(mspecs, "layers.0.attn_residual.alpha").dtype = DType::bf16;
  write_checkpoint(muse_dir.path(), m, mspecs);
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(muse_dir.path()); }),
                  {"'layers.0.attn_residual.alpha'", "dtype BF16, expected F32"});
}

TEST(Checkpoint, RefusesTruncatedAndCorruptFiles) {
  const ModelConfig c = preset_config("tiny");
  {
    test::TempDir dir;
    write_synthetic_checkpoint(c, dir.path(), SyntheticOptions{});
    const std::string path = dir / "model.safetensors";
    fs::resize_file(path, fs::file_size(path) - 3);
    expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                    {path, "out of range"});
  }
  {
    test::TempDir dir;
    write_synthetic_checkpoint(c, dir.path(), SyntheticOptions{});
    const std::string path = dir / "model.safetensors";
    std::string bytes = test::read_file(path);
    for (int i = 0; i < 8; ++i) bytes[i] = '\x7f';  // header size far past the file
    test::write_file(path, bytes);
    expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                    {path, "header size"});
    bytes = test::read_file(path);
    bytes[0] = 16, std::fill(bytes.begin() + 1, bytes.begin() + 8, '\0');  // cuts the JSON short
    test::write_file(path, bytes);
    expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                    {path, "not valid JSON"});
  }
}

TEST(Checkpoint, RefusesUnsupportedFormatsByTensorName) {
  const ModelConfig c = preset_config("tiny");
  struct Case {
    TensorSpec extra;
    std::string needle;
  };
  const std::vector<Case> cases = {
      {{"layers.0.attn.wkv.weight", DType::bf16, {8, 64}},
       "DeepSeek-V4 MLA draft is not supported"},
      {{"layers.0.attn.wq_a.weight", DType::bf16, {8, 64}},
       "DeepSeek-V4 MLA draft is not supported"},
      {{"mtp.0.main_norm.weight", DType::bf16, {64}}, "DeepSeek-V4 MLA draft is not supported"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.extra.name);
    test::TempDir dir;
    auto specs = aligned_specs(c);
    specs.push_back(k.extra);
    write_checkpoint(dir.path(), c, specs);
    expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                    {k.needle, "'" + k.extra.name + "'"});
  }
}

TEST(Checkpoint, RefusesConfigsOutOfScope) {
  test::TempDir dir;
  write_synthetic_checkpoint(preset_config("tiny"), dir.path(), SyntheticOptions{});
  json cj = json::parse(test::read_file(dir / "config.json"));
  cj["sample_from_anchor"] = false;
  test::write_file(dir / "config.json", cj.dump());
  expect_mentions(error_of<ConfigError>([&] { Checkpoint::load(dir.path()); }),
                  {"the fill-in layout (sample_from_anchor = false) in a Qwen3DSparkModel"});
}

// The fill-in preset (contract.md section 14) is written in the speculators form and loads
// back to its config; so does a fill-in draft with a reduced vocabulary (its d2t), and our
// JSON carries the muse style's fill-in config.
TEST(Checkpoint, FillInPresetWritesAndLoadsTheSpeculatorsForm) {
  for (const bool reduced : {false, true}) {
    SCOPED_TRACE(reduced);
    test::TempDir dir;
    ModelConfig c = preset_config("tiny-fillin");
    if (reduced) c.draft_vocab_size = 612;
    write_synthetic_checkpoint(c, dir.path(), SyntheticOptions{});
    const json cj = json::parse(test::read_file(dir / "config.json"));
    EXPECT_EQ(cj.at("speculators_model_type"), "dspark");
    EXPECT_EQ(cj.at("architectures"), json::array({"DSparkDraftModel"}));
    EXPECT_EQ(cj.at("block_size"), 8);
    EXPECT_EQ(cj.at("sample_from_anchor"), false);
    EXPECT_EQ(cj.at("draft_vocab_size"), reduced ? 612 : 1000);
    EXPECT_EQ(cj.at("transformer_layer_config").at("hidden_size"), 64);
    const Checkpoint ck = Checkpoint::load(dir.path());
    ModelConfig back = ck.config();
    EXPECT_EQ(back.architecture, "DSparkDraftModel");
    back.architecture = c.architecture;
    EXPECT_EQ(config_to_json(back), config_to_json(c));
  }
  // A speculators checkpoint without the verifier's embed_tokens: the refusal says where
  // to take it from.
  {
    test::TempDir dir;
    const ModelConfig c = preset_config("tiny-fillin");
    std::vector<TensorSpec> specs;
    for (const TensorSpec& s : expected_tensors(c))
      if (s.name != "embed_tokens.weight") specs.push_back(s);
    write_checkpoint(dir.path(), c, specs);
    test::write_file(dir / "config.json", io::export_speculators_config(c).dump());
    expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                    {"missing tensor 'embed_tokens.weight'", "--target-model", "target_dir"});
  }
  test::TempDir dir;
  const ModelConfig muse = preset_config("tiny-fillin", "muse");
  write_synthetic_checkpoint(muse, dir.path(), SyntheticOptions{});
  const json cj = json::parse(test::read_file(dir / "config.json"));
  EXPECT_EQ(cj.at("format"), "sparkdraft");
  EXPECT_EQ(cj.at("sample_from_anchor"), false);
  EXPECT_EQ(cj.at("block_size"), 7);  // our JSON: N
  EXPECT_EQ(config_to_json(Checkpoint::load(dir.path()).config()), config_to_json(muse));
}

// The bytes of a loaded tensor.
std::vector<uint8_t> bytes_of(const LoadedTensor& t) {
  return std::vector<uint8_t>(t.data,
                              t.data + t.numel() * static_cast<int64_t>(dtype_size(t.dtype)));
}

const LoadedTensor& loaded(const Checkpoint& ck, const std::string& name) {
  for (const LoadedTensor& t : ck.tensors())
    if (t.name == name) return t;
  throw std::runtime_error("no loaded tensor " + name);
}

// LoadOptions::target_dir (contract.md 14.3): a speculators checkpoint without the verifier's
// embed_tokens.weight and lm_head.weight loads them from the target model's directory, and
// then equals the whole checkpoint tensor for tensor. The target's names with and without
// "model.", its shards through the index, a target with tied embeddings (lm_head from
// embed_tokens), the draft's own tensors winning over the target's; refused: no target
// directory (the message names the option), a target that does not exist, a target without
// the tensor (and no tie), a target tensor of the wrong shape.
TEST(Checkpoint, SpeculatorsCheckpointTakesTheVerifierWeightsFromTheTargetModel) {
  test::TempDir root;
  const ModelConfig c = preset_config("tiny-fillin");
  const std::string whole = root / "whole", draft = root / "draft";
  write_synthetic_checkpoint(c, whole, SyntheticOptions{});
  const Checkpoint full = Checkpoint::load(whole);
  const LoadedTensor& embed = loaded(full, "embed_tokens.weight");
  const LoadedTensor& head = loaded(full, "lm_head.weight");
  // The draft without them: every other tensor copied from the whole checkpoint.
  fs::create_directories(draft);
  fs::copy_file(fs::path(whole) / "config.json", fs::path(draft) / "config.json");
  {
    SafetensorsWriter w;
    for (const LoadedTensor& t : full.tensors())
      if (t.name != "embed_tokens.weight" && t.name != "lm_head.weight")
        w.add_copy(t.name, t.dtype, t.shape, t.data);
    w.write((fs::path(draft) / "model.safetensors").string());
  }
  auto target_with = [&](const std::string& dir, const std::vector<std::string>& names,
                         bool prefix) {
    fs::create_directories(dir);
    SafetensorsWriter w;
    // A tensor of the target's own that the draft never reads.
    const std::vector<float> unrelated(12, 1.0f);
    w.add_copy("model.layers.0.mlp.up_proj.weight", DType::f32, {3, 4}, unrelated.data());
    for (const std::string& n : names) {
      const LoadedTensor& t = n == "embed_tokens.weight" ? embed : head;
      w.add_copy((prefix ? "model." : "") + n, t.dtype, t.shape, t.data);
    }
    w.write((fs::path(dir) / "model.safetensors").string());
  };
  auto with_target = [](const std::string& dir) {
    LoadOptions lo;
    lo.target_dir = dir;
    return lo;
  };
  auto expect_whole = [&](const Checkpoint& ck, const std::string& target_file) {
    ASSERT_EQ(ck.tensors().size(), full.tensors().size());
    for (size_t i = 0; i < ck.tensors().size(); ++i) {
      EXPECT_EQ(ck.tensors()[i].name, full.tensors()[i].name);
      EXPECT_EQ(bytes_of(ck.tensors()[i]), bytes_of(full.tensors()[i])) << ck.tensors()[i].name;
    }
    EXPECT_EQ(loaded(ck, "embed_tokens.weight").file, target_file);
    EXPECT_EQ(loaded(ck, "lm_head.weight").file, target_file);
  };

  // Without a target: refused, naming the tensor and the option.
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(draft); }),
                  {"missing tensor 'embed_tokens.weight'", "--target-model"});
  // HF names ("model.embed_tokens.weight", "lm_head.weight") and bare names.
  for (const bool prefix : {true, false}) {
    const std::string target = root / (prefix ? "target_hf" : "target_bare");
    target_with(target, {"embed_tokens.weight", "lm_head.weight"}, prefix);
    expect_whole(Checkpoint::load(draft, with_target(target)),
                 (fs::path(target) / "model.safetensors").string());
  }
  // Shards through the index: embed_tokens in one, lm_head in the other.
  {
    const std::string target = root / "target_shards";
    fs::create_directories(target);
    const std::string a = "model-00001-of-00002.safetensors",
                      b = "model-00002-of-00002.safetensors";
    SafetensorsWriter wa, wb;
    wa.add_copy("model.embed_tokens.weight", embed.dtype, embed.shape, embed.data);
    wb.add_copy("lm_head.weight", head.dtype, head.shape, head.data);
    wa.write((fs::path(target) / a).string());
    wb.write((fs::path(target) / b).string());
    const json index = {{"weight_map", {{"model.embed_tokens.weight", a}, {"lm_head.weight", b}}}};
    test::write_file(fs::path(target) / "model.safetensors.index.json", index.dump());
    const Checkpoint ck = Checkpoint::load(draft, with_target(target));
    EXPECT_EQ(bytes_of(loaded(ck, "embed_tokens.weight")), bytes_of(embed));
    EXPECT_EQ(bytes_of(loaded(ck, "lm_head.weight")), bytes_of(head));
    EXPECT_EQ(loaded(ck, "lm_head.weight").file, (fs::path(target) / b).string());
  }
  // Tied embeddings: no lm_head in the target; its config ties it to embed_tokens.
  {
    const std::string target = root / "target_tied";
    target_with(target, {"embed_tokens.weight"}, true);
    expect_mentions(
        error_of<CheckpointError>([&] { Checkpoint::load(draft, with_target(target)); }),
        {"no 'lm_head.weight'", target, "does not tie"});
    test::write_file(fs::path(target) / "config.json", R"({"tie_word_embeddings": false})");
    expect_mentions(
        error_of<CheckpointError>([&] { Checkpoint::load(draft, with_target(target)); }),
        {"no 'lm_head.weight'"});
    test::write_file(fs::path(target) / "config.json", R"({"tie_word_embeddings": true})");
    const Checkpoint ck = Checkpoint::load(draft, with_target(target));
    EXPECT_EQ(bytes_of(loaded(ck, "lm_head.weight")), bytes_of(embed));
    test::write_file(fs::path(target) / "config.json", R"({"tie_word_embeddings": 1})");
    expect_mentions(
        error_of<CheckpointError>([&] { Checkpoint::load(draft, with_target(target)); }),
        {"tie_word_embeddings is not a boolean"});
  }
  // The draft's own tensors win: the whole checkpoint with a target that holds other bytes.
  {
    const std::string target = root / "target_other";
    fs::create_directories(target);
    SafetensorsWriter w;
    const std::vector<uint8_t> other(embed.numel() * 2, 0x11);
    w.add_copy("model.embed_tokens.weight", embed.dtype, embed.shape, other.data());
    w.add_copy("lm_head.weight", head.dtype, head.shape, other.data());
    w.write((fs::path(target) / "model.safetensors").string());
    expect_whole(Checkpoint::load(whole, with_target(target)),
                 (fs::path(whole) / "model.safetensors").string());
  }
  // Refusals: a target that does not exist (even where the draft needs nothing from it), a
  // file in its place, one without embed_tokens, a wrong shape.
  for (const std::string& ck : {draft, whole})
    expect_mentions(
        error_of<CheckpointError>([&] { Checkpoint::load(ck, with_target(root / "nowhere")); }),
        {"target model directory", "does not exist"});
  expect_mentions(error_of<CheckpointError>(
                      [&] { Checkpoint::load(draft, with_target(whole + "/config.json")); }),
                  {"is not a readable directory"});
  {
    const std::string target = root / "target_headless";
    target_with(target, {"lm_head.weight"}, true);
    expect_mentions(
        error_of<CheckpointError>([&] { Checkpoint::load(draft, with_target(target)); }),
        {"no 'embed_tokens.weight'", target});
  }
  {
    const std::string target = root / "target_narrow";
    fs::create_directories(target);
    SafetensorsWriter w;
    w.add_copy("model.embed_tokens.weight", embed.dtype, {embed.shape[0] / 2, embed.shape[1]},
               embed.data);
    w.add_copy("lm_head.weight", head.dtype, head.shape, head.data);
    w.write((fs::path(target) / "model.safetensors").string());
    expect_mentions(
        error_of<CheckpointError>([&] { Checkpoint::load(draft, with_target(target)); }),
        {"embed_tokens.weight", "shape", target});
  }
}

// A reduced draft vocabulary (contract.md section 11): tiny-d2t loads with lm_head and w2 of
// Vd rows and the resolved, injective map; a map out of range, not injective, of the wrong size
// or dtype, or missing is refused naming the tensor; a d2t in a full-vocabulary checkpoint is
// refused as unused; t2d (training only) is ignored.
TEST(Checkpoint, ReducedDraftVocabulary) {
  const ModelConfig c = preset_config("tiny-d2t");
  test::TempDir dir;
  write_synthetic_checkpoint(c, dir.path(), SyntheticOptions{});
  {
    const Checkpoint ck = Checkpoint::load(dir.path());
    ASSERT_TRUE(ck.config().reduced_vocab());
    ASSERT_NE(ck.weights().draft_ids, nullptr);
    std::vector<bool> seen(1000, false);
    int32_t last = -1;
    for (int d = 0; d < 612; ++d) {
      const int32_t t = ck.weights().draft_ids[d];
      ASSERT_TRUE(t >= 0 && t < 1000) << d;
      EXPECT_GT(t, last) << "the synthetic map is increasing";
      last = t;
      seen[static_cast<size_t>(t)] = true;
    }
    int32_t fill = -1;
    for (int t = 0; t < 1000 && fill < 0; ++t)
      if (!seen[static_cast<size_t>(t)]) fill = t;
    EXPECT_EQ(ck.weights().draft_fill, fill);
    for (const LoadedTensor& t : ck.tensors()) {
      if (t.name == "lm_head.weight") {
        EXPECT_EQ(t.shape, (std::vector<int64_t>{612, 64}));
      }
      if (t.name == "markov_head.markov_w2.weight") {
        EXPECT_EQ(t.shape, (std::vector<int64_t>{612, 64}));
      }
      if (t.name == "markov_head.markov_w1.weight") {
        EXPECT_EQ(t.shape, (std::vector<int64_t>{1000, 64}));
      }
    }
    // A copy shares the map.
    const Checkpoint copy = ck;
    EXPECT_EQ(copy.weights().draft_ids[611], ck.weights().draft_ids[611]);
  }
  const std::string weights = (fs::path(dir.path()) / "model.safetensors").string();
  const std::string original = test::read_file(weights);
  auto poke = [&](int64_t d, int64_t value) {
    test::write_file(weights, original);
    test::poke_tensor(weights, "d2t", d, &value, sizeof value);
  };
  poke(5, 2000);
  expect_mentions(
      error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
      {"tensor 'd2t'", "draft id 5", "target id 2005", "d2t[5] = 2000", "[0, vocab_size = 1000)"});
  poke(0, -1);
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                  {"draft id 0", "target id -1"});
  poke(3, int64_t{1} << 62);
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                  {"draft id 3", "outside [0, vocab_size = 1000)"});
  {
    // Draft id 7 onto draft id 6's target id.
    test::write_file(weights, original);
    const Checkpoint ck = Checkpoint::load(dir.path());
    const int64_t onto = int64_t{ck.weights().draft_ids[6]} - 7;
    poke(7, onto);
    expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                    {"tensor 'd2t'", "draft ids 6 and 7", "not injective"});
  }
  // Wrong size, wrong dtype, missing.
  for (const TensorSpec& bad_d2t :
       {TensorSpec{"d2t", DType::i64, {1000}}, TensorSpec{"d2t", DType::i32, {612}}}) {
    test::TempDir other;
    auto specs = aligned_specs(c);
    spec_named(specs, "d2t") = bad_d2t;
    std::stable_sort(specs.begin(), specs.end(), [](const TensorSpec& a, const TensorSpec& b) {
      return dtype_size(a.dtype) > dtype_size(b.dtype);
    });
    write_checkpoint(other.path(), c, specs);
    expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(other.path()); }),
                    {"tensor 'd2t'", bad_d2t.dtype == DType::i64 ? "shape [1000], expected [612]"
                                                                 : "dtype I32, expected I64"});
  }
  {
    test::TempDir missing;
    auto specs = aligned_specs(c);
    specs.erase(std::remove_if(specs.begin(), specs.end(),
                               [](const TensorSpec& s) { return s.name == "d2t"; }),
                specs.end());
    write_checkpoint(missing.path(), c, specs);
    expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(missing.path()); }),
                    {"missing tensor 'd2t'"});
  }
  {
    // The full vocabulary with a d2t tensor: refused as unused; t2d is ignored.
    const ModelConfig full = preset_config("tiny");
    test::TempDir extra;
    auto specs = aligned_specs(full);
    specs.insert(specs.begin(), TensorSpec{"d2t", DType::i64, {1000}});
    write_checkpoint(extra.path(), full, specs);
    expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(extra.path()); }),
                    {"tensor 'd2t'", "draft_vocab_size is absent"});
    test::TempDir t2d;
    auto specs2 = aligned_specs(full);
    specs2.push_back(TensorSpec{"t2d", DType::bool_, {1000}});
    write_checkpoint(t2d.path(), full, specs2);
    EXPECT_NO_THROW(Checkpoint::load(t2d.path()));
  }
}

TEST(Checkpoint, IgnoresExtraTensorsAndAcceptsTheModelPrefix) {
  const ModelConfig c = preset_config("tiny");
  test::TempDir extra;
  auto specs = aligned_specs(c);
  specs.push_back({"value_head.proj.weight", DType::bf16, {1, c.hidden_size}});
  write_checkpoint(extra.path(), c, specs);
  EXPECT_NO_THROW(Checkpoint::load(extra.path()));

  test::TempDir prefixed;
  auto pspecs = aligned_specs(c);
  for (TensorSpec& s : pspecs)
    if (s.name != "lm_head.weight") s.name = "model." + s.name;  // the HF / vLLM layout
  write_checkpoint(prefixed.path(), c, pspecs);
  const Checkpoint ck = Checkpoint::load(prefixed.path());
  EXPECT_NE(ck.weights().layers.at(1).down_proj, nullptr);
  EXPECT_NE(ck.weights().lm_head, nullptr);

  test::TempDir twice;
  auto tspecs = aligned_specs(c);
  tspecs.push_back({"model.norm.weight", DType::bf16, {c.hidden_size}});
  write_checkpoint(twice.path(), c, tspecs);
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(twice.path()); }),
                  {"'norm.weight'", "twice"});
}

TEST(Checkpoint, RefusesMisalignedTensors) {
  test::TempDir dir;
  const ModelConfig c = preset_config("tiny", "muse");
  auto specs = aligned_specs(c);
  specs.insert(specs.begin(),
               {"odd_extra", DType::bf16, {1}});  // shifts every fp32 tensor by 2 bytes
  write_checkpoint(dir.path(), c, specs);
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                  {"residual", "not aligned"});
}

TEST(Checkpoint, LoadsShardsThroughTheIndex) {
  const ModelConfig c = preset_config("tiny", "muse");
  test::TempDir dir;
  save_config_file(c, dir / "config.json");
  const auto specs = aligned_specs(c);
  const size_t half = specs.size() / 2;
  const std::vector<TensorSpec> first(specs.begin(), specs.begin() + half),
      second(specs.begin() + half, specs.end());
  write_tensors(dir / "model-00001-of-00002.safetensors", first, 0x3c);
  write_tensors(dir / "model-00002-of-00002.safetensors", second, 0x3d);
  json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", json::object()}};
  for (const auto& s : first) index["weight_map"][s.name] = "model-00001-of-00002.safetensors";
  for (const auto& s : second) index["weight_map"][s.name] = "model-00002-of-00002.safetensors";
  test::write_file(dir / "model.safetensors.index.json", index.dump());
  const Checkpoint ck = Checkpoint::load(dir.path());
  // Each pointer reads its own shard's bytes.
  const uint8_t first_byte = *reinterpret_cast<const uint8_t*>(ck.weights().layers[0].attn_alpha);
  const uint8_t last_byte = *reinterpret_cast<const uint8_t*>(ck.weights().markov_w2);
  EXPECT_EQ(first_byte, 0x3c);
  EXPECT_EQ(last_byte, 0x3d);

  json bad = index;
  bad["weight_map"]["norm.weight"] = "model-00003-of-00002.safetensors";
  test::write_file(dir / "model.safetensors.index.json", bad.dump());
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                  {"model-00003-of-00002.safetensors", "missing"});
  bad = index;
  bad["weight_map"]["ghost.weight"] = "model-00001-of-00002.safetensors";
  test::write_file(dir / "model.safetensors.index.json", bad.dump());
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                  {"'ghost.weight'"});
  test::write_file(dir / "model.safetensors.index.json", "{\"weight_map\": 3}");
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }), {"weight_map"});
}

// A tensor the draft knows but the config switches off is refused, naming the
// tensor and the switch (it was ignored: rc 0 and other tokens than the trained
// model's); LoadOptions::allow_unused_weights loads it anyway.
TEST(Checkpoint, RefusesWeightsTheConfigSwitchesOff) {
  struct Case {
    const char* what;
    void (*edit)(ModelConfig&);
    std::string tensor, flag;
  };
  const Case cases[] = {
      {"q_norm without qk_norm", [](ModelConfig& c) { c.qk_norm = false; },
       "layers.0.self_attn.k_norm.weight", "qk_norm is false"},
      {"g_proj without output_gate", [](ModelConfig& c) { c.output_gate = false; },
       "layers.0.self_attn.g_proj.weight", "output_gate is false"},
      {"o_norm weight without it", [](ModelConfig& c) { c.o_norm_weight = false; },
       "layers.0.self_attn.o_norm.weight", "o_norm_weight is false"},
      {"sandwich norms in pre_norm", [](ModelConfig& c) { c.layer_style = LayerStyle::pre_norm; },
       "layers.0.post_feedforward_layernorm.weight", "layer_style is pre_norm"},
      {"residual gains of a plain residual",
       [](ModelConfig& c) { c.residual_kind = ResidualKind::plain; },
       "layers.0.attn_residual.alpha", "residual_kind is plain"},
      {"the confidence head without enable_confidence_head",
       [](ModelConfig& c) { c.confidence_head = c.confidence_head_with_markov = false; },
       "confidence_head.proj.bias", "enable_confidence_head is false"},
      {"a layer past num_layers",
       [](ModelConfig& c) { c.num_layers = 1, c.layer_attention.resize(1); },
       "layers.1.attn_residual.alpha", "num_layers is 1"},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.what);
    ModelConfig full = preset_config("tiny", "muse");
    full.o_norm_weight = true;  // every Muse-style tensor present
    full.confidence_head = full.confidence_head_with_markov = true;
    ModelConfig used = full;
    k.edit(used);
    used.validate();
    test::TempDir dir;
    write_checkpoint(dir.path(), used, aligned_specs(full));
    expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                    {"'" + k.tensor + "'", k.flag, "not used", "--allow-unused-weights"});
    LoadOptions lo;
    lo.allow_unused_weights = true;
    EXPECT_NO_THROW(Checkpoint::load(dir.path(), lo));
  }
}

// The confidence head (contract.md section 9): its tensors load with the flag, in
// the shape the with-Markov flag says; a missing or misshapen one is refused by name.
TEST(Checkpoint, LoadsTheConfidenceHeadItsFlagsDescribe) {
  for (const bool with_markov : {true, false}) {
    SCOPED_TRACE(with_markov ? "with markov" : "plain");
    ModelConfig c = preset_config("tiny");
    c.confidence_head = true;
    c.confidence_head_with_markov = with_markov;
    test::TempDir dir;
    write_synthetic_checkpoint(c, dir.path(), SyntheticOptions{});
    const Checkpoint ck = Checkpoint::load(dir.path());
    EXPECT_TRUE(ck.config().confidence_head);
    EXPECT_EQ(ck.config().confidence_head_with_markov, with_markov);
    ASSERT_NE(ck.weights().confidence_w, nullptr);
    ASSERT_NE(ck.weights().confidence_b, nullptr);
    const int64_t n = with_markov ? 64 + 64 : 64;
    bool found = false;
    for (const LoadedTensor& t : ck.tensors())
      if (t.name == "confidence_head.proj.weight") {
        found = true;
        EXPECT_EQ(t.shape, (std::vector<int64_t>{1, n}));
      }
    EXPECT_TRUE(found);
    // The HF form carries both flags.
    const json cj = json::parse(test::read_file(dir / "config.json"));
    EXPECT_EQ(cj.at("enable_confidence_head"), true);
    EXPECT_EQ(cj.at("confidence_head_with_markov"), with_markov);
  }
  // Flags that disagree with the stored weight's shape.
  ModelConfig plain = preset_config("tiny");
  plain.confidence_head = true;
  ModelConfig markov = plain;
  markov.confidence_head_with_markov = true;
  test::TempDir dir;
  write_checkpoint(dir.path(), markov, aligned_specs(plain));
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                  {"'confidence_head.proj.weight'", "shape [1, 64]", "expected [1, 128]"});
  // The flag without the tensors.
  test::TempDir none;
  write_checkpoint(none.path(), plain, aligned_specs(preset_config("tiny")));
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(none.path()); }),
                  {"missing tensor 'confidence_head.proj.", none.path()});
}

// The gated and rnn Markov heads (contract.md section 13): their projections load under their
// names and shapes (the synthetic presets, in the HF and in our config form); a missing or
// misshapen one is refused by name; a projection the config's markov_head_type does not use
// (vanilla, or the other head's) is refused naming the type.
TEST(Checkpoint, LoadsTheMarkovHeadProjectionItsTypeDescribes) {
  for (const char* preset : {"tiny-gated", "tiny-rnn"}) {
    for (const char* style : {"qwen3", "muse"}) {
      SCOPED_TRACE(std::string(preset) + " " + style);
      const ModelConfig c = preset_config(preset, style);
      const bool rnn = c.markov_head_type == MarkovHeadType::rnn;
      const std::string w = rnn ? "markov_head.joint_proj.weight" : "markov_head.gate_proj.weight";
      const std::string b = rnn ? "markov_head.joint_proj.bias" : "markov_head.gate_proj.bias";
      test::TempDir dir;
      write_synthetic_checkpoint(c, dir.path(), SyntheticOptions{});
      const Checkpoint ck = Checkpoint::load(dir.path());
      EXPECT_EQ(ck.config().markov_head_type, c.markov_head_type);
      ASSERT_NE(ck.weights().markov_proj_w, nullptr);
      ASSERT_NE(ck.weights().markov_proj_b, nullptr);
      const int64_t P = rnn ? 3 * 64 : 64, K = rnn ? 2 * 64 + 64 : 64 + 64;
      int found = 0;
      for (const LoadedTensor& t : ck.tensors()) {
        if (t.name == w) {
          EXPECT_EQ(t.shape, (std::vector<int64_t>{P, K}));
          ++found;
        }
        if (t.name == b) {
          EXPECT_EQ(t.shape, (std::vector<int64_t>{P}));
          ++found;
        }
      }
      EXPECT_EQ(found, 2);
      if (std::string(style) == "qwen3") {
        const json cj = json::parse(test::read_file(dir / "config.json"));
        EXPECT_EQ(cj.at("markov_head_type"), rnn ? "rnn" : "gated");
      }
      // A misshapen weight, a missing bias.
      test::TempDir bad;
      auto specs = aligned_specs(c);
      spec_named(specs, w).shape = {P, K + 1};
      write_checkpoint(bad.path(), c, specs);
      expect_mentions(
          error_of<CheckpointError>([&] { Checkpoint::load(bad.path()); }),
          {"'" + w + "'", "expected [" + std::to_string(P) + ", " + std::to_string(K) + "]"});
      test::TempDir missing;
      specs = aligned_specs(c);
      specs.erase(std::find_if(specs.begin(), specs.end(),
                               [&](const TensorSpec& t) { return t.name == b; }));
      write_checkpoint(missing.path(), c, specs);
      expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(missing.path()); }),
                      {"missing tensor '" + b + "'"});
      // The projection under a vanilla config, and the other head's under this one.
      ModelConfig vanilla = c;
      vanilla.markov_head_type = MarkovHeadType::vanilla;
      test::TempDir unused;
      write_checkpoint(unused.path(), vanilla, aligned_specs(c));
      expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(unused.path()); }),
                      {"'markov_head.", "markov_head_type is vanilla", "not used"});
      LoadOptions lo;
      lo.allow_unused_weights = true;
      EXPECT_EQ(Checkpoint::load(unused.path(), lo).weights().markov_proj_w, nullptr);
      ModelConfig other = c;
      other.markov_head_type = rnn ? MarkovHeadType::gated : MarkovHeadType::rnn;
      auto both = aligned_specs(other);
      for (const TensorSpec& t : aligned_specs(c))
        if (t.name.rfind("markov_head." + std::string(rnn ? "joint" : "gate"), 0) == 0)
          both.push_back(t);
      test::TempDir crossed;
      write_checkpoint(crossed.path(), other, both);
      expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(crossed.path()); }),
                      {std::string("'markov_head.") + (rnn ? "joint" : "gate") + "_proj.",
                       std::string("markov_head_type is ") + (rnn ? "gated" : "rnn")});
    }
  }
}

// Shard names that leave the checkpoint directory ("../", absolute, a symlink
// resolving outside) are refused, and no message quotes a file's bytes (a shard
// of /etc/passwd printed its first 8 bytes as a header size).
TEST(Checkpoint, RefusesShardsOutsideTheDirectory) {
  const ModelConfig c = preset_config("tiny");
  test::TempDir outside;
  write_tensors(outside / "x.safetensors", aligned_specs(c), 0x3c);
  test::write_file(outside / "secret", "SECRET-BYTES-0123456789");
  test::TempDir dir;
  save_config_file(c, dir / "config.json");
  auto index_naming = [&](const std::string& shard) {
    json index = {{"weight_map", json::object()}};
    for (const auto& s : aligned_specs(c)) index["weight_map"][s.name] = shard;
    test::write_file(dir / "model.safetensors.index.json", index.dump());
  };
  const std::string rel = "../" + fs::path(outside.path()).filename().string() + "/x.safetensors";
  for (const std::string& shard : {rel, outside / "x.safetensors", std::string("a/../../x")}) {
    SCOPED_TRACE(shard);
    index_naming(shard);
    expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                    {"leaves the checkpoint directory"});
  }
  fs::create_symlink(outside / "x.safetensors", dir / "link.safetensors");
  index_naming("link.safetensors");
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                  {"'link.safetensors'", "outside the checkpoint directory"});
  // Inside: a symlink to a shard in the directory loads.
  write_tensors(dir / "real.safetensors", aligned_specs(c), 0x3c);
  fs::create_symlink(dir / "real.safetensors", dir / "inner.safetensors");
  index_naming("inner.safetensors");
  EXPECT_NO_THROW(Checkpoint::load(dir.path()));
  // A text file as a shard: refused without quoting it.
  fs::copy_file(outside / "secret", dir / "text.safetensors");
  index_naming("text.safetensors");
  const std::string msg = error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); });
  expect_mentions(msg, {"text.safetensors", "header size"});
  EXPECT_EQ(msg.find("SECRET"), std::string::npos) << msg;
  uint64_t n = 0;  // the first 8 bytes as the reader sees them
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<uint8_t>("SECRET-B"[i]);
  EXPECT_EQ(msg.find(std::to_string(n)), std::string::npos) << msg;
}

// A snapshot of the Hugging Face hub cache loads: <repo>/snapshots/<rev>/ holds links
// to <repo>/blobs/<hash> (the config, the index and every shard); a shard linking
// anywhere else is still refused.
TEST(Checkpoint, LoadsAHuggingFaceCacheSnapshot) {
  const ModelConfig c = preset_config("tiny");
  test::TempDir cache;
  const fs::path repo = fs::path(cache.path()) / "models--org--draft";
  const fs::path blobs = repo / "blobs", snap = repo / "snapshots" / "0123abcd";
  fs::create_directories(blobs);
  fs::create_directories(snap);
  std::vector<TensorSpec> specs = aligned_specs(c), first, second;
  for (size_t i = 0; i < specs.size(); ++i) (i % 2 ? second : first).push_back(specs[i]);
  write_tensors((blobs / "aaa1").string(), first, 0x3c);
  write_tensors((blobs / "bbb2").string(), second, 0x3c);
  save_config_file(c, (blobs / "ccc3").string());
  json index = {{"weight_map", json::object()}};
  for (const auto& s : first) index["weight_map"][s.name] = "model-00001-of-00002.safetensors";
  for (const auto& s : second) index["weight_map"][s.name] = "model-00002-of-00002.safetensors";
  test::write_file((blobs / "ddd4").string(), index.dump());
  fs::create_symlink("../../blobs/aaa1", snap / "model-00001-of-00002.safetensors");
  fs::create_symlink("../../blobs/bbb2", snap / "model-00002-of-00002.safetensors");
  fs::create_symlink("../../blobs/ccc3", snap / "config.json");
  fs::create_symlink("../../blobs/ddd4", snap / "model.safetensors.index.json");
  EXPECT_NO_THROW(Checkpoint::load(snap.string()));
  // A link out of the repository is refused there too.
  test::TempDir elsewhere;
  write_tensors(elsewhere / "x.safetensors", second, 0x3c);
  fs::remove(snap / "model-00002-of-00002.safetensors");
  fs::create_symlink(elsewhere / "x.safetensors", snap / "model-00002-of-00002.safetensors");
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(snap.string()); }),
                  {"'model-00002-of-00002.safetensors'", "outside the checkpoint directory"});
}

// What a message quotes from a file is capped: one tensor entry with a name or a
// shape of megabytes gave a message of 10-52 MB.
TEST(Checkpoint, MessagesQuoteAtMostAFewHundredCharacters) {
  test::TempDir dir;
  const std::string name(1 << 20, 'n');
  std::string shape = "[";
  for (int i = 0; i < 200000; ++i) shape += (i ? ",-1" : "-1");
  shape += "]";
  for (const std::string& header :
       {"{\"" + name + "\": 3}",
        R"({"w": {"dtype": "F32", "shape": )" + shape + R"(, "data_offsets": [0, 8]}})",
        "{\"w\": \"" + name + "\"x}"}) {
    std::string file(8, '\0');
    for (int i = 0; i < 8; ++i) file[i] = static_cast<char>((header.size() >> (8 * i)) & 0xff);
    test::write_file(dir / "big.safetensors", file + header + std::string(8, '\1'));
    const std::string msg =
        error_of<CheckpointError>([&] { SafetensorsFile::open(dir / "big.safetensors"); });
    EXPECT_LT(msg.size(), 1000u) << msg.substr(0, 400);
  }
}

TEST(Checkpoint, RefusesIncompleteDirectories) {
  test::TempDir dir;
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir / "nope"); }),
                  {dir / "nope", "does not exist"});
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                  {"no config.json", dir.path()});
  save_config_file(preset_config("tiny"), dir / "config.json");
  expect_mentions(error_of<CheckpointError>([&] { Checkpoint::load(dir.path()); }),
                  {"no model.safetensors or model.safetensors.index.json", dir.path()});
}

}  // namespace
}  // namespace sparkdraft
