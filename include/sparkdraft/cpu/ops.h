// The CPU reference ops: one function per op of the draft job, on plain host
// buffers. The contract of each (formula, rounding points, params and their
// check()) lives in include/sparkdraft/ops/<family>.h and is the same for the CUDA
// kernels (cuda/kernels.h); this header only declares the CPU side.
//
// Threads: ops that loop over rows or heads split them over `threads` workers
// (common/parallel.h); the result never depends on the thread count.
#pragma once

#include <cstdint>

#include "sparkdraft/config.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/ops/attention.h"
#include "sparkdraft/ops/boundary.h"
#include "sparkdraft/ops/embed.h"
#include "sparkdraft/ops/gemm.h"
#include "sparkdraft/ops/kv.h"
#include "sparkdraft/ops/markov.h"
#include "sparkdraft/ops/mlp.h"
#include "sparkdraft/ops/norm.h"
#include "sparkdraft/ops/query_block.h"
#include "sparkdraft/ops/rope.h"

namespace sparkdraft::cpu {

// ---- ops/norm.h ---------------------------------------------------------------------
void rms_norm(const bf16* x, int64_t x_stride, int rows, int n, const bf16* weight, NormGain gain,
              float eps, bf16* y, int64_t y_stride, int threads = 1);
void rms_norm(const float* x, int64_t x_stride, int rows, int n, const bf16* weight, NormGain gain,
              float eps, bf16* y, int64_t y_stride, int threads = 1);
// Threads split the heads of a single token (decode); several tokens run one after
// another.
void head_rms_norm(bf16* x, int64_t token_stride, int tokens, int heads, int head_dim,
                   const bf16* weight, NormGain gain, float eps, int threads = 1);
void o_norm_gate(bf16* o, int tokens, int heads, int head_dim, const bf16* o_norm_weight,
                 bool o_norm, NormGain gain, float eps, const bf16* g, int64_t g_stride,
                 int threads = 1);

// ---- ops/boundary.h -----------------------------------------------------------------
// `residual` is float* when p.residual_dtype is f32, else bf16*; updated in place.
void residual_boundary(const ops::BoundaryParams& p, const bf16* branch, void* residual, bf16* next,
                       int threads = 1);

// ---- ops/rope.h ---------------------------------------------------------------------
void rope_table(double theta, int head_dim, int64_t max_positions, float* table);
void rope(bf16* x, int64_t x_stride, int tokens, int heads, int head_dim, const int64_t* positions,
          const float* table, RopeStyle style, int threads = 1);

// ---- ops/kv.h -----------------------------------------------------------------------
void kv_insert(const bf16* k, int64_t k_stride, const bf16* v, int64_t v_stride, int tokens,
               int kv_heads, int head_dim, const int64_t* slots, bf16* cache);

// ---- ops/query_block.h, ops/embed.h, ops/mlp.h ----------------------------------------
void prepare_query_block(const ops::QueryBlockParams& p);
void embed(const int64_t* ids, int rows, const bf16* table, int hidden, bf16* out);
void widen(const bf16* x, int64_t n, float* out);
void silu_mul(const bf16* gu, int rows, int inter, bf16* y, int threads = 1);

// ---- ops/gemm.h ---------------------------------------------------------------------
// The chain of ops/gemm.h on the CPU twin (cpu/mma_gemm.h): one mma_gemm_rows per
// canonical K slice, the slice tree, then bf16. Threads split the N rows.
void gemm(const bf16* x, int64_t x_stride, const bf16* w, int M, int N, int K, bf16* y,
          int64_t y_stride, int k_slices, int threads = 1);
// The fp32 sum before gemm's rounding: out[m * out_stride + n] = the canonical tree
// (core/reduce.h canonical_tree_sum) of the k_slices slice chains of x[m] and w[n]
// over K, no bf16 rounding. w has row stride w_stride >= K. With K the columns of
// canonical slices [s0, s0 + k_slices) of a longer K (a TP rank's K columns,
// contract.md section 6: an aligned power-of-two range), this is that range's subtree of the
// whole tree; gemm(k_slices) is bf16 of it. Same argument rules as gemm.
void gemm_slices_f32(const bf16* x, int64_t x_stride, const bf16* w, int64_t w_stride, int M, int N,
                     int K, float* out, int64_t out_stride, int k_slices, int threads = 1);

// ---- ops/attention.h ------------------------------------------------------------------
// The header's definition (src/cpu/attention.cpp). Also refuses, naming the token,
// bad values behind the pointers (request rows, kv_lens, positions, an empty range,
// an unmapped page inside a query's [lo, hi)).
void attention(const ops::AttentionParams& p, const bf16* q, const bf16* cache, bf16* out,
               int threads = 1);

// ---- ops/markov.h -------------------------------------------------------------------
// e: [rows, R], w2: [V, R] (this shard's vocab slice), bias: [rows, V].
void markov_bias(const bf16* e, int rows, const bf16* w2, int vocab, int rank, bf16* bias,
                 int threads = 1);
// Step logits of one row over n vocab entries (s, then the transform).
void step_logits(const bf16* base, const bf16* bias, int n, const ops::LogitTransform& t, bf16* l);
// Best (value, id) of one row slice by the sampling rule; `id_offset` is the slice's
// first id.
struct RowBest {
  float value;
  int64_t id;
};
RowBest sample_row(const bf16* l, int n, int64_t id_offset, float temperature, uint32_t step_seed);

}  // namespace sparkdraft::cpu
