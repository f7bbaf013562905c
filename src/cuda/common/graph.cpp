#include "cuda/common/graph.h"

#include "sparkdraft/cuda/check.h"

namespace sparkdraft::cuda {

cudaGraphExec_t capture_graph(cudaStream_t stream, const std::function<void(cudaStream_t)>& body) {
  SD_CUDA_CHECK(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal));
  try {
    body(stream);
  } catch (...) {
    // End the capture and drop what it hands back; the first error is the one thrown.
    cudaGraph_t aborted = nullptr;
    cudaStreamEndCapture(stream, &aborted);
    if (aborted != nullptr) cudaGraphDestroy(aborted);
    throw;
  }
  cudaGraph_t graph = nullptr;
  SD_CUDA_CHECK(cudaStreamEndCapture(stream, &graph));
  cudaGraphExec_t exec = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&exec, graph, 0);
  cudaGraphDestroy(graph);  // the instantiated graph does not need it
  if (err != cudaSuccess)
    throw_device_error("CUDA", "cudaGraphInstantiate(&exec, graph, 0)", __FILE__, __LINE__,
                       cudaGetErrorString(err));
  return exec;
}

void GraphExec::launch(cudaStream_t stream) const { SD_CUDA_CHECK(cudaGraphLaunch(exec_, stream)); }

}  // namespace sparkdraft::cuda
