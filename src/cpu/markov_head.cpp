// The gated / rnn Markov head on the CPU (ops/markov_head.h, contract.md section 13).
#include <vector>

#include "sparkdraft/cpu/ops.h"

namespace sparkdraft::cpu {

void markov_head(const ops::MarkovHeadParams& p, int threads) {
  p.check("cpu::markov_head");
  if (p.rows == 0) return;
  const int P = p.proj_rows(), K = p.proj_inputs();
  std::vector<bf16> x(static_cast<size_t>(p.rows) * K);
  for (int r = 0; r < p.rows; ++r)
    for (int k = 0; k < K; ++k) x[static_cast<size_t>(r) * K + k] = ops::markov_head_input(p, r, k);
  std::vector<float> acc(static_cast<size_t>(p.rows) * P);
  ops::GemmParams g;
  g.x = x.data();
  g.x_stride = K;
  g.w = p.w;
  g.M = p.rows;
  g.N = P;
  g.K = K;
  g.y = acc.data();
  g.y_stride = P;
  g.y_dtype = StreamDType::f32;
  gemm(g, threads);
  for (int r = 0; r < p.rows; ++r)
    for (int i = 0; i < p.rank; ++i) ops::markov_head_unit(p, x.data(), acc.data(), r, i);
}

}  // namespace sparkdraft::cpu
