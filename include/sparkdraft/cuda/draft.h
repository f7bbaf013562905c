// The draft job on the GPU (SPEC sections 1, 2, 5): the eager path, one plain
// kernel or cuBLASLt call per op on the packed weights the CPU backend also uses
// (runtime/packed_weights.h), then the Markov loop: fused when its plan accepts
// the draft, else eager with the reason logged once.
//
// Two entry points:
//   * the DraftBackend interface on host buffers (CLI, tests): validates, uploads,
//     runs the device call (replaying a CUDA graph per row count when enabled),
//     downloads the tokens and the cache rows of the slots it used;
//   * `propose_device` on device pointers and the caller's stream, for a serving
//     engine: no host synchronization, no allocation (every buffer is sized for
//     max_reqs at construction), so it can be captured in the engine's own graph.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "sparkdraft/draft.h"

namespace sparkdraft::cuda {

struct CudaDraftOptions {
  bool fused_markov = true;  // false: the eager Markov loop (the GPU reference)
  bool cuda_graph = true;    // host API: replay one captured graph per row count
  bool pdl = true;           // programmatic dependent launch in the fused loop
};

// Device pointers of one propose call (same meaning as ProposeBatch/ProposeOutputs).
// The caller guarantees what validate_propose checks (ids, positions, slots in range).
struct DeviceProposeBatch {
  int num_rows = 0;
  const int64_t* anchor_tokens = nullptr;
  const int64_t* anchor_positions = nullptr;
  const int64_t* seeds = nullptr;
  const float* temperatures = nullptr;
  const int64_t* cache_slots = nullptr;
  const int32_t* block_tables = nullptr;  // [rows, max_pages_per_req]
  int64_t* draft_tokens = nullptr;        // [rows, N]
  bf16* draft_logits = nullptr;           // [cache_slots, N, V]
};

class CudaDraft final : public DraftBackend {
 public:
  CudaDraft(std::shared_ptr<const Checkpoint> ckpt, const DraftOptions& options,
            const CudaDraftOptions& cuda_options = {});
  ~CudaDraft() override;

  std::string name() const override;
  const ModelConfig& config() const override;
  const DraftOptions& options() const override;
  void store_context(const ContextBatch& batch) override;
  void propose(const ProposeBatch& batch, const ProposeOutputs& out) override;
  StageTimings last_timings() const override;
  std::vector<bf16> kv_cache(int layer) const override;

  // The device entry point (see the file comment).
  void propose_device(const DeviceProposeBatch& batch, cudaStream_t stream);
  // What runs fused and why not (one line per part).
  std::string plan() const;
  bool markov_fused() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// What runs fused on the GPU for a config and why any part does not (one line
// per part); host logic only, no GPU needed.
std::string gpu_plan(const ModelConfig& config, const CudaDraftOptions& options, int max_rows);

// Whether a CUDA device is usable in this process.
bool cuda_available();

}  // namespace sparkdraft::cuda
