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
#include "sparkdraft/cpu/mma_gemm.h"
#include "sparkdraft/ops/attention.h"
#include "sparkdraft/ops/boundary.h"
#include "sparkdraft/ops/embed.h"
#include "sparkdraft/ops/gemm.h"
#include "sparkdraft/ops/kv.h"
#include "sparkdraft/ops/markov.h"
#include "sparkdraft/ops/markov_head.h"
#include "sparkdraft/ops/mlp.h"
#include "sparkdraft/ops/norm.h"
#include "sparkdraft/ops/query_block.h"
#include "sparkdraft/ops/rope.h"

namespace sparkdraft::cpu {

// ---- ops/norm.h ---------------------------------------------------------------------
void rms_norm(const ops::RmsNormParams& p, int threads = 1);
// Threads split the heads of a single token (decode); several tokens run one after
// another.
void head_rms_norm(const ops::HeadNormParams& p, int threads = 1);
void o_norm_gate(const ops::ONormGateParams& p, int threads = 1);

// ---- ops/boundary.h -----------------------------------------------------------------
// `residual` is float* when p.residual_dtype is f32, else bf16*; updated in place.
void residual_boundary(const ops::BoundaryParams& p, const bf16* branch, void* residual, bf16* next,
                       int threads = 1);

// ---- ops/rope.h ---------------------------------------------------------------------
void rope_table(double theta, int head_dim, int64_t max_positions, float* table);
// Also refuses a negative position (naming the token).
void rope(const ops::RopeParams& p, int threads = 1);

// ---- ops/kv.h -----------------------------------------------------------------------
// Also refuses a slot below -1 (naming the token).
void kv_insert(const ops::KvInsertParams& p);

// ---- ops/query_block.h, ops/embed.h, ops/mlp.h ----------------------------------------
void prepare_query_block(const ops::QueryBlockParams& p);
// The fill-in layout's drafted rows (ops/query_block.h, contract.md section 14).
void select_drafted_rows(const ops::DraftedRowsParams& p);
// Also refuses a negative id (naming the row).
void embed(const ops::EmbedParams& p);
void widen(const ops::WidenParams& p);
void silu_mul(const ops::SiluMulParams& p, int threads = 1);

// ---- ops/gemm.h ---------------------------------------------------------------------
// The chain of ops/gemm.h on the CPU twin (cpu/mma_gemm.h): one mma_gemm_rows per
// canonical K slice, the slice tree, then bf16 (p.y_dtype bf16) or the unrounded
// tree (f32: with K the columns of canonical slices [s0, s0 + k_slices) of a longer
// K, a TP rank's K columns (contract.md section 6: an aligned power-of-two range),
// that range's subtree of the whole tree). Threads split the N rows.
// With `packed` (cpu/mma_gemm.h), a weight packed there runs mma_gemm_packed: the
// same bits, faster (a miss is counted and runs mma_gemm_rows).
void gemm(const ops::GemmParams& p, int threads = 1, const MmaPackedSet* packed = nullptr);

// ---- ops/attention.h ------------------------------------------------------------------
// The header's definition (src/cpu/attention.cpp). Also refuses, naming the token,
// bad values behind the pointers (request rows, kv_lens, positions, an empty range,
// an unmapped page inside a query's [lo, hi)).
void attention(const ops::AttentionParams& p, const bf16* q, const bf16* cache, bf16* out,
               int threads = 1);

// ---- ops/markov_head.h --------------------------------------------------------------
// One step of the gated / rnn Markov head (contract.md section 13): each row's input x
// assembled, the projection as cpu::gemm (one chain over K, fp32 out), then the units. u may
// be p.e itself.
void markov_head(const ops::MarkovHeadParams& p, int threads = 1);

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
// The same over entries whose vocab ids are ids[0..n) (a reduced draft vocabulary's target
// ids, contract.md section 11): the noise and the ties are keyed by those ids.
RowBest sample_row_ids(const bf16* l, int n, const int32_t* ids, float temperature,
                       uint32_t step_seed);

}  // namespace sparkdraft::cpu
