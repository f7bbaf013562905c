// Times cpu::mma_gemm_rows (each kernel) on the Markov shape, one thread, and
// checks the kernels agree bit for bit. Built as the target
// sparkdraft_bench_mma_gemm (SPARKDRAFT_BENCH, on in a top-level build):
//   ./build/sparkdraft_bench_mma_gemm [V 151936] [rank 256] [rows 1 8]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <vector>

#include "sparkdraft/cpu/mma_gemm.h"

using namespace sparkdraft;

int main(int argc, char** argv) {
  const int V = argc > 1 ? std::atoi(argv[1]) : 151936, R = argc > 2 ? std::atoi(argv[2]) : 256;
  std::vector<int> rows_list;
  for (int i = 3; i < argc; ++i) rows_list.push_back(std::atoi(argv[i]));
  if (rows_list.empty()) rows_list = {1, 8};
  std::mt19937_64 g(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<bf16> w(static_cast<size_t>(V) * R), x(static_cast<size_t>(32) * R);
  for (auto& v : w) v = to_bf16(0.05f * nd(g));
  for (auto& v : x) v = to_bf16(nd(g));
  for (int rows : rows_list) {
    std::vector<float> out_ref(static_cast<size_t>(rows) * V), out_fast(out_ref.size());
    auto time = [&](cpu::MmaGemmKernel k, std::vector<float>& out) {
      double best = 1e30;
      for (int rep = 0; rep < (k == cpu::MmaGemmKernel::reference ? 1 : 3); ++rep) {
        const auto t0 = std::chrono::steady_clock::now();
        cpu::mma_gemm_rows_with(k, w.data(), R, V, x.data(), R, rows, R, out.data(), V, 1);
        const double ms =
            std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                .count();
        best = ms < best ? ms : best;
      }
      return best;
    };
    const double ref = time(cpu::MmaGemmKernel::reference, out_ref);
    const double fast = time(cpu::MmaGemmKernel::avx2, out_fast);
    const bool same =
        std::memcmp(out_ref.data(), out_fast.data(), out_ref.size() * sizeof(float)) == 0;
    std::printf(
        "V %d rank %d rows %d: reference %.1f ms (%.1f ms/row), avx2 %.1f ms (%.2f ms/row), %.1fx, "
        "%s\n",
        V, R, rows, ref, ref / rows, fast, fast / rows, ref / fast,
        same ? "same bits" : "DIFFERENT BITS");
  }
}
