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

std::vector<PackPiece> qkv_pieces(const ModelConfig& c, const LayerWeights& lw) {
  const size_t H = c.hidden_size, q = c.q_size(), kv = c.kv_size();
  std::vector<PackPiece> p{{lw.q_proj, q * H}};
  if (c.output_gate) p.push_back({lw.g_proj, q * H});
  p.push_back({lw.k_proj, kv * H});
  p.push_back({lw.v_proj, kv * H});
  return p;
}

std::vector<PackPiece> gate_up_pieces(const ModelConfig& c, const LayerWeights& lw) {
  const size_t HI = static_cast<size_t>(c.hidden_size) * c.intermediate_size;
  return {{lw.gate_proj, HI}, {lw.up_proj, HI}};
}

std::vector<PackPiece> context_kv_pieces(const ModelConfig& c, const DraftWeights& w) {
  const size_t kvH = static_cast<size_t>(c.kv_size()) * c.hidden_size;
  std::vector<PackPiece> p;
  for (int l = 0; l < c.num_layers; ++l) {
    p.push_back({w.layers[l].k_proj, kvH});
    p.push_back({w.layers[l].v_proj, kvH});
  }
  return p;
}

namespace {

std::vector<bf16> concat(const std::vector<PackPiece>& pieces) {
  size_t n = 0;
  for (const PackPiece& piece : pieces) n += piece.count;
  std::vector<bf16> out;
  out.reserve(n);
  for (const PackPiece& piece : pieces) append(out, piece.src, piece.count);
  return out;
}

}  // namespace

PackedWeights PackedWeights::pack(const ModelConfig& c, const DraftWeights& w) {
  PackedWeights p;
  for (int l = 0; l < c.num_layers; ++l) {
    p.qkv.push_back(concat(qkv_pieces(c, w.layers[l])));
    p.gate_up.push_back(concat(gate_up_pieces(c, w.layers[l])));
  }
  p.context_kv = concat(context_kv_pieces(c, w));
  return p;
}

}  // namespace sparkdraft
