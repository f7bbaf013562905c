// Internal to src/io: the DeepSpec / HF config.json form of a ModelConfig.
//
// Only a Qwen3-style config (what `import_hf_config` produces) has an HF form;
// every other option set is written in our own JSON (config.h).
#pragma once

#include <string>

#include <nlohmann/json.hpp>

#include "sparkdraft/config.h"

namespace sparkdraft::io {

// True when `import_hf_config(export_hf_config(c))` gives `c` back; otherwise
// `why` (if given) names the first option the HF form cannot carry.
bool hf_expressible(const ModelConfig& c, std::string* why = nullptr);

// The `Qwen3DSparkModel` config.json of `c`; throws ConfigError when
// `hf_expressible(c)` is false.
nlohmann::json export_hf_config(const ModelConfig& c);

// True when `import_speculators_config(export_speculators_config(c))` gives `c` back
// but for `architecture` (a Qwen3-style config the HF form can carry once its layout
// is the anchor one, without markov_topk); otherwise `why` names the first option.
bool speculators_expressible(const ModelConfig& c, std::string* why = nullptr);

// The speculators-format config.json of `c` (contract.md section 14; `block_size` =
// the query slots); throws ConfigError when `speculators_expressible(c)` is false.
nlohmann::json export_speculators_config(const ModelConfig& c);

// True when `j` is our own config JSON ("format": "sparkdraft").
bool is_sparkdraft_json(const nlohmann::json& j);

}  // namespace sparkdraft::io
