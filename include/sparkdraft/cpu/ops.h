// The CPU reference ops: one function per op of the draft job, on plain host
// buffers. These are the eager definitions (SPEC section 3) the CUDA kernels are
// held to; each comment states where values are rounded to bf16 and where fp32
// is kept. Shapes are written [rows, cols]; every buffer is row-major, and a
// `*_stride` is the distance in elements between consecutive rows.
//
// Threads: ops that loop over rows or heads split them over `threads` workers
// (cpu/parallel.h); the result never depends on the thread count.
#pragma once

#include <cstdint>

#include "sparkdraft/config.h"
#include "sparkdraft/core/bf16.h"

namespace sparkdraft::cpu {

// ---- norms ------------------------------------------------------------------
// RMSNorm of each row of n values:
//   ss  = canonical_sum(x_i * x_i)          (fp32, core/reduce.h order, fma per term)
//   r   = 1.0f / sqrtf(ss / float(n) + eps) (IEEE div and sqrt, fp32)
//   y_i = bf16((x_i * r) * g_i)             g_i = w_i, 1 + w_i (fp32 add), or no multiply
// Input bf16 or fp32 (the fp32 residual stream). `weight` may be null only for
// NormGain::none. In-place (y == x) is allowed for bf16.
void rms_norm(const bf16* x, int64_t x_stride, int rows, int n, const bf16* weight, NormGain gain,
              float eps, bf16* y, int64_t y_stride, int threads = 1);
void rms_norm(const float* x, int64_t x_stride, int rows, int n, const bf16* weight, NormGain gain,
              float eps, bf16* y, int64_t y_stride, int threads = 1);

// Per-head RMSNorm (QK-norm, V-norm), in place: for every token t and head h, the
// head_dim values at x + t*token_stride + h*head_dim are one rms_norm row, with the
// same rounding points: ss and r in fp32 (canonical order), one rounding to bf16
// per output, y_h = bf16((x_h * r) * g). `weight` (head_dim values, shared by all
// heads) may be null only for NormGain::none. Needs heads, head_dim >= 1 and
// token_stride >= heads * head_dim. Threads split the heads of a single token
// (decode); several tokens run one after another.
void head_rms_norm(bf16* x, int64_t token_stride, int tokens, int heads, int head_dim,
                   const bf16* weight, NormGain gain, float eps, int threads = 1);

// ---- residual boundary ------------------------------------------------------
// One residual boundary over rows of H (SPEC section 3):
//   b  = post_weight given (sandwich) ? rms_norm(branch) (bf16) : branch
//   s' = alpha_i * s_i + beta_i * b_i   (fp32: two products, one add, no fma)
//        plain residual (alpha == beta == null): s' = s_i + b_i
//   stream_out = s' (fp32 stream) or bf16(s') (bf16 stream)
//   next = rms_norm(bf16(s')) with pre_weight (bf16)
// `stream` holds fp32 when stream_dtype is f32, else bf16 (void* so one
// signature serves both). In-place update of the stream is allowed.
struct BoundaryParams {
  int rows = 0;
  int hidden = 0;  // H
  StreamDType stream_dtype = StreamDType::bf16;
  const bf16* post_weight = nullptr;  // [H] post-norm of the branch, null = none (pre-norm layers)
  bool post_norm = false;            // apply the post-norm (weight may be null with NormGain::none)
  const float* alpha = nullptr;      // [H] fp32, null = plain residual
  const float* beta = nullptr;       // [H] fp32
  const bf16* pre_weight = nullptr;  // [H] next input norm (or the final norm)
  NormGain gain = NormGain::weight;
  float eps = 1e-6f;
};
void residual_boundary(const BoundaryParams& p, const bf16* branch, void* stream, bf16* next,
                       int threads = 1);

// ---- RoPE ---------------------------------------------------------------------
// cos/sin table, computed once at load on the host:
//   inv_freq_i = float(1.0 / pow(theta, 2i / d))        (double math, rounded to fp32)
//   angle      = double(pos) * double(inv_freq_i)
//   cos[pos][i] = float(cos(angle)), sin[pos][i] = float(sin(angle))   i < d/2
// Layout: table[pos * d + i] = cos, table[pos * d + d/2 + i] = sin.
void rope_table(double theta, int head_dim, int64_t max_positions, float* table);

// Rotates `heads` heads of head_dim values of each token in place:
//   (x1, x2) -> (x1*c - x2*s, x2*c + x1*s)   fp32 products, one subtract/add, no fma,
//   rounded to bf16. NeoX pairs (i, i + d/2); GPT-J pairs (2i, 2i + 1).
// x: [tokens, x_stride], head h at x + t*x_stride + h*head_dim.
void rope(bf16* x, int64_t x_stride, int tokens, int heads, int head_dim, const int64_t* positions,
          const float* table, RopeStyle style, int threads = 1);

// ---- KV cache -------------------------------------------------------------------
// Paged cache of one layer: [pages * page_size, kv_heads, 2 * head_dim] bf16, head h
// of slot s holds K at [s][h][0, hd) and V at [s][h][hd, 2hd). Exact copies; a slot
// of -1 writes nothing.
void kv_insert(const bf16* k, int64_t k_stride, const bf16* v, int64_t v_stride, int tokens,
               int kv_heads, int head_dim, const int64_t* slots, bf16* cache);

// Slot of absolute position `pos` through a request's block table.
inline int64_t kv_slot(const int32_t* block_table, int page_size, int64_t pos) {
  return static_cast<int64_t>(block_table[pos / page_size]) * page_size + pos % page_size;
}

// ---- embedding, activations ------------------------------------------------------
// out[r] = table[ids[r]] (exact bf16 copy).
void embed(const int64_t* ids, int rows, const bf16* table, int hidden, bf16* out);

// SwiGLU: gu is [rows, 2I] (gate in [0, I), up in [I, 2I));
// y = bf16(silu(f32(g)) * f32(u)), silu from core/math.h.
void silu_mul(const bf16* gu, int rows, int inter, bf16* y, int threads = 1);

// Attention output norm and gate, per token and head (in place on o [tokens, heads*hd]):
//   o = o_norm ? rms_norm_head(o) (bf16, gain from `o_norm_weight`) : o
//   o = gate ? bf16(f32(o) * sigmoid(f32(g))) : o      g: [tokens, g_stride], heads*hd wide
void o_norm_gate(bf16* o, int tokens, int heads, int head_dim, const bf16* o_norm_weight,
                 bool o_norm, NormGain gain, float eps, const bf16* g, int64_t g_stride,
                 int threads = 1);

// ---- matrix products (within a bf16-ulp budget of the GPU, SPEC section 3) --------
// y[m][n] = bf16( sum_k f32(x[m][k]) * f32(w[n][k]) ), fp32 accumulation.
// x: [M, x_stride], w: [N, K] (a Linear weight), y: [M, y_stride].
void gemm(const bf16* x, int64_t x_stride, const bf16* w, int M, int N, int K, bf16* y,
          int64_t y_stride, int threads = 1);

// ---- attention over the paged cache ------------------------------------------------
// Query token t of a request attends to the request's cached positions
// [lo, kv_len) with kv_len = a + N (the context and the whole block: non-causal
// inside the block) and lo = window ? max(0, pos_t - window + 1) : 0.
//   s_j = (q . k_j) * scale (fp32, scale = 1 / sqrt(head_dim)), m = max_j s_j,
//   p_j = exp(s_j - m), o = bf16( sum_j p_j v_j / sum_j p_j ).
// GQA: query head h reads KV head h / (heads / kv_heads).
struct AttentionParams {
  int tokens = 0;  // query tokens (rows * N)
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
  int page_size = 0;
  int max_pages = 0;                      // block table row width
  int window = 0;                         // 0 = full
  int64_t q_stride = 0;                   // elements between query tokens
  const int32_t* block_tables = nullptr;  // [requests, max_pages]
  const int32_t* token_request =
      nullptr;                         // [tokens] request row of each token (-1: padding, output 0)
  const int64_t* positions = nullptr;  // [tokens] absolute position of each query
  const int64_t* kv_lens = nullptr;    // [requests] a + N
};
void attention(const AttentionParams& p, const bf16* q, const bf16* cache, bf16* out,
               int threads = 1);

// ---- Markov head, step logits, sampling ---------------------------------------------
// bias[r][v] = bf16( mma_chain(w2[v][0..R), e[r][0..R)) )   (core/mma.h: the tensor-core
// chain over the rank in increasing k16 steps from +0; one rounding, to bf16, at the end)
// e: [rows, R], w2: [V, R] (this shard's vocab slice), bias: [rows, V].
void markov_bias(const bf16* e, int rows, const bf16* w2, int vocab, int rank, bf16* bias,
                 int threads = 1);

// Output-logit transform, fixed at load: multiplier rounded to fp32,
// inv_cap = fp32(1) / fp32(cap).
struct LogitTransform {
  bool enabled = false;
  float multiplier = 1.0f;
  bool has_cap = false;
  float cap = 0.0f;
  float inv_cap = 0.0f;
  static LogitTransform from_config(const ModelConfig& c);
};

// Step logits of one row over n vocab entries:
//   s = bf16(f32(base) + f32(bias))
//   transform: t = f32(s) * multiplier; cap: t = tanh(t * inv_cap) * cap; l = bf16(t)
void step_logits(const bf16* base, const bf16* bias, int n, const LogitTransform& t, bf16* l);

// The noised score of one entry (SPEC section 4): T > 0: f32(l) / T + g, else f32(l).
// Best (value, id) over a row by the contract's rule: the lowest id whose score is
// NaN, else the lowest id of the maximum. `id_offset` is the row slice's first id.
struct RowBest {
  float value;
  int64_t id;
};
RowBest sample_row(const bf16* l, int n, int64_t id_offset, float temperature, uint32_t step_seed);

}  // namespace sparkdraft::cpu
