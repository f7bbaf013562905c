// Packing of the per-layer projections (see packed_weights.h).
#include "runtime/packed_weights.h"

#include <cstring>

namespace sparkdraft {
namespace {

void append(std::vector<bf16>& dst, const bf16* src, size_t n) {
  dst.insert(dst.end(), src, src + n);
}

}  // namespace

QkvLayout QkvLayout::of(const ModelConfig& c) {
  QkvLayout l;
  l.q = 0;
  l.g = c.q_size();
  l.k = l.g + (c.output_gate ? c.q_size() : 0);
  l.v = l.k + c.kv_size();
  l.width = l.v + c.kv_size();
  return l;
}

PackedWeights PackedWeights::pack(const ModelConfig& c, const DraftWeights& w) {
  PackedWeights p;
  const size_t H = c.hidden_size, q = c.q_size(), kv = c.kv_size(), I = c.intermediate_size;
  for (int l = 0; l < c.num_layers; ++l) {
    const LayerWeights& lw = w.layers[l];
    std::vector<bf16> qkv;
    qkv.reserve(QkvLayout::of(c).width * H);
    append(qkv, lw.q_proj, q * H);
    if (c.output_gate) append(qkv, lw.g_proj, q * H);
    append(qkv, lw.k_proj, kv * H);
    append(qkv, lw.v_proj, kv * H);
    p.qkv.push_back(std::move(qkv));
    std::vector<bf16> gu;
    gu.reserve(2 * I * H);
    append(gu, lw.gate_proj, I * H);
    append(gu, lw.up_proj, I * H);
    p.gate_up.push_back(std::move(gu));
    append(p.context_kv, lw.k_proj, kv * H);
    append(p.context_kv, lw.v_proj, kv * H);
  }
  return p;
}

}  // namespace sparkdraft
