// The shared-device group communicator (cuda/shared_device_comm.h): TP ranks as
// threads on one GPU; pointers and events cross on the host, data on the device.
#include <cuda_runtime.h>

#include <string>
#include <vector>

#include "cuda/comm/gathered_tree.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/cuda/shared_device_comm.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {

namespace {

// What a rank publishes for an all-gather.
struct Mailbox {
  const void* send;
  cudaEvent_t ready;
};

}  // namespace

SharedDeviceComm::SharedDeviceComm(Communicator& host, int device, size_t max_reduce_count)
    : host_(host), device_(device) {
  if (host.local_ranks().size() != 1 || host.memory() != CommMemory::host)
    throw InvalidArgument(
        "SharedDeviceComm: needs a host communicator of one rank (a run_thread_group thread)");
  if (host.tp_size() > kMaxGatheredRanks)
    throw InvalidArgument("SharedDeviceComm: " + std::to_string(host.tp_size()) +
                          " ranks, at most " + std::to_string(kMaxGatheredRanks));
  SD_CUDA_CHECK(cudaSetDevice(device));
  SD_CUDA_CHECK(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming));
  SD_CUDA_CHECK(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming));
  reserve_reduce(max_reduce_count);
}

SharedDeviceComm::~SharedDeviceComm() {
  // A peer queues its waits on this rank's events after the host exchange, so it may
  // not have done so yet when this rank is done: every rank meets here before any
  // destroys its events (2026-12-02b, run 2: a segfault one run
  // in several, a wait on a destroyed event). An aborted group waits for nobody.
  try {
    host_.barrier();
  } catch (...) {
  }
  if (ready_) cudaEventDestroy(ready_);
  if (done_) cudaEventDestroy(done_);
}

void SharedDeviceComm::reserve_reduce(size_t count) {
  if (count <= max_count_) return;
  scratch_ = DeviceBuffer<float>(count * static_cast<size_t>(tp_size()));
  max_count_ = count;
}

void SharedDeviceComm::wait_for_peers(cudaEvent_t mine, cudaStream_t stream) {
  SD_CUDA_CHECK(cudaEventRecord(mine, stream));
  std::vector<cudaEvent_t> events(static_cast<size_t>(tp_size()));
  host_.all_gather(static_cast<const void*>(&mine), events.data(), sizeof(cudaEvent_t));
  for (int k = 0; k < tp_size(); ++k)
    if (k != tp_rank()) SD_CUDA_CHECK(cudaStreamWaitEvent(stream, events[static_cast<size_t>(k)]));
}

void SharedDeviceComm::all_gather(const void* const* send, void* recv, size_t bytes, void* stream) {
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  // Every rank's send buffer is ready once its event has passed.
  SD_CUDA_CHECK(cudaEventRecord(ready_, s));
  const Mailbox mine{send[0], ready_};
  std::vector<Mailbox> all(static_cast<size_t>(tp_size()));
  host_.all_gather(static_cast<const void*>(&mine), all.data(), sizeof(Mailbox));
  for (int k = 0; k < tp_size(); ++k) {
    const Mailbox& m = all[static_cast<size_t>(k)];
    if (k != tp_rank()) SD_CUDA_CHECK(cudaStreamWaitEvent(s, m.ready));
    SD_CUDA_CHECK(cudaMemcpyAsync(static_cast<char*>(recv) + static_cast<size_t>(k) * bytes, m.send,
                                  bytes, cudaMemcpyDeviceToDevice, s));
  }
  // No rank reuses its send buffer before every peer has read it.
  wait_for_peers(done_, s);
}

void SharedDeviceComm::all_reduce_sum(float* const* data, size_t count, void* stream) {
  if (count > max_count_)
    throw InvalidArgument("SharedDeviceComm::all_reduce_sum: " + std::to_string(count) +
                          " floats, the scratch holds " + std::to_string(max_count_) +
                          " per rank (reserve_reduce outside any capture)");
  if (count == 0) return;
  const cudaStream_t s = static_cast<cudaStream_t>(stream);
  all_gather(reinterpret_cast<const void* const*>(data), scratch_.data(), count * sizeof(float),
             stream);
  gathered_tree_sum(scratch_.data(), data[0], tp_size(), count, s);
}

}  // namespace sparkdraft::cuda
