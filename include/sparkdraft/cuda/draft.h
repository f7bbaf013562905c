// The draft job on the GPU (contract.md sections 1, 2, 5): the eager path, one plain
// kernel per op (cuda/kernels.h, the GEMMs included) on the packed weights the
// CPU backend also uses (runtime/packed_weights.h), then the Markov loop: fused when its plan
// accepts the draft, else eager with the reason logged once.
//
// Tensor parallelism (contract.md section 6): a CudaDraft runs one TP rank. At TP 1 (no
// communicator) it holds the whole model. Given a rank's communicator (NCCL,
// cuda/nccl_comm.h, e.g. one an engine hands over; or the shared-device group,
// cuda/shared_device_comm.h) it holds and loads only that rank's shards: the layers
// by heads / intermediate columns / canonical K slices / KV heads where the config
// splits (runtime/layer_shard.h; else replicated), lm_head and Markov w2 by
// vocabulary; the vocab-parallel Markov loop leaves the full tokens and cache on
// every rank. Every rank of the group makes the same calls in the same order.
// Tokens, cache, KV caches and hidden states are TP 1's bit for bit.
// make_cuda_backend runs every rank of a TP size in one process (a thread per rank).
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
#include <vector>

#include "sparkdraft/comm.h"

#include "sparkdraft/draft.h"
#include "sparkdraft/plan.h"

namespace sparkdraft::cuda {

// How a TP rank completes o_proj's and down's all-reduce (contract.md section 6):
//   eager      Communicator::all_reduce_sum (an all-gather of the fp32 partials,
//              then the fixed tree), then the bf16 rounding, then the residual
//              boundary;
//   fused      the fused peer boundary (cuda/comm/peer_reduce.h): each rank pushes its
//              partial into its peers' mailboxes, and one kernel completes the tree
//              and runs the boundary; the same bits. Refused (InvalidArgument, with
//              the reason) where the ranks cannot run it: other processes, GPUs
//              without peer access, or ranks sharing one GPU under lazy module
//              loading (CUDA_MODULE_LOADING=EAGER is needed there);
//   automatic  fused where every rank has a GPU of its own and reaches its peers,
//              else eager (the plan's "tensor parallel" part says which and why).
enum class TpReduce { automatic, eager, fused };
const char* to_string(TpReduce r);
// "auto", "eager" or "fused"; InvalidArgument otherwise.
TpReduce parse_tp_reduce(const std::string& s);

struct CudaDraftOptions {
  bool fused_markov = true;  // false: the eager Markov loop (the GPU reference)
  bool cuda_graph = true;    // host API: replay one captured graph per row count
  bool pdl = true;           // programmatic dependent launch in the fused Markov loop
  // Programmatic dependent launch on every other kernel of the step too: each may become
  // resident while the one before it runs and waits in griddepcontrol.wait, and the GEMMs
  // request their first stages' weight rows before that wait (gemm_detail::Args::
  // early_weights), so the weights stream during the previous kernel's tail. Off by default:
  // measured (docs/history/gpu-log.md, 2026-12-06h) 0.2-2.1% faster on an H100 but on the
  // H200 between 2.1% faster (qwen3-8b, 8 requests) and 1.0% slower (muse, 8 requests);
  // without the early weights it gained nothing (2026-12-04 run 2).
  bool step_pdl = false;
  // The fused backbone kernels (cuda/fused/backbone/backbone.h: embed norm, QKV front, context
  // front) where the plan accepts them; false: their eager ops (the GPU reference).
  bool fused_backbone = true;
  // Most tokens one store_context_device call takes: its scratch is allocated at
  // construction (the host store_context has no such bound).
  int max_context_tokens = 1024;
  // A checkpoint loaded with a deferred NaN/inf scan is scanned by the backend: on
  // the device copies at TP 1, on the host copies by a rank of TP > 1 (it holds
  // shards only). true: the caller has scanned it already (make_cuda_backend does,
  // once for all its ranks), and the backend scans nothing.
  bool nonfinite_scanned = false;
  TpReduce tp_reduce = TpReduce::automatic;  // TP > 1 with sharded layers
  double tp_timeout_s = 10.0;                // the fused boundary's wait for a peer
};
inline constexpr int kMaxContextTokens = 1 << 20;

class CudaDraft final : public DraftBackend {
 public:
  // options.tp 1 without a communicator; else comm runs rank comm->tp_rank() of
  // options.tp ranks (one local rank, device memory; it outlives this object), on
  // the current device. InvalidArgument otherwise.
  CudaDraft(std::shared_ptr<const Checkpoint> ckpt, const DraftOptions& options,
            const CudaDraftOptions& cuda_options = {}, Communicator* comm = nullptr);
  ~CudaDraft() override;

  std::string name() const override;
  const ModelConfig& config() const override;
  const DraftOptions& options() const override;
  void store_context(const ContextBatch& batch) override;
  void propose(const ProposeBatch& batch, const ProposeOutputs& out) override;
  StageTimings last_timings() const override;
  std::vector<bf16> kv_cache(int layer) const override;
  bf16* kv_cache_data(int layer) override;  // device memory

  // propose without reading the outputs back (they stay on the device): a TP rank
  // whose peer returns them (make_cuda_backend's ranks other than 0).
  void propose_without_outputs(const ProposeBatch& batch);

  // The TP rank this object runs, and the ranks its layers shard over (1: the
  // layers replicated). kv_cache(layer) is this rank's shard: its KV heads of every
  // slot (the TP 1 layout gathers the ranks' shards slot by slot).
  int tp_rank() const;
  int layer_tp_size() const;
  // The last propose's final-normed hidden states [rows * Q, H] of every query slot (Q = N,
  // or 1 + N in the fill-in layout, contract.md section 14; the same on every rank).
  std::vector<bf16> last_hidden() const;

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
  // It launches the kernels directly (no graph of ours), so it can be captured.
  void propose_device(const ProposeBatch& batch, const ProposeOutputs& out, cudaStream_t stream);
  // propose_device for a caller whose buffers stay put (the Python bind-once form):
  // replays one CUDA graph per row count, captured (on this object's own stream) at the
  // first call with these pointers; a call with other pointers runs directly and
  // recaptures that row count's graph. While `stream` is capturing (the caller's own
  // graph, cudaStreamIsCapturing) it launches the kernels directly instead, since a
  // nested graph launch would invalidate the caller's capture; so it does where the
  // plan's "cuda graph" part is off.
  void propose_device_graphed(const ProposeBatch& batch, const ProposeOutputs& out,
                              cudaStream_t stream);
  // The lossless verifier (contract.md section 8) on the GPU kernels of
  // cuda/verify/verify.h, the same bits as the CPU reference: validates (validate_verify),
  // uploads the batch (the cache rows of its slots, the target logits), runs
  // verify_device and downloads num_accepted and tokens of the non-padding rows.
  void verify(const VerifyBatch& batch, const VerifyOutputs& out) override;
  // The device entry point of the verifier: the same batch and outputs, every
  // pointer a device pointer (draft_logits the [cache_slots, N, V] cache, e.g.
  // propose_device's out.draft_logits), queued on the caller's stream; no
  // allocation, no host synchronization (the scratch is sized for max_reqs at
  // construction), so it can be captured in a graph. The caller guarantees what
  // validate_verify checks; num_rows outside [1, max_reqs] or a missing array is
  // refused (InvalidArgument).
  void verify_device(const VerifyBatch& batch, const VerifyOutputs& out, cudaStream_t stream);
  // What runs (computed once at construction; the runtime follows it).
  const StepPlan& plan() const override;
  bool markov_fused() const;
  // Whether this rank completes o_proj's and down's all-reduce in the fused peer
  // boundary (CudaDraftOptions::tp_reduce; false at TP 1 and with replicated layers).
  bool fused_all_reduce() const;
  // Throws DeviceError when a fused all-reduce of this rank gave up waiting for a
  // peer (cuda/comm/peer_reduce.h), naming both ranks; the ranks are then out of step
  // and every later call throws. The host API checks after every propose; a caller
  // of propose_device checks after its stream has synchronized.
  void check_peers() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The GPU plan for a config: what runs fused and why any part does not. With the
// Markov loop's refusal given (what a built loop found, weights' alignment
// included), or computed from the config alone (host logic, no GPU needed; what
// `sparkdraft plan` prints).
struct PlanTp {
  int tp_size = 1;
  bool graph_capturable = true;  // the communicator's collectives can be captured
  // The all-reduce the ranks run (eager or fused; automatic where it is not decided
  // yet: `plan` without the ranks' devices), and why where it is not the fused one.
  TpReduce reduce = TpReduce::automatic;
  std::string reduce_why;
};
StepPlan make_plan(const ModelConfig& config, const CudaDraftOptions& options,
                   const std::string& markov_refusal, const PlanTp& tp = {});
// The CUDA backend's refusals that need no GPU (validate_options, then the variants it runs at
// TP 1 only: a reduced draft vocabulary, the top-k Markov loop, the gated / rnn Markov heads):
// ConfigError / InvalidArgument. Every CudaDraft runs it first; `plan --backend cuda` too.
void validate_cuda_backend(const ModelConfig& c, const DraftOptions& o);
StepPlan make_plan(const ModelConfig& config, const CudaDraftOptions& options, int max_rows,
                   const PlanTp& tp = {});

// Every TP rank of options.tp in this process, one thread and one CudaDraft rank each
// (options.tp 1: a CudaDraft). `devices` names each rank's GPU: empty = ranks on
// devices 0..tp-1 (refused when the machine has fewer); all distinct = one GPU per
// rank over NCCL (run_nccl_group; built with NCCL only); all the same = the ranks
// share that GPU as threads (cuda/shared_device_comm.h: eager, no graph). The
// backend's host API returns rank 0's outputs and the KV caches in the TP 1
// layout. An error on one rank stops every rank, and the error names the rank;
// after it the backend refuses every call with that error.
std::unique_ptr<DraftBackend> make_cuda_backend(std::shared_ptr<const Checkpoint> ckpt,
                                                const DraftOptions& options,
                                                const CudaDraftOptions& cuda_options = {},
                                                const std::vector<int>& devices = {});
// The GPUs of tp ranks as make_cuda_backend resolves them: empty = 0 .. tp-1
// (InvalidArgument when the machine has fewer), one device = every rank on it;
// refused (InvalidArgument) unless tp entries, present, all distinct or all the same.
std::vector<int> tp_devices(int tp, std::vector<int> devices);

// The TP backend's extra view for `sparkdraft check`: a rank's hidden states.
class CudaTpView {
 public:
  virtual ~CudaTpView() = default;
  virtual int tp_size() const = 0;
  virtual std::vector<bf16> last_hidden(int tp_rank) const = 0;
};

// Whether a CUDA device is usable in this process.
bool cuda_available();

}  // namespace sparkdraft::cuda
