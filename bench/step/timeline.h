// The kernels of one replay of a CUDA graph on a timeline: each kernel's start and end
// as the GPU stamps them (CUPTI's activity records), so the gaps between kernels (launch
// latency, dependency waits, bubbles) can be read off. `sparkdraft bench step
// --timeline FILE` records the fused step's graph with it (issue 24: "measure the
// gaps").
//
// CUPTI (libcupti, part of the CUDA toolkit) is loaded when a timeline is asked for
// (dlopen of libcupti.so.13, then libcupti.so), so neither the CLI nor the library
// depends on it otherwise; without it record_timeline throws DeviceError naming the
// library.
#pragma once

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace sparkdraft::cuda {

struct KernelSpan {
  std::string name;  // demangled, without the parameter list
  uint64_t start_ns = 0, end_ns = 0;
};

struct GraphTimeline {
  std::vector<KernelSpan> kernels;  // one replay's kernels, by start
  uint64_t span_ns() const;         // first start to last end
  uint64_t busy_ns() const;         // the union of the kernels' intervals
  uint64_t kernel_sum_ns() const;   // the sum of the kernels' durations
};

// Enables CUPTI's kernel records, calls `replay` `replays` times (each call must launch
// the graph once and synchronize), and returns the kernels of the last replay (the
// records of one graph launch share its correlation id).
GraphTimeline record_timeline(const std::function<void()>& replay, int replays = 3);

nlohmann::json timeline_json(const GraphTimeline& t);

// The kernel count, span, busy time, idle time, and the `top` largest gaps with the
// kernels on either side.
void print_timeline_summary(std::ostream& out, const GraphTimeline& t, int top = 8);

}  // namespace sparkdraft::cuda
