// The CPU backend's internals that the tests reach (not installed): the backend
// with its layer shards visible, and the op table it builds for each thread rank.
#pragma once

#include <functional>
#include <memory>
#include <vector>

#include "runtime/cpu_ops.h"
#include "sparkdraft/draft.h"

namespace sparkdraft {

// Makes the op table of one thread rank: `comm` is the rank's communicator when
// the layers are sharded, null when they are replicated (run once, no rank).
using CpuOpsFactory = std::function<std::unique_ptr<CpuOps>(int threads, Communicator* comm)>;

class CpuDraftBackend : public DraftBackend {
 public:
  // The TP ranks the layers are sharded over (DraftOptions::tp where the config
  // splits, else 1: replicated layers; cpu_plan says which and why).
  virtual int layer_tp_size() const = 0;
  // The final-normed hidden states [rows * Q, H] of every query slot (Q = N, or 1 + N
  // in the fill-in layout, contract.md section 14) of layer rank `tp_rank` in the last
  // propose; the drafted ones fed its vocabulary shard (every rank holds the same bits).
  virtual std::vector<bf16> last_hidden(int tp_rank) const = 0;
  // Layer rank `tp_rank`'s shard of one layer's KV cache:
  // [pages * page_size, kv_heads / layer_tp_size(), 2 * head_dim] (its KV heads).
  virtual std::vector<bf16> kv_cache_shard(int tp_rank, int layer) const = 0;
  // GEMMs run so far whose weight the backend had not packed at load (cpu/mma_gemm.h
  // MmaPackedSet: they ran the row kernel, the same bits, slower); 0 when every GEMM
  // of the context chain, the backbone and lm_head found its packed weight.
  virtual int64_t packed_weight_misses() const = 0;
};

// make_cpu_backend with the op tables from `ops` (null: plain CpuOps).
std::unique_ptr<CpuDraftBackend> make_cpu_draft(std::shared_ptr<const Checkpoint> ckpt,
                                                const DraftOptions& options,
                                                CpuOpsFactory ops = nullptr);

}  // namespace sparkdraft
