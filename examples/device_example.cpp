// Embedding sparkdraft in a serving engine's CUDA graph: the device API.
//
//   device_example [CHECKPOINT_DIR]
//
// The engine owns the buffers (device memory) and the stream. It calls
// store_context_device (the target's hidden states of newly verified tokens)
// and propose_device (one draft step) on its stream: no allocation and no host
// synchronization inside, so after one warm-up call (which pins the GEMM
// algorithms) both are captured into one CUDA graph and replayed every step.
// Without a directory it writes a tiny synthetic checkpoint first. Exit status:
// 0 drafted, 1 a sparkdraft error (message printed), 2 no CUDA device.
#include <cuda_runtime.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include <sparkdraft/checkpoint.h>
#include <sparkdraft/cuda/draft.h>
#include <sparkdraft/error.h>

namespace {

// Device copy of a host vector, freed when the program ends (an engine has its own
// allocator).
template <class T>
T* to_device(const std::vector<T>& host) {
  T* d = nullptr;
  if (cudaMalloc(&d, host.size() * sizeof(T)) != cudaSuccess ||
      cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice) != cudaSuccess)
    throw sparkdraft::DeviceError("cudaMalloc/cudaMemcpy failed");
  return d;
}

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw sparkdraft::DeviceError(std::string(what) + ": " + cudaGetErrorString(e));
}

}  // namespace

int main(int argc, char** argv) {
  namespace fs = std::filesystem;
  using namespace sparkdraft;
  if (!cuda::cuda_available()) {
    std::printf("device_example: no CUDA device here; nothing to run\n");
    return 2;
  }
  std::string dir = argc > 1 ? argv[1] : "";
  try {
    if (dir.empty()) {
      std::string tmpl = (fs::temp_directory_path() / "sparkdraft-device-XXXXXX").string();
      if (!mkdtemp(tmpl.data())) throw IoError("cannot create a temporary directory");
      dir = tmpl;
      write_synthetic_checkpoint(preset_config("tiny"), dir, SyntheticOptions{});
    }
    auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(dir));
    const ModelConfig& c = ckpt->config();
    DraftOptions o;
    o.max_reqs = 2;
    o.cache_slots = 2;
    cuda::CudaDraftOptions co;
    co.max_context_tokens = 64;
    cuda::CudaDraft draft(ckpt, o, co);

    // The engine's buffers: 2 requests, 6 verified tokens each at positions 0..5,
    // request r in pages r * max_pages_per_req + p; anchors at position 6.
    const int R = 2, per = 6, T = R * per;
    const int64_t width = static_cast<int64_t>(c.taps()) * c.target_hidden_size;
    std::mt19937 rng(7);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<bf16> hidden(static_cast<size_t>(T * width));
    for (bf16& h : hidden) h = to_bf16(normal(rng));
    std::vector<int32_t> tables(static_cast<size_t>(R) * o.max_pages_per_req);
    for (size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<int32_t>(i);
    std::vector<int64_t> positions(T), slots(T);
    for (int t = 0; t < T; ++t) {
      positions[t] = t % per;
      slots[t] = int64_t{tables[static_cast<size_t>(t / per) * o.max_pages_per_req]} * o.page_size +
                 positions[t];
    }
    const std::vector<int64_t> anchors = {11, 42}, anchor_pos = {per, per}, seeds = {1, 2},
                               cache_slots = {0, 1};
    const std::vector<float> temps = {0.0f, 1.0f};

    const ContextBatch ctx{T, to_device(hidden), to_device(positions), to_device(slots)};
    const ProposeBatch batch{R,
                             to_device(anchors),
                             to_device(anchor_pos),
                             to_device(seeds),
                             to_device(temps),
                             to_device(cache_slots),
                             to_device(tables)};
    const size_t n_tokens = static_cast<size_t>(R) * c.block_size;
    const ProposeOutputs out{to_device(std::vector<int64_t>(n_tokens)),
                             to_device(std::vector<bf16>(static_cast<size_t>(o.cache_slots) *
                                                         c.block_size * c.vocab_size))};

    cudaStream_t stream;
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "cudaStreamCreate");
    // Warm-up, then capture both calls into one graph and replay it.
    draft.store_context_device(ctx, stream);
    draft.propose_device(batch, out, stream);
    check(cudaStreamSynchronize(stream), "warm-up");
    cudaGraph_t graph;
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "begin capture");
    draft.store_context_device(ctx, stream);
    draft.propose_device(batch, out, stream);
    check(cudaStreamEndCapture(stream, &graph), "end capture");
    cudaGraphExec_t exec;
    check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
    check(cudaGraphLaunch(exec, stream), "graph launch");
    std::vector<int64_t> tokens(n_tokens);
    check(cudaMemcpyAsync(tokens.data(), out.draft_tokens, n_tokens * sizeof(int64_t),
                          cudaMemcpyDeviceToHost, stream),
          "copy tokens");
    check(cudaStreamSynchronize(stream), "graph replay");
    for (int r = 0; r < R; ++r) {
      std::printf("request %d draft:", r);
      for (int j = 0; j < c.block_size; ++j)
        std::printf(" %lld",
                    static_cast<long long>(tokens[static_cast<size_t>(r) * c.block_size + j]));
      std::printf("\n");
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    cudaStreamDestroy(stream);
  } catch (const Error& e) {
    std::fprintf(stderr, "device_example: %s\n", e.what());
    return 1;
  }
  return 0;
}
