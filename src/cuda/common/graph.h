// CUDA-graph capture in one place: whatever a callable queues on a stream becomes an
// instantiated graph. If the callable throws, the capture is ended and whatever
// cudaStreamEndCapture hands back (a partial graph, or null when the capture was
// invalidated) is destroyed before the exception goes on: the first error is the one
// thrown, and the stream leaves capture mode.
#pragma once

#include <cuda_runtime.h>

#include <functional>
#include <vector>

namespace sparkdraft::cuda {

// Captures (thread-local mode) what `body` queues on `stream` and instantiates it.
// The caller owns the result (cudaGraphExecDestroy, or GraphExec below).
// Throws DeviceError when capture or instantiation fails, and rethrows what `body` throws.
// With `kernels`, also hands back the graph's kernel nodes' kernels (the host stubs
// the launches named) in the order the graph runs them (a topological order; ties, which
// a one-stream capture does not have, in node order).
cudaGraphExec_t capture_graph(cudaStream_t stream, const std::function<void(cudaStream_t)>& body,
                              std::vector<const void*>* kernels = nullptr);

// Owns an instantiated graph.
class GraphExec {
 public:
  GraphExec() = default;
  explicit GraphExec(cudaGraphExec_t exec) : exec_(exec) {}
  // capture_graph(stream, body), owned.
  GraphExec(cudaStream_t stream, const std::function<void(cudaStream_t)>& body,
            std::vector<const void*>* kernels = nullptr)
      : exec_(capture_graph(stream, body, kernels)) {}
  ~GraphExec() { reset(); }
  GraphExec(GraphExec&& o) noexcept : exec_(o.release()) {}
  GraphExec& operator=(GraphExec&& o) noexcept {
    if (this != &o) {
      reset();
      exec_ = o.release();
    }
    return *this;
  }
  GraphExec(const GraphExec&) = delete;
  GraphExec& operator=(const GraphExec&) = delete;

  cudaGraphExec_t get() const { return exec_; }
  explicit operator bool() const { return exec_ != nullptr; }
  cudaGraphExec_t release() {
    cudaGraphExec_t e = exec_;
    exec_ = nullptr;
    return e;
  }
  void reset() {
    if (exec_ != nullptr) cudaGraphExecDestroy(exec_);
    exec_ = nullptr;
  }
  // Queues the graph on `stream` (throws DeviceError on failure).
  void launch(cudaStream_t stream) const;

 private:
  cudaGraphExec_t exec_ = nullptr;
};

}  // namespace sparkdraft::cuda
