// Times cpu::mma_gemm_rows, each kernel this CPU runs, and cpu::mma_gemm_packed
// (the AVX2 kernel on w packed beforehand, as the CPU backend packs its weights at
// load; the packing is not timed), on one thread, and checks that they agree bit
// for bit. Built as the target sparkdraft_bench_mma_gemm
// (SPARKDRAFT_BENCH, on in a top-level build):
//   ./build/sparkdraft_bench_mma_gemm [--rows 7] [--repeats 3] [--reference] [--json FILE]
//       the GEMMs of one CPU propose at the qwen3-8b shape (one request: 7 rows
//       of the query block through 5 layers, then the lm_head) and the Markov
//       bias (V 151936, rank 256), each kernel's total;
//   ./build/sparkdraft_bench_mma_gemm --shape N K [--rows 1 8 ...]
//       one w of N rows of K against each row count.
// Times are the calling thread's CPU time (CLOCK_THREAD_CPUTIME_ID), the best of
// --repeats, so that other processes on a shared machine count less; wall time
// is printed beside it. --reference also times the scalar reference (slow: it
// runs once, on 1/16 of the rows, scaled up).
#include <time.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "sparkdraft/cpu/mma_gemm.h"

using namespace sparkdraft;

namespace {

struct Shape {
  std::string name;
  int n, k, count;  // count: how many such products one propose runs
};

double thread_cpu_ms() {
  timespec t{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
  return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

struct Kernel {
  cpu::MmaGemmKernel id;
  const char* name;
  bool packed = false;  // mma_gemm_packed on cpu::MmaPacked
};

struct Timing {
  double cpu_ms = 0, wall_ms = 0;
};

int usage() {
  std::fprintf(stderr,
               "usage: sparkdraft_bench_mma_gemm [--shape N K] [--rows R...] [--repeats 3] "
               "[--reference] [--json FILE]\n");
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::vector<Shape> shapes;
  std::vector<int> rows_list;
  int repeats = 3;
  bool with_reference = false;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--shape" && i + 2 < argc) {
      shapes.push_back({"shape", std::atoi(argv[i + 1]), std::atoi(argv[i + 2]), 1});
      i += 2;
    } else if (a == "--rows" && i + 1 < argc) {
      while (i + 1 < argc && argv[i + 1][0] != '-') rows_list.push_back(std::atoi(argv[++i]));
    } else if (a == "--repeats" && i + 1 < argc) {
      repeats = std::atoi(argv[++i]);
    } else if (a == "--reference") {
      with_reference = true;
    } else if (a == "--json" && i + 1 < argc) {
      json = argv[++i];
    } else {
      return usage();
    }
  }
  for (const Shape& s : shapes)
    if (s.n < 1 || s.k < 1) return usage();
  if (repeats < 1) return usage();
  const bool propose = shapes.empty();
  if (propose)  // qwen3-8b: H 4096, 32/8 heads x 128, I 12288, V 151936, rank 256; 5 layers
    shapes = {{"qkv_proj", 6144, 4096, 5},      {"o_proj", 4096, 4096, 5},
              {"gate_up_proj", 24576, 4096, 5}, {"down_proj", 4096, 12288, 5},
              {"lm_head", 151936, 4096, 1},     {"markov_bias", 151936, 256, 1}};
  if (rows_list.empty()) rows_list = {7};

  std::vector<Kernel> kernels;
  if (with_reference) kernels.push_back({cpu::MmaGemmKernel::reference, "reference"});
  if (cpu::mma_gemm_has_avx2()) {
    kernels.push_back({cpu::MmaGemmKernel::avx2, "avx2"});
    kernels.push_back({cpu::MmaGemmKernel::avx2, "avx2-packed", true});
  }
  if (cpu::mma_gemm_has_avx512()) kernels.push_back({cpu::MmaGemmKernel::avx512, "avx512"});

  std::string cpu_name = "unknown";
  {
    std::ifstream f("/proc/cpuinfo");
    std::string line;
    while (std::getline(f, line))
      if (line.rfind("model name", 0) == 0) {
        cpu_name = line.substr(line.find(':') + 2);
        break;
      }
  }
  std::printf("cpu: %s (%u hardware threads); one thread; kernels:", cpu_name.c_str(),
              std::thread::hardware_concurrency());
  for (const Kernel& k : kernels) std::printf(" %s", k.name);
  std::printf("\n");

  std::mt19937_64 g(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::string out_json = "{\n  \"bench\": \"mma_gemm\",\n  \"cpu\": \"" + cpu_name +
                         "\",\n  \"threads\": 1,\n  \"timer\": \"thread cpu time, best of " +
                         std::to_string(repeats) + "\",\n  \"results\": [\n";
  bool first_json = true, all_same = true;
  for (int rows : rows_list) {
    std::vector<double> total(kernels.size(), 0.0);
    for (const Shape& s : shapes) {
      std::vector<bf16> w(static_cast<size_t>(s.n) * s.k), x(static_cast<size_t>(rows) * s.k);
      for (auto& v : w) v = to_bf16(0.02f * nd(g));
      for (auto& v : x) v = to_bf16(nd(g));
      std::vector<std::vector<float>> outs;
      std::printf("%-13s N %6d K %5d rows %3d:", s.name.c_str(), s.n, s.k, rows);
      for (size_t ki = 0; ki < kernels.size(); ++ki) {
        const Kernel& k = kernels[ki];
        // The reference runs on 1/16 of the rows (its time scaled up).
        const int n = k.id == cpu::MmaGemmKernel::reference ? std::max(1, s.n / 16) : s.n;
        const double scale = static_cast<double>(s.n) / n;
        std::vector<float> out(static_cast<size_t>(rows) * s.n);
        Timing best{1e30, 1e30};
        std::unique_ptr<cpu::MmaPacked> packed;
        if (k.packed) packed = std::make_unique<cpu::MmaPacked>(w.data(), s.k, n, s.k, 1, 1);
        for (int rep = 0; rep < (k.id == cpu::MmaGemmKernel::reference ? 1 : repeats); ++rep) {
          const double c0 = thread_cpu_ms();
          const auto t0 = std::chrono::steady_clock::now();
          if (packed)
            cpu::mma_gemm_packed_with(k.id, *packed, 0, x.data(), s.k, rows, out.data(), s.n, 1);
          else
            cpu::mma_gemm_rows_with(k.id, w.data(), s.k, n, x.data(), s.k, rows, s.k, out.data(),
                                    s.n, 1);
          const double wall =
              std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                  .count();
          const double cpu = thread_cpu_ms() - c0;
          if (cpu < best.cpu_ms) best = {cpu, wall};
        }
        best.cpu_ms *= scale;
        best.wall_ms *= scale;
        total[ki] += best.cpu_ms * s.count;
        // Bits compared over the rows every kernel ran (the reference: the first
        // 1/16; it runs first).
        if (!outs.empty()) {
          const int n_common = with_reference ? std::max(1, s.n / 16) : n;
          for (int m = 0; m < rows; ++m)
            if (std::memcmp(out.data() + static_cast<size_t>(m) * s.n,
                            outs[0].data() + static_cast<size_t>(m) * s.n,
                            static_cast<size_t>(n_common) * sizeof(float)) != 0)
              all_same = false;
        }
        outs.push_back(std::move(out));
        std::printf("  %s %.1f ms (wall %.1f)", k.name, best.cpu_ms, best.wall_ms);
        out_json += std::string(first_json ? "" : ",\n") + "    {\"gemm\": \"" + s.name +
                    "\", \"n\": " + std::to_string(s.n) + ", \"k\": " + std::to_string(s.k) +
                    ", \"rows\": " + std::to_string(rows) +
                    ", \"per_propose\": " + std::to_string(s.count) + ", \"kernel\": \"" + k.name +
                    "\", \"cpu_ms\": " + std::to_string(best.cpu_ms) +
                    ", \"wall_ms\": " + std::to_string(best.wall_ms) + "}";
        first_json = false;
      }
      std::printf("\n");
    }
    if (propose) {
      std::printf("one propose's GEMMs (qwen3-8b, %d rows, one thread):", rows);
      for (size_t ki = 0; ki < kernels.size(); ++ki)
        std::printf("  %s %.0f ms", kernels[ki].name, total[ki]);
      std::printf("\n");
      for (size_t ki = 0; ki < kernels.size(); ++ki)
        out_json += ",\n    {\"gemm\": \"propose_total\", \"rows\": " + std::to_string(rows) +
                    ", \"kernel\": \"" + kernels[ki].name +
                    "\", \"cpu_ms\": " + std::to_string(total[ki]) + "}";
    }
  }
  out_json += std::string("\n  ],\n  \"same_bits\": ") + (all_same ? "true" : "false") + "\n}\n";
  std::printf("%s\n", all_same ? "every kernel: same bits" : "KERNELS DIFFER");
  if (!json.empty()) {
    std::ofstream f(json);
    f << out_json;
    if (!f) {
      std::fprintf(stderr, "cannot write %s\n", json.c_str());
      return 1;
    }
  }
  return all_same ? 0 : 1;
}
