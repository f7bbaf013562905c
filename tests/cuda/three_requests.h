// The device-API tests' batch (CudaDraft.DeviceApi*, CudaConfidence.DeviceApi*):
// three requests of `per` context tokens at positions 0 .. per-1, request r owning
// pages r * max_pages_per_req + p; then a proposal anchored at position `per` with
// the given cache slots (-1: a padding row) and temperatures. Seeded; on the host and,
// uploaded, on the device.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include <cuda_runtime.h>

#include "common/random.h"
#include "sparkdraft/config.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/draft.h"

namespace sparkdraft::test {

struct ThreeRequests {
  static constexpr int R = 3;
  // The drafts these tests build: 3 rows, 4 cache slots, 2 CPU threads; room for the context.
  static DraftOptions options() {
    DraftOptions o;
    o.max_reqs = R;
    o.cache_slots = 4;
    o.threads = 2;
    return o;
  }
  static int max_context_tokens() { return 33; }
  int per, T;
  std::vector<bf16> hidden;  // [T, taps * target_hidden]
  std::vector<int32_t> tables;
  std::vector<int64_t> positions, slots;
  std::vector<int64_t> anchors, anchor_pos, seeds, cache_slots;
  std::vector<float> temps;

  ThreeRequests(const ModelConfig& c, const DraftOptions& o, Gen& gen, int per_ = 11,
                std::vector<int64_t> cache_slots_ = {2, -1, 0},
                std::vector<float> temps_ = {0.0f, 0.7f, 1.0f})
      : per(per_),
        T(R * per_),
        tables(static_cast<size_t>(R) * o.max_pages_per_req),
        positions(T),
        slots(T),
        anchors(R),
        anchor_pos(R, per_),
        seeds(R),
        cache_slots(std::move(cache_slots_)),
        temps(std::move(temps_)) {
    const int64_t width = static_cast<int64_t>(c.taps()) * c.target_hidden_size;
    hidden = gen.bf16s(static_cast<size_t>(T * width), -2.0f, 2.0f);
    for (size_t i = 0; i < tables.size(); ++i) tables[i] = static_cast<int32_t>(i);
    for (int t = 0; t < T; ++t) {
      const int r = t / per;
      positions[t] = t % per;
      const int32_t page =
          tables[static_cast<size_t>(r) * o.max_pages_per_req + positions[t] / o.page_size];
      slots[t] = int64_t{page} * o.page_size + positions[t] % o.page_size;
    }
    for (int r = 0; r < R; ++r) {
      anchors[r] = gen.integer(0, c.vocab_size - 1);
      seeds[r] = gen.integer(0, int64_t{1} << 40);
    }
  }

  ContextBatch context() const { return {T, hidden.data(), positions.data(), slots.data()}; }
  ProposeBatch batch() const {
    return ProposeBatch{R,
                        anchors.data(),
                        anchor_pos.data(),
                        seeds.data(),
                        temps.data(),
                        cache_slots.data(),
                        tables.data()};
  }

  // The same arrays in device memory, uploaded on `s`.
  struct OnDevice {
    int T;
    cuda::DeviceBuffer<bf16> hidden;
    cuda::DeviceBuffer<int64_t> positions, slots, anchors, anchor_pos, seeds, cache_slots;
    cuda::DeviceBuffer<float> temps;
    cuda::DeviceBuffer<int32_t> tables;
    OnDevice(const ThreeRequests& in, cudaStream_t s)
        : T(in.T),
          hidden(in.hidden, s),
          positions(in.positions, s),
          slots(in.slots, s),
          anchors(in.anchors, s),
          anchor_pos(in.anchor_pos, s),
          seeds(in.seeds, s),
          cache_slots(in.cache_slots, s),
          temps(in.temps, s),
          tables(in.tables, s) {}
    ContextBatch context() const { return {T, hidden.data(), positions.data(), slots.data()}; }
    ProposeBatch batch() const {
      return ProposeBatch{R,
                          anchors.data(),
                          anchor_pos.data(),
                          seeds.data(),
                          temps.data(),
                          cache_slots.data(),
                          tables.data()};
    }
  };
  OnDevice upload(cudaStream_t s) const { return OnDevice(*this, s); }
};

}  // namespace sparkdraft::test
