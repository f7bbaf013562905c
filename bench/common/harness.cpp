// The shared benchmark harness (common/harness.h): the GPU and its clocks, the
// copy bandwidth, graph timing with a cold L2, the JSON file.
#include "common/harness.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <fstream>
#include <sstream>
#include <utility>

#include <nlohmann/json.hpp>

#include "cuda/common/graph.h"
#include "sparkdraft/cuda/check.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cuda {
GpuInfo query_gpu() {
  GpuInfo g;
  int device = 0;
  SD_CUDA_CHECK(cudaGetDevice(&device));
  cudaDeviceProp prop{};
  SD_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  g.name = prop.name;
  g.sm_count = prop.multiProcessorCount;
  int khz = 0;
  SD_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrClockRate, device));
  g.sm_clock_peak_mhz = khz / 1000;
  SD_CUDA_CHECK(cudaDeviceGetAttribute(&khz, cudaDevAttrMemoryClockRate, device));
  g.mem_clock_peak_mhz = khz / 1000;
  SD_CUDA_CHECK(cudaDeviceGetAttribute(&g.l2_bytes, cudaDevAttrL2CacheSize, device));
  return g;
}

void add_gpu_json(nlohmann::json& j, const GpuInfo& gpu) {
  j["gpu"] = gpu.name;
  for (const auto& [key, value] : {std::pair<const char*, int>{"sm_count", gpu.sm_count},
                                   {"sm_clock_peak_mhz", gpu.sm_clock_peak_mhz},
                                   {"sm_clock_seen_mhz", gpu.sm_clock_seen_mhz},
                                   {"mem_clock_peak_mhz", gpu.mem_clock_peak_mhz}})
    j[key] = value;
}

std::string gpu_line(const GpuInfo& gpu) {
  std::ostringstream os;
  os << gpu.name << " (" << gpu.sm_count << " SMs, SM clock peak " << gpu.sm_clock_peak_mhz
     << " MHz, seen " << gpu.sm_clock_seen_mhz << " MHz, memory clock " << gpu.mem_clock_peak_mhz
     << " MHz)";
  return os.str();
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

double copy_bandwidth_gbs(cudaStream_t stream) {
  size_t free_bytes = 0, total = 0;
  SD_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total));
  const size_t bytes = std::min<size_t>(size_t{512} << 20, free_bytes / 4) / 256 * 256;
  DeviceBuffer<unsigned char> a(bytes), b(bytes);
  a.zero(stream);
  EventPair ev;
  std::vector<double> us;
  for (int i = 0; i < 12; ++i) {
    const double t = event_time_us(stream, ev, [&] {
      SD_CUDA_CHECK(cudaMemcpyAsync(b.data(), a.data(), bytes, cudaMemcpyDeviceToDevice, stream));
    });
    if (i >= 2) us.push_back(t);
  }
  return 2.0 * static_cast<double>(bytes) / (median(us) * 1e-6) / 1e9;
}

GraphTimer::GraphTimer(cudaStream_t stream, const GpuInfo& gpu)
    : stream_(stream), flush_(static_cast<size_t>(std::max(gpu.l2_bytes, 1 << 20)) * 2) {
  SD_CUDA_CHECK(cudaEventCreate(&start_));
  SD_CUDA_CHECK(cudaEventCreate(&stop_));
}

GraphTimer::~GraphTimer() {
  cudaEventDestroy(start_);
  cudaEventDestroy(stop_);
}

double GraphTimer::median_us(const GraphExec& graph, int warmup, int repeats) {
  return median_us([&] { graph.launch(stream_); }, warmup, repeats);
}

double GraphTimer::median_us(const std::function<void()>& queue, int warmup, int repeats) {
  for (int i = 0; i < warmup; ++i) queue();
  std::vector<double> us;
  for (int i = 0; i < repeats; ++i) {
    flush_.zero(stream_);
    us.push_back(event_time_us(stream_, start_, stop_, queue));
  }
  return median(us);
}

void FloorTiming::set_floor(double floor_bytes, double bandwidth_gbs) {
  bytes = floor_bytes;
  copy_bandwidth_gbs = bandwidth_gbs;
  floor_us = bytes / (copy_bandwidth_gbs * 1e9) * 1e6;
  fused_ratio = fused_us / floor_us;
  eager_ratio = eager_us / floor_us;
}

void add_timing_json(nlohmann::json& j, const FloorTiming& t) {
  for (const auto& [key, value] :
       {std::pair<const char*, double>{"copy_bandwidth_gbs", t.copy_bandwidth_gbs},
        {"bytes", t.bytes},
        {"floor_us", t.floor_us},
        {"eager_us", t.eager_us},
        {"fused_us", t.fused_us},
        {"fused_ratio", t.fused_ratio},
        {"eager_ratio", t.eager_ratio}})
    j[key] = value;
}

void write_json_file(const std::string& path, const nlohmann::json& j) {
  std::ofstream f(path);
  if (!f) throw IoError("cannot write " + path);
  f << j.dump(2) << "\n";
  if (!f) throw IoError("cannot write " + path);
}

}  // namespace sparkdraft::cuda
