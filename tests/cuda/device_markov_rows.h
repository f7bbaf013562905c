// A Markov call's request rows copied to the device (the twin of common/markov_rows.h's host
// storage): the GPU loop tests upload the rows the CPU reference ran on and pass this view.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/ops/markov.h"

namespace sparkdraft::test {

struct DeviceMarkovRows {
  int num_rows;
  cuda::DeviceBuffer<int64_t> anchor_tokens, anchor_positions, seeds, cache_slots;
  cuda::DeviceBuffer<float> temperatures;
  // Uploads host rows (every array num_rows long; lengths are not copied) on `s`.
  DeviceMarkovRows(const ops::MarkovRows& host, cudaStream_t s)
      : num_rows(host.num_rows),
        anchor_tokens(host_vector(host.anchor_tokens, host.num_rows), s),
        anchor_positions(host_vector(host.anchor_positions, host.num_rows), s),
        seeds(host_vector(host.seeds, host.num_rows), s),
        cache_slots(host_vector(host.cache_slots, host.num_rows), s),
        temperatures(host_vector(host.temperatures, host.num_rows), s) {}
  ops::MarkovRows view() const {
    return ops::MarkovRows{num_rows,     anchor_tokens.data(), anchor_positions.data(),
                           seeds.data(), temperatures.data(),  cache_slots.data()};
  }

 private:
  template <class T>
  static std::vector<T> host_vector(const T* p, int n) {
    return std::vector<T>(p, p + n);
  }
};

}  // namespace sparkdraft::test
