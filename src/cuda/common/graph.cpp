#include "cuda/common/graph.h"

#include <cstddef>
#include <map>

#include "sparkdraft/cuda/check.h"

namespace sparkdraft::cuda {

namespace {

// The kernel nodes' kernels of `graph` in a topological order (Kahn's, ready nodes
// taken in node order).
std::vector<const void*> kernels_in_order(cudaGraph_t graph) {
  size_t n = 0;
  SD_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &n));
  std::vector<cudaGraphNode_t> nodes(n);
  if (n > 0) SD_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &n));
  size_t e = 0;
  SD_CUDA_CHECK(cudaGraphGetEdges(graph, nullptr, nullptr, nullptr, &e));
  // The edge data too: a programmatic (PDL) edge carries some, and leaving it out is an
  // error ("semantically lossy") rather than a plain edge.
  std::vector<cudaGraphNode_t> from(e), to(e);
  std::vector<cudaGraphEdgeData> data(e);
  if (e > 0) SD_CUDA_CHECK(cudaGraphGetEdges(graph, from.data(), to.data(), data.data(), &e));
  std::map<cudaGraphNode_t, size_t> index;
  for (size_t i = 0; i < n; ++i) index[nodes[i]] = i;
  std::vector<std::vector<size_t>> out(n);
  std::vector<size_t> in(n, 0);
  for (size_t k = 0; k < e; ++k) {
    out[index.at(from[k])].push_back(index.at(to[k]));
    ++in[index.at(to[k])];
  }
  std::vector<const void*> kernels;
  std::vector<bool> done(n, false);
  for (size_t taken = 0; taken < n; ++taken) {
    size_t i = 0;
    while (i < n && (done[i] || in[i] != 0)) ++i;
    if (i == n) break;  // a cycle: not a graph CUDA builds
    done[i] = true;
    for (size_t j : out[i]) --in[j];
    cudaGraphNodeType type;
    SD_CUDA_CHECK(cudaGraphNodeGetType(nodes[i], &type));
    if (type != cudaGraphNodeTypeKernel) continue;
    cudaKernelNodeParams p{};
    SD_CUDA_CHECK(cudaGraphKernelNodeGetParams(nodes[i], &p));
    kernels.push_back(p.func);
  }
  return kernels;
}

}  // namespace

cudaGraphExec_t capture_graph(cudaStream_t stream, const std::function<void(cudaStream_t)>& body,
                              std::vector<const void*>* kernels) {
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
  if (kernels != nullptr) {
    try {
      *kernels = kernels_in_order(graph);
    } catch (...) {
      cudaGraphDestroy(graph);
      throw;
    }
  }
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
