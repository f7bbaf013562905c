// The weights as both backends run them: the per-layer projections packed so
// that each layer makes one QKV(+gate) GEMM and one gate_up GEMM, and the
// context chain one stacked K/V GEMM over all layers (one per layer when each
// layer's input norm applies to the context). The CPU reference and the CUDA
// paths make the same GEMM calls on the same packed matrices, so a GEMM of one
// side can stand in for the other's (tests/cuda: CPU pipeline on GPU GEMMs).
//
// Row layouts (each a Linear weight [out, in]):
//   qkv[l]     = [q_proj (nH*hd) | g_proj (nH*hd, output_gate only) | k_proj (nKV*hd) | v_proj
//   (nKV*hd)] gate_up[l] = [gate_proj (I) | up_proj (I)] context_kv = [k_proj[0] | v_proj[0] |
//   k_proj[1] | v_proj[1] | ...]  (L * 2 * nKV*hd rows)
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/layer_shard.h"
#include "sparkdraft/checkpoint.h"

namespace sparkdraft {

struct QkvLayout {
  int q = 0, g = 0, k = 0, v = 0, width = 0;  // column offsets in the QKV output and its width
  static QkvLayout of(const ModelConfig& c);
  // The layout of a shard of `heads` query and `kv_heads` KV heads (runtime/layer_shard.h).
  static QkvLayout of(const ModelConfig& c, int heads, int kv_heads);
};

// A packed matrix is its source tensors' rows one after another: these pieces, in
// order. The host packing and the CUDA backend's device placement both follow them.
// With a LayerShard the pieces are that rank's rows only (its heads' q, g, k and v
// rows, its gate and up rows, its KV heads' context k and v rows), in the same
// layout: the packed matrices of a model with the shard's heads and columns.
struct PackPiece {
  const bf16* src;
  size_t count;  // elements
};
std::vector<PackPiece> qkv_pieces(const ModelConfig& c, const LayerWeights& lw,
                                  const LayerShard& shard = {});
std::vector<PackPiece> gate_up_pieces(const ModelConfig& c, const LayerWeights& lw,
                                      const LayerShard& shard = {});
std::vector<PackPiece> context_kv_pieces(const ModelConfig& c, const DraftWeights& w,
                                         const LayerShard& shard = {});

struct PackedWeights {
  std::vector<std::vector<bf16>> qkv;      // [L][width * H]
  std::vector<std::vector<bf16>> gate_up;  // [L][2I * H]
  std::vector<bf16> context_kv;            // [L * 2 * kv * H]
  static PackedWeights pack(const ModelConfig& c, const DraftWeights& w,
                            const LayerShard& shard = {});
};

}  // namespace sparkdraft
