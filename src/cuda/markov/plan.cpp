// Host side of the GPU Markov loop: the fused plan (why the fused loop cannot run
// a draft), the launcher-owned block table, the log-once helper, the workspace
// (every buffer allocated up front, before any graph capture) and the loop
// objects.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/common/mma_probe.h"
#include "cuda/markov/detail.h"
#include "cuda/markov/markov.h"
#include "sparkdraft/core/philox.h"
#include "sparkdraft/core/sampling.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/error.h"
#include "sparkdraft/log.h"

namespace sparkdraft::cuda {
namespace markov_detail {

DeviceLimits device_limits() {
  DeviceLimits l{132, 227 * 1024, 228 * 1024};  // H100 / H200
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();  // no device: clear the error, keep the defaults
    return l;
  }
  SD_CUDA_CHECK(cudaDeviceGetAttribute(&l.sm_count, cudaDevAttrMultiProcessorCount, device));
  SD_CUDA_CHECK(
      cudaDeviceGetAttribute(&l.max_smem_block, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
  SD_CUDA_CHECK(
      cudaDeviceGetAttribute(&l.smem_per_sm, cudaDevAttrMaxSharedMemoryPerMultiprocessor, device));
  return l;
}

std::vector<float> noise_bound_table() {
  std::vector<float> table(kNoiseBuckets);
  for (int b = 0; b < kNoiseBuckets; ++b) {
    const uint32_t lowest = kNoiseBucketBase + (static_cast<uint32_t>(b) << kNoiseBucketShift);
    const float u = std::max(bits_f32(lowest), kUniformScale);
    table[b] = gumbel_noise(u);
  }
  return table;
}

namespace {

bool power_of_two(int x) { return x > 0 && (x & (x - 1)) == 0; }
bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// The launcher-owned table: by row count, the target blocks per SM and the
// w2 ring depth. Few rows are memory-bound (deep prefetch, two blocks per SM to
// keep ~128 KB of w2 in flight per SM); many rows are compute-bound (shallow
// ring, shared memory goes to the embeddings). fused_step_shape lowers the
// residency and ring depth until the shared memory fits.
struct StepTableEntry {
  int max_rows;
  int blocks_per_sm;
  int stages;
};
constexpr StepTableEntry kStepTable[] = {
    {8, 2, 3},
    {INT_MAX, 2, 2},
};
static_assert(kStepTable[0].blocks_per_sm <= kMaxBlocksPerSm &&
              kStepTable[1].blocks_per_sm <= kMaxBlocksPerSm &&
              kStepTable[0].stages <= kMaxStages && kStepTable[1].stages <= kMaxStages);

}  // namespace
}  // namespace markov_detail

using namespace markov_detail;

bool fused_step_shape(int rows, int markov_rank, int max_smem_block, int smem_per_sm,
                      FusedStepShape* shape) {
  if (rows < 1 || markov_rank < kMinRank || markov_rank > kMaxRank || !power_of_two(markov_rank))
    return false;
  const StepTableEntry* entry = &kStepTable[0];
  while (rows > entry->max_rows) ++entry;
  for (int bps = entry->blocks_per_sm; bps >= 1; --bps) {
    const int budget = std::min(max_smem_block, smem_per_sm / bps - 1024);
    for (int stages = entry->stages; stages >= 2; --stages) {
      const FusedSmemLayout lay = fused_smem_layout(rows, markov_rank, stages);
      if (lay.total > budget) continue;
      *shape = FusedStepShape{bps, stages, lay.total, fused_tile_vocab(markov_rank)};
      return true;
    }
  }
  return false;
}

FusedStepLaunch fused_step_launch(const MarkovWorkspace& ws, int rows, int width) {
  FusedStepLaunch l;
  require(fused_step_shape(rows, ws.markov_rank(), ws.max_smem(), ws.smem_per_sm(), &l.shape),
          "fused_step_launch",
          std::to_string(rows) + " rows of rank " + std::to_string(ws.markov_rank()) +
              " do not fit the fused step's shared memory");
  l.blocks_per_sm = std::max(1, std::min(l.shape.blocks_per_sm, ws.fused_reg_blocks()));
  const int tiles = (width + l.shape.tile_vocab - 1) / l.shape.tile_vocab;
  l.grid = std::min({tiles, l.blocks_per_sm * ws.sm_count(), ws.max_grid()});
  return l;
}

namespace markov_detail {

std::string fused_refusal(const MarkovPlanInput& in, int max_smem_block, int smem_per_sm) {
  const std::string k = std::to_string(in.markov_rank), v = std::to_string(in.vocab),
                    s = std::to_string(in.tp_size);
  if (in.markov_rank == 0) return "the draft has no Markov head (markov_rank 0)";
  if (!power_of_two(in.markov_rank) || in.markov_rank < kMinRank || in.markov_rank > kMaxRank)
    return "Markov rank " + k + " is not a power of two in [16, 1024]";
  if (in.vocab < 1 || in.vocab >= INT32_MAX)
    return "vocab " + v + " is not in [1, 2^31 - 1) (32-bit ids)";
  if (in.draft_vocab != 0 && in.draft_vocab != in.vocab)
    return "reduced draft vocabulary (" + std::to_string(in.draft_vocab) + " of " + v +
           " ids, a d2t map)";
  if (in.topk > 0)
    return "the top-k Markov loop (markov_topk " + std::to_string(in.topk) +
           ", contract.md section 12) runs on the eager loop";
  if (!in.cache_bf16_contiguous)
    return "the draft-logits cache is not one contiguous bf16 [slots, N, V] buffer";
  if (!power_of_two(in.tp_size)) return "shard count " + s + " is not a power of two";
  if (in.vocab % in.tp_size != 0) return "vocab " + v + " is not divisible by the shard count " + s;
  if (in.w1 != nullptr && !aligned16(in.w1)) return "Markov w1 is not 16-byte aligned";
  if (in.w2 != nullptr && !aligned16(in.w2)) return "Markov w2 is not 16-byte aligned";
  if (in.max_rows < 1) return "max_rows " + std::to_string(in.max_rows) + " is not >= 1";
  FusedStepShape shape;
  if (!fused_step_shape(in.max_rows, in.markov_rank, max_smem_block, smem_per_sm, &shape))
    return std::to_string(in.max_rows) + " rows of rank " + k +
           " do not fit the fused step's shared memory (" + std::to_string(max_smem_block) +
           " bytes per block)";
  return "";
}

}  // namespace markov_detail

std::string fused_markov_refusal(const MarkovPlanInput& in) {
  const DeviceLimits lim = device_limits();
  return fused_refusal(in, lim.max_smem_block, lim.smem_per_sm);
}

bool markov_log_once(const std::string& message) { return log_once(LogLevel::info, message); }

MarkovWorkspace::MarkovWorkspace(int max_rows, int steps, int vocab, int markov_rank, int tp_size)
    : max_rows_(max_rows),
      steps_(steps),
      vocab_(vocab),
      markov_rank_(markov_rank),
      tp_size_(tp_size) {
  require(max_rows >= 1 && steps >= 1 && vocab >= 1 && markov_rank >= 1 && tp_size >= 1,
          "MarkovWorkspace",
          "max_rows, steps, vocab, rank and shards must be >= 1, got " + std::to_string(max_rows) +
              ", " + std::to_string(steps) + ", " + std::to_string(vocab) + ", " +
              std::to_string(markov_rank) + ", " + std::to_string(tp_size));
  require(vocab % tp_size == 0, "MarkovWorkspace",
          "vocab " + std::to_string(vocab) + " is not divisible by " + std::to_string(tp_size) +
              " shards");
  mma_self_test();  // refuses a device whose tensor cores the CPU twin does not reproduce
  const DeviceLimits lim = device_limits();
  sm_count_ = lim.sm_count;
  max_smem_ = lim.max_smem_block;
  smem_per_sm_ = lim.smem_per_sm;
  max_grid_ = kMaxBlocksPerSm * sm_count_;
  if (power_of_two(markov_rank) && markov_rank >= kMinRank && markov_rank <= kMaxRank)
    reg_blocks_ = prepare_fused_kernels(markov_rank, max_smem_);

  const size_t rows = static_cast<size_t>(max_rows), n = static_cast<size_t>(steps);
  if (tp_size == 1) {
    e = DeviceBuffer<bf16>(rows * markov_rank);
    bias = DeviceBuffer<bf16>(rows * vocab);
    logits = DeviceBuffer<bf16>(rows * vocab);
    sample_partials = DeviceBuffer<MarkovCandidate>(rows * markov_sample_blocks(vocab));
    sample_best = DeviceBuffer<MarkovCandidate>(rows);
  } else {
    const size_t cache_len = static_cast<size_t>(tp_size) * rows * n * (vocab / tp_size);
    packets_send = DeviceBuffer<MarkovPacket>(static_cast<size_t>(tp_size) * rows);
    packets_recv = DeviceBuffer<MarkovPacket>(static_cast<size_t>(tp_size) * rows);
    shard_cache = DeviceBuffer<bf16>(cache_len);
    gathered_cache = DeviceBuffer<bf16>(cache_len);
  }
  embeds = DeviceBuffer<bf16>((n + 1) * rows * markov_rank);
  arrivals = DeviceBuffer<uint32_t>(static_cast<size_t>(tp_size) * n * rows);
  known = DeviceBuffer<int32_t>(static_cast<size_t>(tp_size) * n * rows);
  row_best = DeviceBuffer<unsigned long long>(static_cast<size_t>(tp_size) * n * rows);
  noise_bound = DeviceBuffer<float>(noise_bound_table());
}

namespace {

// The markov_rank of a draft that has a Markov head (checked before any allocation).
int checked_markov_rank(const MarkovHead& head) {
  if (head.markov_rank <= 0)
    throw ConfigError("cuda::MarkovLoop: the draft has no Markov head (markov_rank " +
                      std::to_string(head.markov_rank) + ")");
  return head.markov_rank;
}

}  // namespace

MarkovLoop::MarkovLoop(const MarkovHead& head, int max_rows, int steps, bool cache_bf16_contiguous)
    : head_(head), ws_(max_rows, steps, head.vocab, checked_markov_rank(head), 1) {
  MarkovPlanInput in;
  in.vocab = head.vocab;
  in.draft_vocab = head.draft_vocab;
  in.markov_rank = head.markov_rank;
  in.topk = head.topk;
  in.max_rows = max_rows;
  in.cache_bf16_contiguous = cache_bf16_contiguous;
  in.w1 = head.w1;
  in.w2 = head.w2;
  refusal_ = fused_markov_refusal(in);
  if (head.topk > 0)
    ws_.topk_ids = DeviceBuffer<int32_t>(static_cast<size_t>(max_rows) * steps *
                                         static_cast<size_t>(head.topk));
  if (head.bias_topk > 0)
    ws_.bias_topk_ids =
        DeviceBuffer<int32_t>(static_cast<size_t>(max_rows) * static_cast<size_t>(head.bias_topk));
  if (!refusal_.empty()) markov_log_once("fused Markov loop off, the eager loop runs: " + refusal_);
}

void MarkovLoop::run(const MarkovBatch& batch, cudaStream_t stream) {
  if (fused())
    fused_markov_loop(head_, batch, ws_, stream);
  else
    eager_markov_loop(head_, batch, ws_, stream);
}

namespace {

// The constructor's check, before any allocation.
int checked_tp_size(const MarkovHead& head, const Communicator& comm, int max_rows,
                    bool cache_bf16_contiguous) {
  require(comm.memory() == CommMemory::device, "cuda::VocabParallelMarkov",
          "the communicator's buffers are in host memory; the GPU loop needs a device "
          "communicator (cuda::LoopbackComm, NCCL)");
  MarkovPlanInput in;
  in.vocab = head.vocab;
  in.draft_vocab = head.draft_vocab;
  in.markov_rank = head.markov_rank;
  in.topk = head.topk;
  in.tp_size = comm.tp_size();
  in.max_rows = max_rows;
  in.cache_bf16_contiguous = cache_bf16_contiguous;
  in.w1 = head.w1;
  const std::string refusal = fused_markov_refusal(in);
  if (!refusal.empty())
    throw ConfigError(
        "cuda::VocabParallelMarkov: the vocab-parallel Markov loop runs fused only, and the "
        "fused loop cannot run this draft: " +
        refusal);
  return in.tp_size;
}

}  // namespace

VocabParallelMarkov::VocabParallelMarkov(const MarkovHead& head, Communicator& comm, int max_rows,
                                         int steps, bool cache_bf16_contiguous)
    : head_(head),
      comm_(comm),
      ws_(max_rows, steps, head.vocab, head.markov_rank,
          checked_tp_size(head, comm, max_rows, cache_bf16_contiguous)) {}

}  // namespace sparkdraft::cuda
