// The contract of the verifier (contract.md section 8): one definition, followed
// by the CPU reference (src/cpu/verify.cpp) and the GPU kernels, bit for bit.
//
// Per row r (slot -1: padding, nothing read or written), position j = 0..N
// (x_j = draft_tokens[r][j] for j < N, c_j = cache[slot][j], t_j = target[r][j]):
//   s   = T > 0 ? f32(l) / T : f32(l)         (IEEE fp32 division; verify_scaled)
//   order: NaN first (lowest id), then larger s, then lower id  (core/sampling.h better)
//   first id f of a vector: the fold of core/packet.h packets (value, id, NaN flag)
//   law L(s) over a kept set K:
//     degenerate (s[f] NaN or +-inf): 1.0f at f, 0 elsewhere
//     else M = s[f], E[v] = exp_law(s[v] - M) (fp32 subtract; the law's fp32 exp),
//          e[v] = floor(E[v] * 2^64) (exact), Zi = sum of e[v] over K (exact 128-bit
//          integer: any split, any order), Z = f32(Zi * 2^-64) (nearest even),
//          L[v] = E[v] / Z (fp32 division) on K, 0 off K
//   q_j = L(f32(c_j) / T) over all ids; p_j = L(f32(t_j) / T) over K_j =
//     top-k: the first k ids of the order (k = 0 or k >= V: all), then
//     top-p (p < 1, law not degenerate): v stays iff (sum of e[w] over the kept w
//     before v) < p * Zi, exactly (core/verify_math.h top_p_keeps)
//   keys (section 8.4): u_j = philox_uniform(randint(seed, a + j + 2^61), x_j);
//     draw noise e[v] = -log_law(philox_uniform(randint(seed, a + j + 2^62), v))
//   n_r = lengths[r] (N without lengths): the drafts verified; N below is n_r
//   standard, T > 0: accept x_j iff u_j * q_j(x_j) < p_j(x_j) (exact, in double);
//     stop at the first rejection k
//   standard, T = 0: accept iff x_j == the first id of f32(t_j); emitted = that id
//   the race over weights w >= 0 at j: the first id of w[v] / e[v] (fp32 divide)
//   emitted (T > 0): k = N: the target draw, a degenerate p_N's point, else the race
//     over E_N (0 off K); k < N: the race over max(p_k[v] - q_k[v], 0) (fp32
//     subtract); if every weight is 0 (no residual mass): the target draw at k
//   block, T > 0 (section 8.6): w_0 = 1, w_i = min(1, w_{i-1} * (P/Q)) (fp32, P and Q
//     of x_{i-1}; 0 once w or P is 0); R_i = f32(2^-64 * sum floor(m * 2^64)) with
//     m = max(w_i * p_i[v] - q_i[v], 0) (fp32 multiply, subtract); h_i = R_i /
//     (R_i + (1 - w_i)) (1 when the denominator is 0), h_N = w_N; k = the largest i
//     with u_{i-1} < h_i (0 if none); emitted: k = N as standard, else the race over
//     max(w_k * p_k[v] - q_k[v], 0) (the target draw if all are 0)
//   outputs: num_accepted[r] = k; tokens[r] = x_0..x_{k-1}, emitted, then -1.
//
// Stages (how a kernel splits the work; section 8.7). For each (row, position):
//   (a) vocabulary passes over any slices [v0, v1), each producing partials:
//       pass 1: first-id packets of s_target and s_draft (LawStats::first);
//       top-k / top-p: the kept set (any exact selection giving the set above);
//       pass 2 (given M): the exact sums Zi (LawStats::sum) of target and draft;
//       block only, pass 2b (given w_i): the residual mass sum R_i;
//       pass 3 (given k): the draw packet at position k.
//   (b) the combine of the slices' partials: packets by first_of, sums by u128_add
//       (exact: every tree gives the same bits);
//   (c) a short sequential decision per row over its N positions.
// The element arithmetic is core/verify_math.h, shared by both backends.
#pragma once

#include <cstdint>

#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/hd.h"
#include "sparkdraft/core/verify_math.h"
#include "sparkdraft/ops/require.h"
#include "sparkdraft/verify.h"

namespace sparkdraft::ops {

struct VerifyParams {
  int rows = 0;
  int n = 0;                                  // N draft tokens per row (target rows: N + 1)
  int vocab = 0;                              // V
  int cache_rows = 0;                         // rows of the draft-logits cache
  const int64_t* draft_tokens = nullptr;      // [rows, N]
  const int64_t* anchor_positions = nullptr;  // [rows]
  const int64_t* seeds = nullptr;             // [rows]
  const float* temperatures = nullptr;        // [rows]
  const int32_t* top_k = nullptr;             // [rows] or null (off)
  const float* top_p = nullptr;               // [rows] or null (off)
  const int32_t* lengths = nullptr;           // [rows] n_r or null (N); clamped to [0, N]
  const int64_t* cache_slots = nullptr;       // [rows], -1 = padding
  const bf16* draft_logits = nullptr;         // [cache_rows, N, V]
  const void* target_logits = nullptr;        // [rows, N + 1, V]
  LogitsDType target_dtype = LogitsDType::bf16;
  VerifyMethod method = VerifyMethod::standard;
  // The streams' offsets. Only tests change them (the broken-verifier test sets
  // accept_salt to the draft's kDraftNoiseSalt).
  int64_t accept_salt = kVerifyAcceptSalt;
  int64_t draw_salt = kVerifyDrawSalt;
  int32_t* num_accepted = nullptr;  // [rows]
  int64_t* tokens = nullptr;        // [rows, N + 1]

  // The only validation of these fields (InvalidArgument naming the first bad
  // one). The row contents are validate_verify's (the API boundary).
  void check() const {
    const char* op = "verify";
    require(rows >= 0, op, "rows must be >= 0, got " + std::to_string(rows));
    require(n >= 1, op, "n must be >= 1, got " + std::to_string(n));
    require(vocab >= 1, op, "vocab must be >= 1, got " + std::to_string(vocab));
    require(cache_rows >= 1, op, "cache_rows must be >= 1, got " + std::to_string(cache_rows));
    if (rows == 0) return;
    require(draft_tokens && anchor_positions && seeds && temperatures && cache_slots &&
                draft_logits && target_logits,
            op, "an input array is null");
    require(num_accepted && tokens, op, "an output array is null");
  }
  int64_t target_row_stride() const { return static_cast<int64_t>(n + 1) * vocab; }
  // The drafts row r verifies: lengths[r] clamped to [0, N] (the API boundary refuses
  // a length outside it; on device memory it is not read on the host), N without lengths.
  SD_HD int row_length(int r) const {
    if (!lengths) return n;
    const int32_t l = lengths[r];
    return l < 0 ? 0 : (l > n ? n : l);
  }
  int64_t cache_row_stride() const { return static_cast<int64_t>(n) * vocab; }
};

// The params of one verify call: the batch's arrays and the outputs, N and V from the config,
// the cache rows from the options (cache_slots). Both backends build them here.
VerifyParams verify_params(const ModelConfig& c, const DraftOptions& o, const VerifyBatch& b,
                           const VerifyOutputs& out);

}  // namespace sparkdraft::ops
