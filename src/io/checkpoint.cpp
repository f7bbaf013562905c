// Checkpoint loading: config.json (ours or HF) plus safetensors weights,
// resolved to the tensors of contract.md section 1 and validated against the config.
//
// Why validate every tensor here: the kernels take raw pointers into the
// mapping and know nothing of names or shapes, so a wrong shape or dtype would
// read garbage rather than fail. Every expected tensor is checked for presence,
// dtype, shape and alignment, with messages that name the tensor and the file.
// Formats out of scope (DeepSeek-V4 MLA) are recognised by their tensor names too,
// in case a config did not give them away. A reduced vocabulary's d2t is resolved
// and checked (in range, injective) here; t2d (training only) is ignored. A tensor
// the draft knows but the config switches off (q_norm weights with qk_norm
// false, a layer past num_layers, ...) is refused, naming the tensor and the
// switch (LoadOptions::allow_unused_weights loads it anyway; confidence_head.*
// with enable_confidence_head false among them, and the gated / rnn Markov heads'
// projections under another markov_head_type); tensors the draft does not know are
// allowed and ignored.
#include "sparkdraft/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <limits>
#include <map>
#include <optional>
#include <set>
#include <thread>

#include <nlohmann/json.hpp>

#include "common/parallel.h"
#include "io/file_util.h"
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

// Whether a directory entry exists at all (a dangling or looping symlink counts).
int default_threads() {
  return static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
}

bool present(const fs::path& p) {
  std::error_code ec;
  return fs::symlink_status(p, ec).type() != fs::file_type::not_found && !ec;
}

// Refuses checkpoints of formats out of scope, recognised by tensor name.
void refuse_unsupported(const std::string& name, const SafetensorsFile& file) {
  static const std::set<std::string> mla_parts = {"wkv",  "wq_a",      "wq_b",     "wo_a",
                                                  "wo_b", "attn_sink", "main_proj"};
  bool mla = name.rfind("mtp.", 0) == 0;
  size_t start = 0;
  while (!mla && start <= name.size()) {
    const size_t dot = name.find('.', start);
    const std::string part =
        name.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    mla = mla_parts.count(part) > 0;
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  if (mla)
    throw CheckpointError("DeepSeek-V4 MLA draft is not supported (tensor '" + io::excerpt(name) +
                          "' in " + file.path() + ")");
}

// Whether `p` (canonical) is `root` (canonical) or lies under it.
bool is_under(const fs::path& p, const fs::path& root) {
  auto r = root.begin(), q = p.begin();
  for (; r != root.end(); ++r, ++q)
    if (q == p.end() || *q != *r) return false;
  return true;
}

// A shard name of the index must stay in the checkpoint directory: relative, no
// "..", not empty (a symlink leaving it is refused once resolved).
void refuse_leaving_name(const std::string& shard, const std::string& index) {
  const fs::path p(shard);
  bool up = false;
  for (const fs::path& part : p) up = up || part == "..";
  if (shard.empty() || p.is_absolute() || p.has_root_name() || up ||
      shard.find('\0') != std::string::npos)
    throw CheckpointError("shard '" + io::excerpt(shard) + "' listed in " + index +
                          " leaves the checkpoint directory (shard names are file names inside "
                          "it, without '..' or a leading '/'): refused");
}

// The safetensors files of `dir`: model.safetensors, or the shards of
// model.safetensors.index.json (checked against the index's weight map).
std::vector<std::shared_ptr<SafetensorsFile>> open_weights(const fs::path& dir) {
  const fs::path single = dir / "model.safetensors";
  const fs::path index = dir / "model.safetensors.index.json";
  // An entry that is there at all (even a dangling or looping symlink) is
  // opened, so that the error says what is wrong with it.
  if (present(single)) return {SafetensorsFile::open(single.string())};
  if (!present(index))
    throw CheckpointError("no model.safetensors or model.safetensors.index.json in " +
                          dir.string());

  const std::string text =
      io::read_regular_file<CheckpointError>(index.string(), "safetensors index");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::parse_error& e) {
    // Where, not what: the parser's message quotes the file's bytes.
    throw CheckpointError(index.string() + ": not valid JSON (a syntax error at byte " +
                          std::to_string(e.byte) + ")");
  } catch (const json::exception& e) {
    throw CheckpointError(index.string() + ": not valid JSON (" + io::excerpt(e.what()) + ")");
  }
  if (!j.is_object() || !j.contains("weight_map") || !j["weight_map"].is_object())
    throw CheckpointError(index.string() + ": missing 'weight_map' object");
  std::vector<std::string> shard_names;
  for (const auto& item : j["weight_map"].items()) {
    if (!item.value().is_string())
      throw CheckpointError(index.string() + ": weight_map entry '" + io::excerpt(item.key()) +
                            "' is not a file name");
    const std::string shard = item.value().get<std::string>();
    if (std::find(shard_names.begin(), shard_names.end(), shard) == shard_names.end())
      shard_names.push_back(shard);
  }
  std::map<std::string, std::shared_ptr<SafetensorsFile>> shards;
  std::vector<std::shared_ptr<SafetensorsFile>> files;
  std::error_code ec;
  const fs::path root = fs::canonical(dir, ec);
  if (ec) throw CheckpointError("cannot resolve checkpoint directory '" + dir.string() + "'");
  // Where a shard may resolve: the directory itself and, for a snapshot of the Hugging
  // Face hub cache (<repo>/snapshots/<revision>/, whose files are links to
  // <repo>/blobs/<hash>), that repository's blobs.
  fs::path blobs;
  if (root.parent_path().filename() == "snapshots")
    blobs = root.parent_path().parent_path() / "blobs";
  for (const std::string& shard : shard_names) {
    const fs::path p = dir / shard;
    refuse_leaving_name(shard, index.string());
    if (!present(p))
      throw CheckpointError("shard '" + io::excerpt(shard) + "' listed in " + index.string() +
                            " is missing");
    const fs::path real = fs::canonical(p, ec);
    if (ec)
      throw CheckpointError("shard '" + io::excerpt(shard) + "' listed in " + index.string() +
                            " cannot be resolved: " + ec.message());
    if (!is_under(real, root) && (blobs.empty() || !is_under(real, blobs)))
      throw CheckpointError("shard '" + io::excerpt(shard) + "' listed in " + index.string() +
                            " is a link to " + real.string() +
                            ", outside the checkpoint directory (and not a blob of a Hugging "
                            "Face cache snapshot's repository): refused");
    files.push_back(SafetensorsFile::open(p.string()));
    shards[shard] = files.back();
  }
  for (const auto& item : j["weight_map"].items()) {
    const auto& file = shards.at(item.value().get<std::string>());
    if (!file->find(item.key()))
      throw CheckpointError(index.string() + " lists tensor '" + io::excerpt(item.key()) + "' in " +
                            file->path() + ", which has no such tensor");
  }
  return files;
}

// Whether the value at index i of a bf16 / f32 tensor is NaN or infinite
// (exponent bits all ones), and which of the two.
bool nonfinite_at(const LoadedTensor& t, int64_t i, const char** what) {
  uint32_t exp_mask, mant_mask, bits;
  if (t.dtype == DType::bf16) {
    uint16_t b;
    std::memcpy(&b, t.data + 2 * i, 2);
    bits = b, exp_mask = 0x7f80u, mant_mask = 0x007fu;
  } else {
    std::memcpy(&bits, t.data + 4 * i, 4);
    exp_mask = 0x7f800000u, mant_mask = 0x007fffffu;
  }
  if ((bits & exp_mask) != exp_mask) return false;
  *what = (bits & mant_mask)                             ? "NaN"
          : (bits >> (t.dtype == DType::bf16 ? 15 : 31)) ? "-inf"
                                                         : "+inf";
  return true;
}

// Whether [begin, end) of a tensor holds a non-finite value: a branch-free OR
// over the exponent bits that the compiler vectorizes (memory-bound).
template <class U>
bool any_nonfinite(const uint8_t* data, int64_t begin, int64_t end, U exp_mask) {
  const U* p = reinterpret_cast<const U*>(data);
  U hit = 0;
  for (int64_t i = begin; i < end; ++i) hit |= static_cast<U>((p[i] & exp_mask) == exp_mask);
  return hit != 0;
}

// First index of a non-finite value of a bf16 or f32 tensor, or -1. Blocks of
// the tensor are scanned on `threads` threads; each range stops at its first
// bad block, and the lowest bad index over all ranges is the answer.
int64_t first_nonfinite(const LoadedTensor& t, int threads) {
  if (t.dtype != DType::bf16 && t.dtype != DType::f32) return -1;
  const int64_t n = t.numel();
  constexpr int64_t kBlock = int64_t{1} << 16;
  const int64_t blocks = (n + kBlock - 1) / kBlock;
  std::atomic<int64_t> first{std::numeric_limits<int64_t>::max()};
  parallel_for(blocks, threads, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1 && b * kBlock < first.load(std::memory_order_relaxed); ++b) {
      const int64_t lo = b * kBlock, hi = std::min(n, lo + kBlock);
      const bool bad = t.dtype == DType::bf16
                           ? any_nonfinite<uint16_t>(t.data, lo, hi, 0x7f80u)
                           : any_nonfinite<uint32_t>(t.data, lo, hi, 0x7f800000u);
      if (!bad) continue;
      const char* what = nullptr;
      for (int64_t i = lo; i < hi; ++i)
        if (nonfinite_at(t, i, &what)) {
          int64_t cur = first.load();
          while (i < cur && !first.compare_exchange_weak(cur, i)) {
          }
          return;
        }
    }
  });
  const int64_t i = first.load();
  return i == std::numeric_limits<int64_t>::max() ? -1 : i;
}

// "[12, 34]": the coordinates of flat index i in a row-major shape.
std::string coordinates(int64_t i, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  for (size_t d = shape.size(); d-- > 0;) {
    idx[d] = shape[d] ? i % shape[d] : 0;
    i = shape[d] ? i / shape[d] : 0;
  }
  return shape_text(idx);
}

// The config switches a draft may turn off, each with what turns it on and how
// the config says it is off.
struct Switch {
  void (*on)(ModelConfig&);
  void (*off_like)(ModelConfig& c, const ModelConfig& config);  // back to the config's value
  std::string (*said)(const ModelConfig&);
};
const Switch kSwitches[] = {
    {[](ModelConfig& c) { c.qk_norm = true; },
     [](ModelConfig& c, const ModelConfig& k) { c.qk_norm = k.qk_norm; },
     [](const ModelConfig&) { return std::string("qk_norm is false"); }},
    {[](ModelConfig& c) { c.o_norm = true, c.o_norm_weight = true; },
     [](ModelConfig& c, const ModelConfig& k) {
       c.o_norm = k.o_norm, c.o_norm_weight = k.o_norm_weight;
     },
     [](const ModelConfig& k) {
       return std::string(k.o_norm ? "o_norm_weight is false" : "o_norm is false");
     }},
    {[](ModelConfig& c) { c.output_gate = true; },
     [](ModelConfig& c, const ModelConfig& k) { c.output_gate = k.output_gate; },
     [](const ModelConfig&) { return std::string("output_gate is false"); }},
    {[](ModelConfig& c) { c.layer_style = LayerStyle::sandwich; },
     [](ModelConfig& c, const ModelConfig& k) { c.layer_style = k.layer_style; },
     [](const ModelConfig& k) {
       return std::string("layer_style is ") + to_string(k.layer_style);
     }},
    {[](ModelConfig& c) { c.residual_kind = ResidualKind::norm_preserving; },
     [](ModelConfig& c, const ModelConfig& k) { c.residual_kind = k.residual_kind; },
     [](const ModelConfig& k) {
       return std::string("residual_kind is ") + to_string(k.residual_kind);
     }},
    {[](ModelConfig& c) { c.norm_gain = NormGain::weight; },
     [](ModelConfig& c, const ModelConfig& k) { c.norm_gain = k.norm_gain; },
     [](const ModelConfig& k) { return std::string("norm_gain is ") + to_string(k.norm_gain); }},
    {[](ModelConfig& c) { c.confidence_head = true; },
     [](ModelConfig& c, const ModelConfig& k) { c.confidence_head = k.confidence_head; },
     [](const ModelConfig&) { return std::string("enable_confidence_head is false"); }},
    {[](ModelConfig& c) { c.draft_vocab_size = c.reduced_vocab() ? c.draft_vocab_size : 1; },
     [](ModelConfig& c, const ModelConfig& k) { c.draft_vocab_size = k.draft_vocab_size; },
     [](const ModelConfig&) {
       return std::string("draft_vocab_size is absent: the full vocabulary");
     }},
    {[](ModelConfig& c) { c.markov_rank = std::max(c.markov_rank, 1); },
     [](ModelConfig& c, const ModelConfig& k) { c.markov_rank = k.markov_rank; },
     [](const ModelConfig&) { return std::string("markov_rank is 0"); }},
};

std::set<std::string> names_of(const ModelConfig& c) {
  std::set<std::string> names;
  for (const TensorSpec& t : expected_tensors(c)) names.insert(t.name);
  return names;
}

// Refuses a stored tensor the draft knows but this config switches off (q_norm
// weights with qk_norm false, a layer past num_layers, ...): loading it anyway
// would draft with a different model than the one trained. Names the draft does
// not know (other heads' extras) stay allowed.
void refuse_unused(const ModelConfig& config, const std::map<std::string, Found>& stored,
                   const std::string& dir) {
  ModelConfig all_on = config;
  for (const Switch& sw : kSwitches) sw.on(all_on);
  all_on.num_layers = 1;  // layer 0's names stand for every layer's
  const std::set<std::string> used = names_of(config);
  std::set<std::string> known = names_of(all_on);
  // The Markov head types exclude each other: every type's projection is known, and one
  // the config's type does not use is refused naming markov_head_type.
  std::set<std::string> head_names;
  for (MarkovHeadType t : {MarkovHeadType::gated, MarkovHeadType::rnn}) {
    ModelConfig typed = all_on;
    typed.markov_head_type = t;
    typed.markov_topk = 0;
    typed.draft_vocab_size = 0;
    for (const std::string& n : names_of(typed))
      if (!known.count(n)) head_names.insert(n);
  }
  known.insert(head_names.begin(), head_names.end());
  for (const auto& [name, found] : stored) {
    if (used.count(name)) continue;
    // "layers.<i>.<rest>": known when layer 0 has <rest>.
    std::string as_known = name, layer_note;
    if (name.rfind("layers.", 0) == 0) {
      const size_t dot = name.find('.', 7);
      const std::string index = name.substr(7, dot == std::string::npos ? 0 : dot - 7);
      if (dot == std::string::npos || index.empty() || index.size() > 9 ||
          index.find_first_not_of("0123456789") != std::string::npos)
        continue;
      as_known = "layers.0" + name.substr(dot);
      if (std::stoll(index) >= config.num_layers)
        layer_note = "num_layers is " + std::to_string(config.num_layers);
    }
    if (!known.count(as_known)) continue;
    std::string why = layer_note;
    if (why.empty() && head_names.count(as_known)) {
      why = std::string("markov_head_type is ") + to_string(config.markov_head_type);
      if (config.markov_rank == 0) why += " and markov_rank is 0";
    } else if (why.empty()) {
      ModelConfig one = all_on;
      for (const Switch& sw : kSwitches) {
        sw.off_like(one, config);
        const bool needed = !names_of(one).count(as_known);
        sw.on(one);
        if (needed) why += (why.empty() ? "" : " and ") + sw.said(config);
      }
    }
    throw CheckpointError("tensor '" + io::excerpt(found.info->name) + "' in " +
                          found.file->path() + " is not used by the config of " + dir + " (" + why +
                          "): refusing to draft without a weight the checkpoint holds "
                          "(LoadOptions::allow_unused_weights, or --allow-unused-weights on the "
                          "CLI, loads it anyway)");
  }
}

}  // namespace

std::vector<TensorSpec> expected_tensors(const ModelConfig& c) {
  const int64_t H = c.hidden_size, V = c.vocab_size, hd = c.head_dim, I = c.intermediate_size;
  const int64_t Vd = c.draft_vocab();  // lm_head and w2 rows (section 11)
  const int64_t q = static_cast<int64_t>(c.num_heads) * hd,
                kv = static_cast<int64_t>(c.num_kv_heads) * hd;
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
    if (c.o_norm && c.o_norm_weight && norms) add(p + "self_attn.o_norm.weight", {hd});
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
  add("lm_head.weight", {Vd, H});
  if (c.markov_rank > 0) {
    add("markov_head.markov_w1.weight", {V, c.markov_rank});
    add("markov_head.markov_w2.weight", {Vd, c.markov_rank});
  }
  if (c.markov_rank > 0 && c.markov_head_type == MarkovHeadType::gated) {
    add("markov_head.gate_proj.weight", {c.markov_proj_rows(), c.markov_proj_inputs()});
    add("markov_head.gate_proj.bias", {c.markov_proj_rows()});
  }
  if (c.markov_rank > 0 && c.markov_head_type == MarkovHeadType::rnn) {
    add("markov_head.joint_proj.weight", {c.markov_proj_rows(), c.markov_proj_inputs()});
    add("markov_head.joint_proj.bias", {c.markov_proj_rows()});
  }
  if (c.reduced_vocab()) add("d2t", {Vd}, DType::i64);
  if (c.confidence_head) {
    add("confidence_head.proj.weight", {1, c.confidence_inputs()});
    add("confidence_head.proj.bias", {1});
  }
  return specs;
}

std::vector<int32_t> resolve_d2t(const int64_t* d2t, int draft_vocab, int vocab,
                                 const std::string& where) {
  std::vector<int32_t> ids(static_cast<size_t>(draft_vocab));
  std::vector<int32_t> owner(static_cast<size_t>(vocab), -1);  // the draft id of each target id
  for (int d = 0; d < draft_vocab; ++d) {
    const int64_t off = d2t[d];
    const bool huge = off > (int64_t{1} << 40) || off < -(int64_t{1} << 40);  // no overflow
    const int64_t t = huge ? -1 : d + off;
    if (huge || t < 0 || t >= vocab)
      throw CheckpointError(
          where + ": draft id " + std::to_string(d) + " maps to target id " +
          (huge ? std::to_string(d) + " + " + std::to_string(off) : std::to_string(t)) + " (d2t[" +
          std::to_string(d) + "] = " + std::to_string(off) +
          "), outside [0, vocab_size = " + std::to_string(vocab) + ")");
    if (owner[static_cast<size_t>(t)] >= 0)
      throw CheckpointError(where + ": draft ids " + std::to_string(owner[static_cast<size_t>(t)]) +
                            " and " + std::to_string(d) + " both map to target id " +
                            std::to_string(t) + " (d2t is not injective)");
    owner[static_cast<size_t>(t)] = d;
    ids[static_cast<size_t>(d)] = static_cast<int32_t>(t);
  }
  return ids;
}

int32_t draft_fill_id(const std::vector<int32_t>& draft_ids, int vocab) {
  std::vector<bool> taken(static_cast<size_t>(vocab), false);
  for (int32_t t : draft_ids) taken[static_cast<size_t>(t)] = true;
  for (int t = 0; t < vocab; ++t)
    if (!taken[static_cast<size_t>(t)]) return t;
  return -1;
}

namespace {

// The target model's tie_word_embeddings (false when its directory has no config.json
// or the field is absent).
bool target_ties_embeddings(const fs::path& dir) {
  const fs::path config = dir / "config.json";
  if (!present(config)) return false;
  const std::string text = io::read_regular_file<CheckpointError>(config.string(), "config");
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception&) {
    throw CheckpointError(config.string() + ": not valid JSON (the target model's config)");
  }
  if (!j.is_object() || !j.contains("tie_word_embeddings")) return false;
  if (!j["tie_word_embeddings"].is_boolean())
    throw CheckpointError(config.string() + ": tie_word_embeddings is not a boolean");
  return j["tie_word_embeddings"].get<bool>();
}

// LoadOptions::target_dir: the verifier-owned tensors the draft's files lack, from the
// target's files (appended to `files`, which keeps them mapped).
void add_target_weights(const ModelConfig& config, const std::string& target_dir,
                        std::map<std::string, Found>& stored,
                        std::vector<std::shared_ptr<SafetensorsFile>>& files) {
  const fs::path d(target_dir);
  std::error_code ec;
  const fs::file_status st = fs::status(d, ec);
  if (st.type() == fs::file_type::not_found)
    throw CheckpointError("target model directory '" + target_dir + "' does not exist");
  if (ec || st.type() != fs::file_type::directory)
    throw CheckpointError("target model path '" + target_dir + "' is not a readable directory");
  std::vector<std::string> wanted;
  if (!stored.count("embed_tokens.weight")) wanted.push_back("embed_tokens.weight");
  if (!config.reduced_vocab() && !stored.count("lm_head.weight"))
    wanted.push_back("lm_head.weight");
  if (wanted.empty()) return;  // the draft holds them: the target's files are not opened
  const std::vector<std::shared_ptr<SafetensorsFile>> target = open_weights(d);
  auto find = [&](const std::string& name) -> std::optional<Found> {
    for (const auto& file : target)
      for (const std::string& stored_name : {"model." + name, name})
        if (const TensorInfo* info = file->find(stored_name)) return Found{info, file.get()};
    return std::nullopt;
  };
  for (const std::string& name : wanted) {
    std::optional<Found> f = find(name);
    if (!f && name == "lm_head.weight" && target_ties_embeddings(d))
      f = find("embed_tokens.weight");
    if (!f)
      throw CheckpointError("the target model in " + target_dir + " has no '" + name +
                            "' (nor 'model." + name + "')" +
                            (name == "lm_head.weight"
                                 ? ", and its config.json does not tie it to embed_tokens"
                                 : "") +
                            ": the draft's " + name + " must come from somewhere");
    stored.emplace(name, *f);
  }
  files.insert(files.end(), target.begin(), target.end());
}

}  // namespace

Checkpoint Checkpoint::load(const std::string& dir, const LoadOptions& options) {
  if (dir.empty()) throw CheckpointError("the checkpoint directory path is empty");
  const fs::path d(dir);
  std::error_code ec;
  const fs::file_status st = fs::status(d, ec);
  if (st.type() == fs::file_type::not_found)
    throw CheckpointError("checkpoint directory '" + dir + "' does not exist");
  if (ec) throw CheckpointError("cannot read checkpoint directory '" + dir + "': " + ec.message());
  if (st.type() != fs::file_type::directory)
    throw CheckpointError("checkpoint path '" + dir +
                          "' is not a directory (a checkpoint is a directory "
                          "holding config.json and model.safetensors)");
  {
    // A directory that cannot be read says so (not "no config.json").
    std::error_code ec2;
    const fs::file_status cs = fs::symlink_status(d / "config.json", ec2);
    if (ec2 && cs.type() != fs::file_type::not_found)
      throw CheckpointError("cannot read checkpoint directory '" + dir + "': " + ec2.message());
    if (cs.type() == fs::file_type::not_found || cs.type() == fs::file_type::none) {
      const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
      if (fd < 0)
        throw CheckpointError("cannot read checkpoint directory '" + dir +
                              "': " + std::strerror(errno));
      ::close(fd);
      throw CheckpointError("no config.json in " + dir);
    }
  }

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
        throw CheckpointError("tensor '" + io::excerpt(key) + "' is stored twice (as '" +
                              io::excerpt(it->second.info->name) + "' in " +
                              it->second.file->path() + " and as '" + io::excerpt(name) + "' in " +
                              file->path() + ")");
    }
  }

  if (!options.allow_unused_weights) refuse_unused(ck.config_, stored, dir);
  if (!options.target_dir.empty())
    add_target_weights(ck.config_, options.target_dir, stored, ck.files_);

  std::map<std::string, const uint8_t*> data;
  for (const TensorSpec& spec : expected_tensors(ck.config_)) {
    auto it = stored.find(spec.name);
    if (it == stored.end()) {
      // Speculators checkpoints leave out the verifier's own weights (contract.md 14.3).
      const bool verifier_owned = spec.name == "embed_tokens.weight" ||
                                  (spec.name == "lm_head.weight" && !ck.config_.reduced_vocab());
      throw CheckpointError(
          "missing tensor '" + spec.name + "' in " + dir +
          (verifier_owned && options.target_dir.empty()
               ? " (a speculators checkpoint omits the verifier's embed_tokens.weight and, with "
                 "the full vocabulary, lm_head.weight: name the target model's directory, "
                 "LoadOptions::target_dir / --target-model, or copy them in)"
               : ""));
    }
    const TensorInfo& t = *it->second.info;
    const std::string where = "tensor '" + spec.name + "' in " + it->second.file->path();
    if (t.dtype != spec.dtype)
      throw CheckpointError(where + ": dtype " + dtype_name(t.dtype) + ", expected " +
                            dtype_name(spec.dtype));
    if (t.shape != spec.shape)
      throw CheckpointError(where + ": shape " + t.shape_string() + ", expected " +
                            shape_text(spec.shape));
    if (reinterpret_cast<uintptr_t>(t.data) % dtype_size(t.dtype) != 0)
      throw CheckpointError(where + ": data is not aligned to its " +
                            std::to_string(dtype_size(t.dtype)) +
                            "-byte dtype (the file's tensors are not laid out in alignment order)");
    ck.tensors_.push_back(
        LoadedTensor{spec.name, it->second.file->path(), t.dtype, t.shape, t.data});
    data[spec.name] = t.data;
  }

  if (!options.allow_nonfinite) {
    if (options.defer_nonfinite_scan)
      ck.scan_pending_ = true;
    else
      ck.scan_nonfinite_on_host(options.threads);
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
  if (ck.config_.reduced_vocab()) {
    const auto it = stored.find("d2t");
    ck.draft_ids_ = std::make_shared<const std::vector<int32_t>>(
        resolve_d2t(reinterpret_cast<const int64_t*>(data.at("d2t")), ck.config_.draft_vocab(),
                    ck.config_.vocab_size, "tensor 'd2t' in " + it->second.file->path()));
    w.draft_ids = ck.draft_ids_->data();
    w.draft_fill = draft_fill_id(*ck.draft_ids_, ck.config_.vocab_size);
  }
  w.embed = bf("embed_tokens.weight");
  w.lm_head = bf("lm_head.weight");
  w.fc = bf("fc.weight");
  w.hidden_norm = bf("hidden_norm.weight");
  w.final_norm = bf("norm.weight");
  w.markov_w1 = bf("markov_head.markov_w1.weight");
  w.markov_w2 = bf("markov_head.markov_w2.weight");
  w.confidence_w = bf("confidence_head.proj.weight");
  w.confidence_b = bf("confidence_head.proj.bias");
  if (ck.config_.markov_head_type == MarkovHeadType::gated) {
    w.markov_proj_w = bf("markov_head.gate_proj.weight");
    w.markov_proj_b = bf("markov_head.gate_proj.bias");
  } else if (ck.config_.markov_head_type == MarkovHeadType::rnn) {
    w.markov_proj_w = bf("markov_head.joint_proj.weight");
    w.markov_proj_b = bf("markov_head.joint_proj.bias");
  }
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

int64_t LoadedTensor::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string nonfinite_message(const LoadedTensor& t, int64_t index) {
  const char* what = "non-finite";
  nonfinite_at(t, index, &what);
  return "tensor '" + t.name + "' in " + t.file + ": non-finite value (" + what + ") at index " +
         std::to_string(index) + " " + coordinates(index, t.shape) + " of " + shape_text(t.shape) +
         "; refusing the checkpoint (LoadOptions::allow_nonfinite, or --allow-nonfinite-weights on "
         "the CLI, loads it anyway)";
}

void Checkpoint::scan_nonfinite_on_host(int threads) const {
  for (const LoadedTensor& t : tensors_) {
    const int64_t bad = first_nonfinite(t, threads > 0 ? threads : default_threads());
    if (bad >= 0) throw NonFiniteWeights(nonfinite_message(t, bad));
  }
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
