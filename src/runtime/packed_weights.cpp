// Packing of the per-layer projections (see packed_weights.h).
#include "runtime/packed_weights.h"

#include <cstring>

namespace sparkdraft {
namespace {

void append(std::vector<bf16>& dst, const bf16* src, size_t n) {
  dst.insert(dst.end(), src, src + n);
}

// Rows [first, first + count) of a Linear weight with H columns.
PackPiece rows_of(const bf16* w, size_t first, size_t count, size_t H) {
  return {w + first * H, count * H};
}

}  // namespace

QkvLayout QkvLayout::of(const ModelConfig& c) { return of(c, c.num_heads, c.num_kv_heads); }

QkvLayout QkvLayout::of(const ModelConfig& c, int heads, int kv_heads) {
  const int q = heads * c.head_dim, kv = kv_heads * c.head_dim;
  QkvLayout l;
  l.q = 0;
  l.g = q;
  l.k = l.g + (c.output_gate ? q : 0);
  l.v = l.k + kv;
  l.width = l.v + kv;
  return l;
}

std::vector<PackPiece> qkv_pieces(const ModelConfig& c, const LayerWeights& lw,
                                  const LayerShard& shard) {
  const size_t H = c.hidden_size, hd = c.head_dim, r = shard.tp_rank;
  const size_t q = shard.heads(c) * hd, kv = shard.kv_heads(c) * hd;
  std::vector<PackPiece> p{rows_of(lw.q_proj, r * q, q, H)};
  if (c.output_gate) p.push_back(rows_of(lw.g_proj, r * q, q, H));
  p.push_back(rows_of(lw.k_proj, r * kv, kv, H));
  p.push_back(rows_of(lw.v_proj, r * kv, kv, H));
  return p;
}

std::vector<PackPiece> gate_up_pieces(const ModelConfig& c, const LayerWeights& lw,
                                      const LayerShard& shard) {
  const size_t H = c.hidden_size, I = shard.intermediate(c), r = shard.tp_rank;
  return {rows_of(lw.gate_proj, r * I, I, H), rows_of(lw.up_proj, r * I, I, H)};
}

std::vector<PackPiece> context_kv_pieces(const ModelConfig& c, const DraftWeights& w,
                                         const LayerShard& shard) {
  const size_t H = c.hidden_size, kv = shard.kv_heads(c) * c.head_dim, r = shard.tp_rank;
  std::vector<PackPiece> p;
  for (int l = 0; l < c.num_layers; ++l) {
    p.push_back(rows_of(w.layers[l].k_proj, r * kv, kv, H));
    p.push_back(rows_of(w.layers[l].v_proj, r * kv, kv, H));
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

PackedWeights PackedWeights::pack(const ModelConfig& c, const DraftWeights& w,
                                  const LayerShard& shard) {
  PackedWeights p;
  for (int l = 0; l < c.num_layers; ++l) {
    p.qkv.push_back(concat(qkv_pieces(c, w.layers[l], shard)));
    p.gate_up.push_back(concat(gate_up_pieces(c, w.layers[l], shard)));
  }
  p.context_kv = concat(context_kv_pieces(c, w, shard));
  return p;
}

}  // namespace sparkdraft
