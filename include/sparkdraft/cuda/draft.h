// The draft job on the GPU (SPEC sections 1, 2, 5): the eager path, one plain
// kernel per op (cuda/kernels.h, the GEMMs included) on the packed weights the
// CPU backend also uses (runtime/packed_weights.h), then the Markov loop: fused when its plan
// accepts the draft, else eager with the reason logged once.
//
// Two entry points:
//   * the DraftBackend interface on host buffers (CLI, tests): validates, uploads,
//     runs the device call (replaying a CUDA graph per row count when enabled),
//     downloads the tokens and the cache rows of the slots it used;
//   * `store_context_device` and `propose_device` on device pointers and the
//     caller's stream, for a serving engine: no host synchronization, no allocation
//     (every buffer is sized for max_reqs and max_context_tokens at construction),
//     so both can be captured in the engine's own graph.
#pragma once

#include <cuda_runtime.h>

#include <memory>
#include <string>

#include "sparkdraft/draft.h"
#include "sparkdraft/plan.h"

namespace sparkdraft::cuda {

struct CudaDraftOptions {
  bool fused_markov = true;  // false: the eager Markov loop (the GPU reference)
  bool cuda_graph = true;    // host API: replay one captured graph per row count
  bool pdl = true;           // programmatic dependent launch in the fused loop
  // The fused backbone kernels (cuda/backbone.h: embed norm, QKV front, context
  // front) where the plan accepts them; false: their eager ops (the GPU reference).
  bool fused_backbone = true;
  // Most tokens one store_context_device call takes: its scratch is allocated at
  // construction (the host store_context has no such bound).
  int max_context_tokens = 1024;
};
inline constexpr int kMaxContextTokens = 1 << 20;

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

  // The device entry point of the context chain: the batch of store_context with
  // device pointers, queued on the caller's stream; no allocation, no host
  // synchronization, so an engine can capture it in its own graph. num_tokens is at
  // most CudaDraftOptions::max_context_tokens (InvalidArgument otherwise); the caller
  // guarantees what validate_context checks (positions in range, slots in range and
  // distinct).
  void store_context_device(const ContextBatch& batch, cudaStream_t stream);
  // The device entry point (see the file comment): the same batch and outputs as
  // propose, every pointer a device pointer. The caller guarantees what
  // validate_propose checks (ids, positions, slots in range).
  void propose_device(const ProposeBatch& batch, const ProposeOutputs& out, cudaStream_t stream);
  // What runs (computed once at construction; the runtime follows it).
  const StepPlan& plan() const override;
  bool markov_fused() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The GPU plan for a config: what runs fused and why any part does not. With the
// Markov loop's refusal given (what a built loop found, weights' alignment
// included), or computed from the config alone (host logic, no GPU needed; what
// `sparkdraft plan` prints).
StepPlan make_plan(const ModelConfig& config, const CudaDraftOptions& options,
                   const std::string& markov_refusal);
StepPlan make_plan(const ModelConfig& config, const CudaDraftOptions& options, int max_rows);

// Whether a CUDA device is usable in this process.
bool cuda_available();

}  // namespace sparkdraft::cuda
