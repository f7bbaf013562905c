// The confidence head's test checkpoint (contract.md section 9): the synthetic tiny-conf
// preset of `style`, its head with or without the Markov part, written into `dir` (seed 5)
// and loaded. Shared by the CPU tests (runtime/test_confidence_draft.cpp) and the GPU
// tests (cuda/test_confidence.cu).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "common/files.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/config.h"

namespace sparkdraft::test {

// `temperatures`: the per-position calibration (STS, contract.md 9.1), empty for none.
inline std::shared_ptr<const Checkpoint> conf_checkpoint(
    const TempDir& dir, const std::string& style, bool with_markov,
    const std::vector<float>& temperatures = {}) {
  ModelConfig c = preset_config("tiny-conf", style);
  c.confidence_head_with_markov = with_markov;
  c.confidence_temperatures = temperatures;
  SyntheticOptions so;
  so.seed = 5;
  write_synthetic_checkpoint(c, dir.path(), so);
  return std::make_shared<const Checkpoint>(Checkpoint::load(dir.path()));
}

}  // namespace sparkdraft::test
