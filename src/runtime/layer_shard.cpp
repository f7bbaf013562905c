// Layer sharding (see layer_shard.h).
#include "runtime/layer_shard.h"
#include <cstring>
#include <utility>

#include "sparkdraft/ops/gemm.h"

namespace sparkdraft {

int LayerShard::o_slices(const ModelConfig& c) const {
  return ops::canonical_k_slices(c.q_size()) / tp_size;
}

int LayerShard::down_slices(const ModelConfig& c) const {
  return ops::canonical_k_slices(c.intermediate_size) / tp_size;
}

std::string layer_shard_refusal(const ModelConfig& c, int tp_size) {
  if (tp_size <= 1) return "";
  const std::string over = " over " + std::to_string(tp_size) + " ranks";
  std::string why;
  auto add = [&](const std::string& reason) { why += (why.empty() ? "" : "; ") + reason; };
  if (c.num_heads % tp_size != 0)
    add(std::to_string(c.num_heads) + " query heads do not split" + over);
  if (c.num_kv_heads % tp_size != 0)
    add(std::to_string(c.num_kv_heads) + " KV heads do not split" + over);
  if (c.intermediate_size % tp_size != 0)
    add("the intermediate size " + std::to_string(c.intermediate_size) + " does not split" + over);
  // A rank's K columns must be whole canonical slices (contract.md section 6).
  auto slices = [&](const char* proj, int K) {
    const int s = ops::canonical_k_slices(K);
    if (s % tp_size == 0) return;
    const std::string need = tp_size > ops::kGemmMaxKSlices
                                 ? "there are at most " + std::to_string(ops::kGemmMaxKSlices)
                                 : "K not a multiple of " + std::to_string(16 * tp_size);
    add(std::string(proj) + "'s K " + std::to_string(K) + " has " + std::to_string(s) +
        " canonical slice" + (s == 1 ? "" : "s") + ", too few for " + std::to_string(tp_size) +
        " ranks (" + need + ")");
  };
  slices("o_proj", c.q_size());
  slices("down_proj", c.intermediate_size);
  return why;
}

int layer_tp_size(const ModelConfig& c, int tp_size) {
  return layer_shard_refusal(c, tp_size).empty() ? tp_size : 1;
}

std::vector<bf16> gather_kv_shards(const ModelConfig& c, std::vector<std::vector<bf16>> shards) {
  const size_t t = shards.size();
  if (t == 1) return std::move(shards[0]);
  const size_t shard = static_cast<size_t>(c.num_kv_heads) / t * 2 * c.head_dim;
  const size_t slots = shards[0].size() / shard;
  std::vector<bf16> full(slots * shard * t);
  for (size_t s = 0; s < slots; ++s)
    for (size_t r = 0; r < t; ++r)
      std::memcpy(&full[(s * t + r) * shard], &shards[r][s * shard], shard * sizeof(bf16));
  return full;
}

}  // namespace sparkdraft
