// Backend choice of the CLI: the CUDA backend when built in and a GPU is
// present, else the CPU backend (said out loud, never silently).
#pragma once

#include <memory>
#include <string>

#include "sparkdraft/draft.h"

namespace sparkdraft::cli {

std::string backend_help();
// Throws Unavailable when `kind` is cuda and this build or machine has no GPU
// (called before anything is printed or written).
void require_backend_available(const std::string& kind);
// kind: auto | cpu | cuda. `cuda` without a GPU is an error; `auto` says which it took.
std::unique_ptr<DraftBackend> make_backend(const std::string& kind,
                                           std::shared_ptr<const Checkpoint> ckpt,
                                           const DraftOptions& options);
// One line: what runs where (and, on the GPU, what runs fused and why not).
std::string backend_plan(const DraftBackend& backend);

}  // namespace sparkdraft::cli
