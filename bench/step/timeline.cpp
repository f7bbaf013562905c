// CUPTI's activity records of one graph replay (bench/step/timeline.h).
#include "step/timeline.h"

#include <cupti.h>
#include <cxxabi.h>
#include <dlfcn.h>

#include <algorithm>
#include <cstdlib>
#include <iomanip>
#include <map>
#include <mutex>
#include <nlohmann/json.hpp>

#include "sparkdraft/error.h"

namespace sparkdraft::cuda {
namespace {

// The CUPTI entry points the timeline uses, resolved from the loaded library.
struct Cupti {
  CUptiResult (*register_callbacks)(CUpti_BuffersCallbackRequestFunc,
                                    CUpti_BuffersCallbackCompleteFunc) = nullptr;
  CUptiResult (*enable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*disable)(CUpti_ActivityKind) = nullptr;
  CUptiResult (*flush_all)(uint32_t) = nullptr;
  CUptiResult (*next_record)(uint8_t*, size_t, CUpti_Activity**) = nullptr;
};

const Cupti& cupti() {
  static const Cupti api = [] {
    void* lib = dlopen("libcupti.so.13", RTLD_NOW | RTLD_LOCAL);
    if (!lib) lib = dlopen("libcupti.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib)
      throw DeviceError(
          "bench timeline: cannot load CUPTI (libcupti.so.13, part of the CUDA toolkit: "
          "add its directory, e.g. /usr/local/cuda/lib64, to LD_LIBRARY_PATH)");
    Cupti c;
    auto sym = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (!fn) throw DeviceError(std::string("bench timeline: CUPTI lacks ") + name);
    };
    sym(c.register_callbacks, "cuptiActivityRegisterCallbacks");
    sym(c.enable, "cuptiActivityEnable");
    sym(c.disable, "cuptiActivityDisable");
    sym(c.flush_all, "cuptiActivityFlushAll");
    sym(c.next_record, "cuptiActivityGetNextRecord");
    return c;
  }();
  return api;
}

void check(CUptiResult r, const char* what) {
  if (r != CUPTI_SUCCESS)
    throw DeviceError(std::string("bench timeline: ") + what + " failed (CUPTI error " +
                      std::to_string(static_cast<int>(r)) + ")");
}

struct Record {
  std::string name;
  uint64_t start, end;
  uint32_t correlation;
};

std::mutex records_mutex;
std::vector<Record> records;

std::string short_name(const char* mangled) {
  int status = 0;
  char* d = abi::__cxa_demangle(mangled, nullptr, nullptr, &status);
  std::string s = status == 0 && d ? d : mangled;
  std::free(d);
  // Drop the return type of a template, our namespaces and the parameter list.
  for (const std::string cut : {"(anonymous namespace)::", "sparkdraft::cuda::", "sparkdraft::"})
    for (size_t at; (at = s.find(cut)) != std::string::npos;) s.erase(at, cut.size());
  if (s.rfind("void ", 0) == 0) s.erase(0, 5);
  int depth = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (s[i] == '(' && depth == 0) {
      s.resize(i);
      break;
    }
  }
  return s;
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  constexpr size_t kBytes = 8 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBytes));
  *size = *buffer ? kBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard<std::mutex> lock(records_mutex);
  while (cupti().next_record(buffer, valid, &rec) == CUPTI_SUCCESS) {
    if (rec->kind != CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL &&
        rec->kind != CUPTI_ACTIVITY_KIND_KERNEL)
      continue;
    const auto* k = reinterpret_cast<const CUpti_ActivityKernel10*>(rec);
    records.push_back({short_name(k->name), k->start, k->end, k->correlationId});
  }
  std::free(buffer);
}

}  // namespace

uint64_t GraphTimeline::span_ns() const {
  if (kernels.empty()) return 0;
  uint64_t end = 0;
  for (const KernelSpan& k : kernels) end = std::max(end, k.end_ns);
  return end - kernels.front().start_ns;
}

uint64_t GraphTimeline::busy_ns() const {
  uint64_t busy = 0, covered = 0;  // kernels are sorted by start
  for (const KernelSpan& k : kernels) {
    const uint64_t from = std::max(k.start_ns, covered);
    if (k.end_ns > from) busy += k.end_ns - from;
    covered = std::max(covered, k.end_ns);
  }
  return busy;
}

uint64_t GraphTimeline::kernel_sum_ns() const {
  uint64_t sum = 0;
  for (const KernelSpan& k : kernels) sum += k.end_ns - k.start_ns;
  return sum;
}

GraphTimeline record_timeline(const std::function<void()>& replay, int replays) {
  const Cupti& c = cupti();
  {
    std::lock_guard<std::mutex> lock(records_mutex);
    records.clear();
  }
  check(c.register_callbacks(buffer_requested, buffer_completed), "registering the buffers");
  check(c.enable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "enabling kernel records");
  for (int i = 0; i < std::max(1, replays); ++i) replay();
  check(c.flush_all(1), "flushing the records");
  check(c.disable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL), "disabling kernel records");
  GraphTimeline t;
  std::lock_guard<std::mutex> lock(records_mutex);
  if (records.empty()) return t;
  uint32_t last = 0;
  for (const Record& r : records) last = std::max(last, r.correlation);
  for (const Record& r : records)
    if (r.correlation == last) t.kernels.push_back({r.name, r.start, r.end});
  std::sort(t.kernels.begin(), t.kernels.end(),
            [](const KernelSpan& a, const KernelSpan& b) { return a.start_ns < b.start_ns; });
  return t;
}

nlohmann::json timeline_json(const GraphTimeline& t) {
  nlohmann::json ks = nlohmann::json::array();
  const uint64_t t0 = t.kernels.empty() ? 0 : t.kernels.front().start_ns;
  uint64_t prev_end = t0;
  for (const KernelSpan& k : t.kernels) {
    ks.push_back({{"name", k.name},
                  {"start_us", (k.start_ns - t0) / 1e3},
                  {"duration_us", (k.end_ns - k.start_ns) / 1e3},
                  {"gap_before_us", k.start_ns > prev_end ? (k.start_ns - prev_end) / 1e3 : 0.0}});
    prev_end = std::max(prev_end, k.end_ns);
  }
  return {{"kernels", t.kernels.size()},
          {"span_us", t.span_ns() / 1e3},
          {"busy_us", t.busy_ns() / 1e3},
          {"idle_us", (t.span_ns() - t.busy_ns()) / 1e3},
          {"kernel_sum_us", t.kernel_sum_ns() / 1e3},
          {"timeline", ks}};
}

void print_timeline_summary(std::ostream& out, const GraphTimeline& t, int top) {
  out << std::fixed << std::setprecision(1);
  out << "  timeline of one graph replay (CUPTI): " << t.kernels.size() << " kernels, span "
      << t.span_ns() / 1e3 << " us, busy " << t.busy_ns() / 1e3 << " us, idle "
      << (t.span_ns() - t.busy_ns()) / 1e3 << " us between kernels\n";
  struct Gap {
    uint64_t ns;
    size_t after;
  };
  std::vector<Gap> gaps;
  uint64_t end = t.kernels.empty() ? 0 : t.kernels.front().start_ns;
  for (size_t i = 0; i < t.kernels.size(); ++i) {
    if (i > 0 && t.kernels[i].start_ns > end) gaps.push_back({t.kernels[i].start_ns - end, i});
    end = std::max(end, t.kernels[i].end_ns);
  }
  std::sort(gaps.begin(), gaps.end(), [](const Gap& a, const Gap& b) { return a.ns > b.ns; });
  for (size_t g = 0; g < gaps.size() && g < static_cast<size_t>(top); ++g)
    out << "    gap " << gaps[g].ns / 1e3 << " us before " << t.kernels[gaps[g].after].name
        << " (after " << t.kernels[gaps[g].after - 1].name << ")\n";
  out << std::defaultfloat;
}

}  // namespace sparkdraft::cuda
