// make_cuda_backend (sparkdraft/cuda/draft.h): every TP rank in this process, one
// thread and one CudaDraft rank each, on a RankPool (runtime/rank_pool.h) whose group
// runner is run_nccl_group for one GPU per rank, or run_thread_group with a
// SharedDeviceComm per rank for ranks sharing one GPU; a call hands the same job to
// every rank and waits for all of them. Faults are the pool's: an error on one rank
// stops every rank (NCCL: the communicators aborted; the thread group: every wait in
// a collective released), named by the rank ("TP rank r of n: ", "rank r (device
// d): "); the call rethrows it, and so does every later call.
#include <cuda_runtime.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "runtime/layer_shard.h"
#include "runtime/rank_pool.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/draft.h"
#include "sparkdraft/cuda/shared_device_comm.h"
#include "sparkdraft/error.h"
#if defined(SPARKDRAFT_HAVE_NCCL)
#include "sparkdraft/cuda/nccl_comm.h"
#endif

namespace sparkdraft::cuda {
namespace {

// The group runner of the ranks on `devices` (runtime/rank_pool.h): one GPU a rank
// over NCCL, or ranks sharing one GPU through a SharedDeviceComm over the thread
// group; each rank's device current on its thread.
RankPool::Group rank_group(const std::vector<int>& devices) {
  const bool shared = std::set<int>(devices.begin(), devices.end()).size() == 1;
  return [devices, shared](const RankPool::Serve& serve) {
    if (shared) {
      run_thread_group(static_cast<int>(devices.size()), [&](Communicator& host) {
        const int device = devices[static_cast<size_t>(host.tp_rank())];
        SD_CUDA_CHECK(cudaSetDevice(device));
        SharedDeviceComm comm(host, device);
        serve(comm);
      });
      return;
    }
#if defined(SPARKDRAFT_HAVE_NCCL)
    run_nccl_group(devices, [&](NcclComm& comm) { serve(comm); });
#else
    throw InvalidArgument(
        "make_cuda_backend: one GPU per rank needs NCCL, and this build has none");
#endif
  };
}

class CudaTpDraft final : public DraftBackend, public CudaTpView {
 public:
  CudaTpDraft(std::shared_ptr<const Checkpoint> ckpt, const DraftOptions& options,
              const CudaDraftOptions& cuda_options, const std::vector<int>& devices)
      : c_(ckpt->config()),
        o_(options),
        devices_(devices),
        pool_(static_cast<int>(devices.size()), rank_group(devices)) {
    // The deferred NaN/inf scan once, before the ranks read the host copies.
    CudaDraftOptions rank_options = cuda_options;
    if (ckpt->nonfinite_scan_pending() && !cuda_options.nonfinite_scanned) {
      ckpt->scan_nonfinite_on_host(0);
      rank_options.nonfinite_scanned = true;
    }
    ranks_.resize(static_cast<size_t>(pool_.size()));
    try {
      pool_.run([&](int r, Communicator& comm) {
        ranks_[static_cast<size_t>(r)] =
            std::make_unique<CudaDraft>(ckpt, options, rank_options, &comm);
      });
    } catch (...) {
      release_ranks();
      throw;
    }
    o_ = ranks_[0]->options();
  }

  ~CudaTpDraft() override { release_ranks(); }

  std::string name() const override { return "cuda tp " + std::to_string(pool_.size()); }
  const ModelConfig& config() const override { return c_; }
  const DraftOptions& options() const override { return o_; }
  const StepPlan& plan() const override { return ranks_[0]->plan(); }
  StageTimings last_timings() const override { return ranks_[0]->last_timings(); }

  void store_context(const ContextBatch& b) override {
    validate_context(c_, o_, b);
    pool_.run([&](int r, Communicator&) { ranks_[static_cast<size_t>(r)]->store_context(b); });
  }

  void propose(const ProposeBatch& b, const ProposeOutputs& out) override {
    validate_propose(c_, o_, b);
    if (!out.draft_tokens || !out.draft_logits)
      throw InvalidArgument("propose: draft_tokens and draft_logits outputs must be given");
    // Every rank produces the full outputs; rank 0's reach the caller.
    pool_.run([&](int r, Communicator&) {
      if (r == 0)
        ranks_[0]->propose(b, out);
      else
        ranks_[static_cast<size_t>(r)]->propose_without_outputs(b);
    });
  }

  // The TP 1 layout [slots, kv_heads, 2 * hd]: per slot the ranks' KV heads in
  // rank order (rank r holds heads [r*Hkv/t, (r+1)*Hkv/t)).
  std::vector<bf16> kv_cache(int layer) const override {
    if (layer < 0 || layer >= c_.num_layers)
      throw InvalidArgument("kv_cache: layer " + std::to_string(layer) + " of " +
                            std::to_string(c_.num_layers));
    std::vector<std::vector<bf16>> shards(static_cast<size_t>(ranks_[0]->layer_tp_size()));
    for (size_t r = 0; r < shards.size(); ++r)
      shards[r] =
          on_rank(static_cast<int>(r), [&](const CudaDraft& d) { return d.kv_cache(layer); });
    return gather_kv_shards(c_, std::move(shards));
  }

  int tp_size() const override { return pool_.size(); }
  std::vector<bf16> last_hidden(int tp_rank) const override {
    if (tp_rank < 0 || tp_rank >= pool_.size())
      throw InvalidArgument("last_hidden: rank " + std::to_string(tp_rank) + " of " +
                            std::to_string(pool_.size()));
    return on_rank(tp_rank, [](const CudaDraft& d) { return d.last_hidden(); });
  }

 private:
  // Reads a rank's device state from this thread, its device current meanwhile.
  template <class F>
  std::vector<bf16> on_rank(int r, F&& f) const {
    int previous = 0;
    SD_CUDA_CHECK(cudaGetDevice(&previous));
    SD_CUDA_CHECK(cudaSetDevice(devices_[static_cast<size_t>(r)]));
    struct Restore {
      int device;
      ~Restore() { cudaSetDevice(device); }
    } restore{previous};
    return f(*ranks_[static_cast<size_t>(r)]);
  }

  // Each rank frees its CudaDraft on its own thread (its graphs hold NCCL kernels of
  // its communicator, which the serve loop still owns); after a failure, here.
  void release_ranks() {
    try {
      pool_.run([&](int r, Communicator&) { ranks_[static_cast<size_t>(r)].reset(); });
    } catch (...) {
      for (int r = 0; r < static_cast<int>(ranks_.size()); ++r) {
        if (!ranks_[static_cast<size_t>(r)]) continue;
        cudaSetDevice(devices_[static_cast<size_t>(r)]);
        ranks_[static_cast<size_t>(r)].reset();
      }
    }
  }

  ModelConfig c_;
  DraftOptions o_;
  std::vector<int> devices_;
  RankPool pool_;
  std::vector<std::unique_ptr<CudaDraft>> ranks_;
};

}  // namespace

std::vector<int> tp_devices(int tp, std::vector<int> devices) {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count < 1)
    throw DeviceError("make_cuda_backend: no CUDA device");
  if (devices.empty()) {
    if (tp > count)
      throw InvalidArgument("make_cuda_backend: tp " + std::to_string(tp) + " needs " +
                            std::to_string(tp) + " GPUs (one a rank) and this machine has " +
                            std::to_string(count) +
                            "; name the devices to share one GPU among the ranks (e.g. "
                            "--devices 0 for every rank on device 0)");
    for (int r = 0; r < tp; ++r) devices.push_back(r);
  }
  if (devices.size() == 1 && tp > 1) devices.assign(static_cast<size_t>(tp), devices[0]);
  if (static_cast<int>(devices.size()) != tp)
    throw InvalidArgument("make_cuda_backend: " + std::to_string(devices.size()) +
                          " devices for tp " + std::to_string(tp) +
                          " (give one device per rank, or one for all of them)");
  for (int d : devices)
    if (d < 0 || d >= count)
      throw InvalidArgument("make_cuda_backend: device " + std::to_string(d) +
                            " does not exist (this machine has " + std::to_string(count) +
                            " GPUs)");
  const size_t distinct = std::set<int>(devices.begin(), devices.end()).size();
  if (distinct != 1 && distinct != devices.size())
    throw InvalidArgument(
        "make_cuda_backend: the ranks' devices must be all distinct (NCCL, one GPU a rank) or "
        "all the same (the ranks share one GPU)");
  return devices;
}

std::unique_ptr<DraftBackend> make_cuda_backend(std::shared_ptr<const Checkpoint> ckpt,
                                                const DraftOptions& options,
                                                const CudaDraftOptions& cuda_options,
                                                const std::vector<int>& devices) {
  if (!ckpt) throw InvalidArgument("make_cuda_backend: no checkpoint");
  if (options.tp == 1 && devices.size() <= 1) {
    if (devices.size() == 1) SD_CUDA_CHECK(cudaSetDevice(devices[0]));
    return std::make_unique<CudaDraft>(std::move(ckpt), options, cuda_options);
  }
  {
    ModelConfig c = ckpt->config();
    c.validate();
    validate_options(c, options);  // before any rank starts
  }
  return std::make_unique<CudaTpDraft>(std::move(ckpt), options, cuda_options,
                                       tp_devices(options.tp, devices));
}

}  // namespace sparkdraft::cuda
