// The contract of attention over the paged cache (contract.md section 3): one definition,
// followed literally by the CPU (cpu/attention.cpp, on the tensor-core twin) and the
// GPU (cuda/eager/attention.cu, on the tensor cores), bit for bit.
//
// Range. Query token t (request r = token_request[t], position pos = positions[t])
// and head h read KV head h / (heads / kv_heads). With kv_len = kv_lens[r] (a + N)
// its positions are [lo, hi):
//   lo = window > 0 ? max(0, pos - window + 1) : 0
//   hi = causal ? min(pos + 1, kv_len) : kv_len
// (window and causal are per layer; the API refuses lo >= hi).
//
// Chunks. Chunk c covers positions [64c, 64c + 64) (kAttentionChunk, counted from
// position 0, the same for every batch and device). The query folds exactly the
// chunks that intersect [lo, hi), in increasing c. Per chunk, with j = 0..63 the
// slots of positions 64c + j:
//   s_j  = mma_chain(q, k_j, head_dim) * scale: the tensor-core chain of core/mma.h
//          over the head dimension from +0 (zero-padded to a multiple of 16), then one
//          fp32 multiply by scale = 1.0f / sqrtf(head_dim) (IEEE sqrt and division).
//          Slot j is masked when its position is outside [lo, hi).
//   m_c  = chunk_max of s_j over the unmasked slots (masked slots enter as -inf).
//   p_j  = exp_f32(s_j - m_c) (core/math.h) for unmasked slots, +0 for masked ones.
//   l_c  = chunk_sum of the fp32 p_j.
//   pb_j = bf16(p_j) (round to nearest even).
//   o_c[d] = mma_chain over the 64 slots in increasing j from +0 of (pb_j, v_j[d])
//          (4 steps of 16 slots), where v_j is the stored V for positions < kv_len
//          whose page is mapped (block table entry >= 0), and +0 otherwise (those
//          slots may hold anything, NaN included: they are never read). A masked
//          slot below kv_len uses its stored V with pb_j = +0.
// chunk_max and chunk_sum have one fixed order over the 64 slots, the order of a
// warp that holds slots l and l + 32 in lane l: u_l = op(x_l, x_{l+32}), then the
// butterfly of core/reduce.h over the 32 lanes (off = 16, 8, 4, 2, 1:
// u_l = op(u_l, u_{l+off}); the result is u_0). op is the fp32 add for the sum and
// max_f32 for the max: NaN-ignoring (max_f32(NaN, x) = x), else a > b ? a : b (so
// max_f32(-0, +0) = +0, max_f32(+0, -0) = -0: fixed bits either way).
//
// Fold, per query and head: M = -inf, L = 0, O[d] = 0; for each folded chunk c in
// increasing order:
//   M' = max_f32(M, m_c)
//   a  = exp_f32(M - M'), except for the first folded chunk, where a = 0 by
//        definition (exp(-inf - M') would be NaN when M' is -inf)
//   b  = exp_f32(m_c - M')
//   L  = L * a + l_c * b;   O[d] = O[d] * a + o_c[d] * b
//        (each multiply and add a separate IEEE fp32 operation, no fma)
//   M  = M'
// Output: o[d] = bf16(O[d] / L) (IEEE fp32 division, then round to nearest even;
// any NaN becomes the canonical bf16 NaN). Padding tokens (token_request -1) write
// zeros.
//
// The GPU may split the chunks of a query over CTAs; each chunk's (m_c, l_c, o_c) is
// then stored and one combine pass runs the same sequential fold, so the bits never
// depend on the split, the batch or the device.
#pragma once

#include <cmath>
#include <cstdint>

#include "sparkdraft/core/hd.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/ops/require.h"

namespace sparkdraft::ops {

inline constexpr int kAttentionChunk = 64;  // positions per chunk, counted from 0

struct AttentionParams {
  int tokens = 0;    // query tokens (rows * N)
  int requests = 0;  // rows of block_tables and kv_lens
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int page_size = 0;
  int max_pages = 0;                       // block table row width
  int window = 0;                          // 0 = full (this layer's)
  bool causal = false;                     // hi = min(pos + 1, kv_len) (this layer's)
  int64_t q_stride = 0;                    // elements between query tokens
  const int32_t* block_tables = nullptr;   // [requests, max_pages]
  const int32_t* token_request = nullptr;  // [tokens] request row of each token, -1 = padding
  const int64_t* positions = nullptr;      // [tokens] absolute position of each query
  const int64_t* kv_lens = nullptr;        // [requests] a + N
  // Bound on every kv_lens[r] known on the host (<= max_pages * page_size): sizes the
  // GPU's split grid and workspace. Any bound gives the same bits.
  int64_t max_kv_len = 0;

  // The only validation of the fields (InvalidArgument naming the first bad one).
  // Values behind the pointers are checked where they are read on the host (the CPU
  // op) or at the API boundary (the GPU).
  void check() const {
    const char* op = "attention";
    require(tokens >= 0, op, "tokens must be >= 0, got " + std::to_string(tokens));
    require(requests >= 0 && (tokens == 0 || requests >= 1), op,
            "requests must be >= 1, got " + std::to_string(requests));
    require(heads >= 1 && kv_heads >= 1 && heads % kv_heads == 0, op,
            "heads (" + std::to_string(heads) + ") must be a positive multiple of kv_heads (" +
                std::to_string(kv_heads) + ")");
    require(head_dim >= 1, op, "head_dim must be >= 1, got " + std::to_string(head_dim));
    require(page_size >= 1, op, "page_size must be >= 1, got " + std::to_string(page_size));
    require(max_pages >= 1, op, "max_pages must be >= 1, got " + std::to_string(max_pages));
    require(window >= 0, op, "window must be >= 0, got " + std::to_string(window));
    require(q_stride >= static_cast<int64_t>(heads) * head_dim, op,
            "q_stride " + std::to_string(q_stride) + " < heads * head_dim " +
                std::to_string(static_cast<int64_t>(heads) * head_dim));
    const int64_t addressable = static_cast<int64_t>(max_pages) * page_size;
    require(max_kv_len >= 1 && max_kv_len <= addressable, op,
            "max_kv_len must be in [1, max_pages * page_size = " + std::to_string(addressable) +
                "], got " + std::to_string(max_kv_len));
    if (tokens > 0)
      require(block_tables != nullptr && token_request != nullptr && positions != nullptr &&
                  kv_lens != nullptr,
              op, "block_tables, token_request, positions and kv_lens must not be null");
  }
};

// ---- the definition's pieces, shared by the CPU and the kernels ------------------------

// The positions [lo, hi) one query reads.
struct AttentionRange {
  int64_t lo = 0, hi = 0;
};
SD_HD AttentionRange attention_range(int64_t pos, int64_t kv_len, int window, bool causal) {
  AttentionRange r;
  r.lo = 0;
  if (window > 0) r.lo = pos - window + 1 > 0 ? pos - window + 1 : 0;
  r.hi = causal && pos + 1 < kv_len ? pos + 1 : kv_len;
  return r;
}

// max of the definition: NaN-ignoring, else a > b ? a : b.
SD_HD float attention_max(float a, float b) {
  if (a != a) return b;
  if (b != b) return a;
  return a > b ? a : b;
}

// chunk_max / chunk_sum over x[0..64) in the definition's order (x is overwritten).
SD_HD float attention_chunk_max(float* x) {
  for (int l = 0; l < 32; ++l) x[l] = attention_max(x[l], x[l + 32]);
  for (int off = 16; off > 0; off /= 2)
    for (int l = 0; l < off; ++l) x[l] = attention_max(x[l], x[l + off]);
  return x[0];
}
SD_HD float attention_chunk_sum(float* x) {
  for (int l = 0; l < 32; ++l) x[l] = x[l] + x[l + 32];
  for (int off = 16; off > 0; off /= 2)
    for (int l = 0; l < off; ++l) x[l] = x[l] + x[l + off];
  return x[0];
}

// One fold step's scalars: updates M and L and returns the factors a (old state)
// and b (this chunk) that O[d] = O[d] * a + o_c[d] * b uses.
struct AttentionFold {
  float a = 0.0f, b = 0.0f;
};
SD_HD AttentionFold attention_fold(float& M, float& L, float m_c, float l_c, bool first) {
  const float next = attention_max(M, m_c);
  AttentionFold f;
  f.a = first ? 0.0f : exp_f32(M - next);
  f.b = exp_f32(m_c - next);
  const float la = L * f.a;
  const float lb = l_c * f.b;
  L = la + lb;
  M = next;
  return f;
}
SD_HD float attention_fold_value(float O, float o_c, AttentionFold f) {
  const float oa = O * f.a;
  const float ob = o_c * f.b;
  return oa + ob;
}

// The softmax scale: 1 / sqrt(head_dim) in fp32 (IEEE sqrt and division).
inline float attention_scale(int head_dim) {
  return 1.0f / std::sqrt(static_cast<float>(head_dim));
}

}  // namespace sparkdraft::ops
