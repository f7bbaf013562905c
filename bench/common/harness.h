// The pieces every GPU benchmark shares (bench/markov, bench/step): the GPU it ran
// on and the clocks seen, seeded device fills, the device copy bandwidth the floor
// is taken over, graph timing (median of repeats, cudaEvents, L2 flushed before
// each repeat) and the JSON file. Not part of the library (bench/ is linked only
// into the tool and the tests).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"

namespace sparkdraft::cuda {

class GraphExec;

// A start and a stop event (created, destroyed with the object).
struct EventPair {
  EventPair() {
    SD_CUDA_CHECK(cudaEventCreate(&start));
    SD_CUDA_CHECK(cudaEventCreate(&stop));
  }
  ~EventPair() {
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
  }
  EventPair(const EventPair&) = delete;
  EventPair& operator=(const EventPair&) = delete;
  cudaEvent_t start = nullptr, stop = nullptr;
};

// Microseconds between two events recorded around what `body` queues on `stream`
// (waits for the stop event).
template <class Body>
double event_time_us(cudaStream_t stream, cudaEvent_t start, cudaEvent_t stop, const Body& body) {
  SD_CUDA_CHECK(cudaEventRecord(start, stream));
  body();
  SD_CUDA_CHECK(cudaEventRecord(stop, stream));
  SD_CUDA_CHECK(cudaEventSynchronize(stop));
  float ms = 0;
  SD_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
  return 1000.0 * ms;
}
template <class Body>
double event_time_us(cudaStream_t stream, const EventPair& ev, const Body& body) {
  return event_time_us(stream, ev.start, ev.stop, body);
}

// The device a benchmark runs on, as the results print and record it.
struct GpuInfo {
  std::string name;
  int sm_count = 0;
  int sm_clock_peak_mhz = 0;   // cudaDevAttrClockRate
  int mem_clock_peak_mhz = 0;  // cudaDevAttrMemoryClockRate
  int sm_clock_seen_mhz = 0;   // measure_sm_clock_mhz before timing (0 until measured)
  int l2_bytes = 0;
};
// The current device's name, SM count, peak clocks and L2 size.
GpuInfo query_gpu();
// Adds gpu, sm_count and the clocks to a result's JSON object (bench markov's keys).
void add_gpu_json(nlohmann::json& j, const GpuInfo& gpu);
// "NAME (S SMs, SM clock peak P MHz, seen C MHz, memory clock M MHz)".
std::string gpu_line(const GpuInfo& gpu);

// Seeded device fills (also used by tests/cuda): element i gets
// lo + (hi - lo) * u_i, u_i = (philox_randint(seed, i) >> 8) * 2^-24, rounded to
// bf16 (ids: lo + randint % span).
void fill_uniform_bf16(bf16* dst, size_t n, uint64_t seed, float lo, float hi, cudaStream_t stream);
void fill_uniform_ids(int64_t* dst, size_t n, uint64_t seed, int64_t lo, int64_t span,
                      cudaStream_t stream);

// The SM clock seen by a kernel spinning for about `spin_ns` (MHz).
int measure_sm_clock_mhz(int64_t spin_ns);

double median(std::vector<double> v);

// Median device-to-device copy bandwidth (GB/s), counting the bytes read and written.
double copy_bandwidth_gbs(cudaStream_t stream);

// The tensor-core peak (TFLOP/s, 2 FLOPs a multiply-add) of the widest product the GEMMs
// issue, wgmma.m64n256k16 bf16 x bf16 -> f32 from shared memory (bench step's compute
// floor): every SM runs one CTA of W warpgroups that issue it back to back on seeded operands
// (16 to a commit group, one group left in flight), no global memory; the median of 9
// launches after 2 warm-ups, the better of W = 2 and 3. InvalidArgument where the GEMMs
// may not use wgmma here (cuda::wgmma_self_test's reason).
double tensor_peak_tflops(const GpuInfo& gpu, cudaStream_t stream);

// Times work on one stream: `warmup` runs, then `repeats` runs, each timed alone
// with cudaEvents after the L2 is flushed (each repeat starts cold, as after the
// rest of a serving step); the median in microseconds. The work is a graph launch
// (the benchmarks) or whatever `queue` puts on the stream (the GPU speed tests).
class GraphTimer {
 public:
  GraphTimer(cudaStream_t stream, const GpuInfo& gpu);
  ~GraphTimer();
  GraphTimer(const GraphTimer&) = delete;
  GraphTimer& operator=(const GraphTimer&) = delete;
  double median_us(const GraphExec& graph, int warmup, int repeats);
  double median_us(const std::function<void()>& queue, int warmup, int repeats);

 private:
  cudaStream_t stream_;
  DeviceBuffer<unsigned char> flush_;
  cudaEvent_t start_ = nullptr, stop_ = nullptr;
};

// What every eager-vs-fused benchmark reports: the medians, the floor (the bytes
// the work must move over the copy bandwidth measured in the same run) and the ratios.
struct FloorTiming {
  double bytes = 0;
  double copy_bandwidth_gbs = 0;
  double floor_us = 0;
  double eager_us = 0;
  double fused_us = 0;
  double fused_ratio = 0;  // fused / floor
  double eager_ratio = 0;  // eager / floor
  // Sets floor_us and the ratios from the other fields.
  void set_floor(double floor_bytes, double bandwidth_gbs);
};
// Adds FloorTiming's fields under their names to a result's JSON object.
void add_timing_json(nlohmann::json& j, const FloorTiming& t);

// Writes `j` (indented) to `path`; IoError when the file cannot be written.
void write_json_file(const std::string& path, const nlohmann::json& j);

}  // namespace sparkdraft::cuda
