// Checkpoint loading: config.json (ours or HF) plus safetensors weights,
// resolved to the tensors of SPEC section 1 and validated against the config.
//
// Why validate every tensor here: the kernels take raw pointers into the
// mapping and know nothing of names or shapes, so a wrong shape or dtype would
// read garbage rather than fail. Every expected tensor is checked for presence,
// dtype, shape and alignment, with messages that name the tensor and the file.
// Formats out of scope (speculators d2t, DeepSeek-V4 MLA) are recognised by
// their tensor names too, in case a config did not give them away. Extra
// tensors the runtime does not use (confidence_head.*, gated/rnn Markov
// extras of other configs, ...) are allowed and ignored.
#include "sparkdraft/checkpoint.h"

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

struct Found {
  const TensorInfo* info;
  const SafetensorsFile* file;
};

std::string shape_text(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

// Refuses checkpoints of formats out of scope, recognised by tensor name.
void refuse_unsupported(const std::string& name, const SafetensorsFile& file) {
  if (name == "d2t" || name == "t2d" || ends_with(name, ".d2t") || ends_with(name, ".t2d"))
    throw CheckpointError("speculators reduced-vocabulary draft (d2t) is not supported (tensor '" + name +
                          "' in " + file.path() + ")");
  static const std::set<std::string> mla_parts = {"wkv", "wq_a", "wq_b", "wo_a", "wo_b", "attn_sink", "main_proj"};
  bool mla = name.rfind("mtp.", 0) == 0;
  size_t start = 0;
  while (!mla && start <= name.size()) {
    const size_t dot = name.find('.', start);
    const std::string part = name.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    mla = mla_parts.count(part) > 0;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (mla)
    throw CheckpointError("DeepSeek-V4 MLA draft is not supported (tensor '" + name + "' in " + file.path() + ")");
}

// The safetensors files of `dir`: model.safetensors, or the shards of
// model.safetensors.index.json (checked against the index's weight map).
std::vector<std::shared_ptr<SafetensorsFile>> open_weights(const fs::path& dir) {
  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";
  if (fs::exists(single)) return {SafetensorsFile::open(single.string())};
  if (!fs::exists(index))
    throw CheckpointError("no model.safetensors or model.safetensors.index.json in " + dir.string());

  std::ifstream in(index);
  if (!in) throw CheckpointError("cannot open " + index.string());
  json j;
  try {
    j = json::parse(in);
  } catch (const json::exception& e) {
    throw CheckpointError(index.string() + ": not valid JSON (" + e.what() + ")");
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw CheckpointError(index.string() + ": missing 'weight_map' object");
  std::vector<std::string> shard_names;
  for (const auto& item : j["weight_map"].items()) {
    if (!item.value().is_string())
      throw CheckpointError(index.string() + ": weight_map entry '" + item.key() + "' is not a file name");
    const std::string shard = item.value().get<std::string>();
    if (std::find(shard_names.begin(), shard_names.end(), shard) == shard_names.end()) shard_names.push_back(shard);
  }
  std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
  std::vector<std::shared_ptr<SafetensorsFile>> files;
  for (const std::string& shard : shard_names) {
    const fs::path p = dir / shard;
    if (!fs::exists(p))
      throw CheckpointError("shard '" + shard + "' listed in " + index.string() + " is missing");
    files.push_back(SafetensorsFile::open(p.string()));
    shards[shard] = files.back();
  }
  for (const auto& item : j["weight_map"].items()) {
    const auto& file = shards.at(item.value().get<std::string>());
    if (!file->find(item.key()))
      throw CheckpointError(index.string() + " lists tensor '" + item.key() + "' in " + file->path() +
                            ", which has no such tensor");
  }
  return files;
}

}  // namespace

std::vector<TensorSpec> expected_tensors(const ModelConfig& c) {
  const int64_t H = c.hidden_size, V = c.vocab_size, hd = c.head_dim, I = c.intermediate_size;
  const int64_t q = static_cast<int64_t>(c.num_heads) * hd, kv = static_cast<int64_t>(c.num_kv_heads) * hd;
  const bool norms = c.norm_gain != NormGain::none;
  std::vector<TensorSpec> specs;
  auto add = [&](std::string name, std::vector<int64_t> shape, DType dtype = DType::bf16) {
    specs.push_back({std::move(name), dtype, std::move(shape)});
  };
  add("embed_tokens.weight", {V, H});
  add("fc.weight", {H, static_cast<int64_t>(c.taps()) * c.target_hidden_size});
  if (norms) add("hidden_norm.weight", {H});
  for (int i = 0; i < c.num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    if (norms) add(p + "input_layernorm.weight", {H});
    add(p + "self_attn.q_proj.weight", {q, H});
    add(p + "self_attn.k_proj.weight", {kv, H});
    add(p + "self_attn.v_proj.weight", {kv, H});
    if (c.output_gate) add(p + "self_attn.g_proj.weight", {q, H});
    add(p + "self_attn.o_proj.weight", {H, q});
    if (c.qk_norm && norms) {
      add(p + "self_attn.q_norm.weight", {hd});
      add(p + "self_attn.k_norm.weight", {hd});
    }
    if (c.o_norm && norms) add(p + "self_attn.o_norm.weight", {hd});
    if (norms) add(p + "post_attention_layernorm.weight", {H});
    if (c.layer_style == LayerStyle::sandwich && norms) {
      add(p + "pre_feedforward_layernorm.weight", {H});
      add(p + "post_feedforward_layernorm.weight", {H});
    }
    add(p + "mlp.gate_proj.weight", {I, H});
    add(p + "mlp.up_proj.weight", {I, H});
    add(p + "mlp.down_proj.weight", {H, I});
    if (c.residual_kind == ResidualKind::norm_preserving) {
      add(p + "attn_residual.alpha", {H}, DType::f32);
      add(p + "attn_residual.beta", {H}, DType::f32);
      add(p + "mlp_residual.alpha", {H}, DType::f32);
      add(p + "mlp_residual.beta", {H}, DType::f32);
    }
  }
  if (norms) add("norm.weight", {H});
  add("lm_head.weight", {V, H});
  if (c.markov_rank > 0) {
    add("markov_head.markov_w1.weight", {V, c.markov_rank});
    add("markov_head.markov_w2.weight", {V, c.markov_rank});
  }
  return specs;
}

Checkpoint Checkpoint::load(const std::string& dir) {
  const fs::path d(dir);
  if (!fs::is_directory(d)) throw CheckpointError("checkpoint directory '" + dir + "' does not exist");
  if (!fs::exists(d / "config.json")) throw CheckpointError("no config.json in " + dir);

  Checkpoint ck;
  ck.dir_ = dir;
  ck.config_ = load_config_file((d / "config.json").string());
  ck.files_ = open_weights(d);

  // Every stored tensor under its name without the optional "model." prefix.
  std::map<std::string, Found> stored;
  for (const auto& file : ck.files_) {
    for (const auto& [name, info] : file->tensors()) {
      const std::string key = name.rfind("model.", 0) == 0 ? name.substr(6) : name;
      refuse_unsupported(key, *file);
      auto [it, inserted] = stored.emplace(key, Found{&info, file.get()});
      if (!inserted)
        throw CheckpointError("tensor '" + key + "' is stored twice (as '" + it->second.info->name + "' in " +
                              it->second.file->path() + " and as '" + name + "' in " + file->path() + ")");
    }
  }

  std::map<std::string, const uint8_t*> data;
  for (const TensorSpec& spec : expected_tensors(ck.config_)) {
    auto it = stored.find(spec.name);
    if (it == stored.end()) throw CheckpointError("missing tensor '" + spec.name + "' in " + dir);
    const TensorInfo& t = *it->second.info;
    const std::string where = "tensor '" + spec.name + "' in " + it->second.file->path();
    if (t.dtype != spec.dtype)
      throw CheckpointError(where + ": dtype " + dtype_name(t.dtype) + ", expected " + dtype_name(spec.dtype));
    if (t.shape != spec.shape)
      throw CheckpointError(where + ": shape " + t.shape_string() + ", expected " + shape_text(spec.shape));
    if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0)
      throw CheckpointError(where + ": data is not aligned to its " + std::to_string(dtype_size(t.dtype)) +
                            "-byte dtype (the file's tensors are not laid out in alignment order)");
    data[spec.name] = t.data;
  }

  auto bf = [&](const std::string& name) -> const bf16* {
    auto it = data.find(name);
    return it == data.end() ? nullptr : reinterpret_cast<const bf16*>(it->second);
  };
  auto f32 = [&](const std::string& name) -> const float* {
    auto it = data.find(name);
    return it == data.end() ? nullptr : reinterpret_cast<const float*>(it->second);
  };
  DraftWeights& w = ck.weights_;
  w.embed = bf("embed_tokens.weight");
  w.lm_head = bf("lm_head.weight");
  w.fc = bf("fc.weight");
  w.hidden_norm = bf("hidden_norm.weight");
  w.final_norm = bf("norm.weight");
  w.markov_w1 = bf("markov_head.markov_w1.weight");
  w.markov_w2 = bf("markov_head.markov_w2.weight");
  w.layers.resize(ck.config_.num_layers);
  for (int i = 0; i < ck.config_.num_layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    LayerWeights& l = w.layers[i];
    l.input_norm = bf(p + "input_layernorm.weight");
    l.post_attn_norm = bf(p + "post_attention_layernorm.weight");
    l.pre_ffn_norm = bf(p + "pre_feedforward_layernorm.weight");
    l.post_ffn_norm = bf(p + "post_feedforward_layernorm.weight");
    l.q_proj = bf(p + "self_attn.q_proj.weight");
    l.k_proj = bf(p + "self_attn.k_proj.weight");
    l.v_proj = bf(p + "self_attn.v_proj.weight");
    l.g_proj = bf(p + "self_attn.g_proj.weight");
    l.o_proj = bf(p + "self_attn.o_proj.weight");
    l.q_norm = bf(p + "self_attn.q_norm.weight");
    l.k_norm = bf(p + "self_attn.k_norm.weight");
    l.o_norm = bf(p + "self_attn.o_norm.weight");
    l.gate_proj = bf(p + "mlp.gate_proj.weight");
    l.up_proj = bf(p + "mlp.up_proj.weight");
    l.down_proj = bf(p + "mlp.down_proj.weight");
    l.attn_alpha = f32(p + "attn_residual.alpha");
    l.attn_beta = f32(p + "attn_residual.beta");
    l.mlp_alpha = f32(p + "mlp_residual.alpha");
    l.mlp_beta = f32(p + "mlp_residual.beta");
  }
  return ck;
}

size_t Checkpoint::total_bytes() const {
  size_t total = 0;
  for (const TensorSpec& spec : expected_tensors(config_)) {
    size_t n = dtype_size(spec.dtype);
    for (int64_t d : spec.shape) n *= static_cast<size_t>(d);
    total += n;
  }
  return total;
}

}  // namespace sparkdraft
