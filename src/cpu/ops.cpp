// The CPU reference ops of cpu/ops.h. Every function follows its header comment
// literally: the same rounding points, the canonical reduction order of
// core/reduce.h where the contract names it, the math of core/math.h, no fma
// except the canonical lane accumulation (built with -ffp-contract=off). Work
// is split over rows, heads or vocab entries (common/parallel.h) and every index
// gets the same arithmetic whatever thread runs it, so results never depend
// on the thread count.
//
// gemm is the tensor-core chain of ops/gemm.h on cpu/mma_gemm.h (the CPU twin of
// the instruction), one mma_gemm_rows per canonical K slice, then the slice tree
// and the bf16 rounding: the GPU's bits. Attention (also on the twin) is in
// cpu/attention.cpp.
#include "sparkdraft/cpu/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#include "common/fma_dispatch.h"
#include "common/parallel.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/core/reduce.h"
#include "sparkdraft/core/sampling.h"
#include "sparkdraft/cpu/mma_gemm.h"
#include "sparkdraft/error.h"

namespace sparkdraft::cpu {
namespace {

using ops::require;

// One RMSNorm row (header order): ss in the canonical order, r, then
// bf16((x_i * r) * g_i). load(i) returns f32(x_i); y may alias x (each x_i is
// read before y_i is written, after the whole sum).
template <class Load>
void norm_row(Load load, int n, const bf16* weight, NormGain gain, float eps, bf16* y) {
  const float ss = canonical_sum(n, [&](int i, float& a, float& b) {
    a = load(i);
    b = a;
  });
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(n) + eps);
  for (int i = 0; i < n; ++i) {
    float v = load(i) * r;
    if (gain == NormGain::weight) {
      v = v * to_f32(weight[i]);
    } else if (gain == NormGain::one_plus_weight) {
      v = v * (1.0f + to_f32(weight[i]));
    }
    y[i] = to_bf16(v);
  }
}

template <class T>
void norm_rows(const ops::RmsNormParams& p, const T* x, int threads) {
  parallel_for(p.rows, threads, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = x + r * p.x_stride;
      norm_row(
          [xr](int i) {
            if constexpr (std::is_same_v<T, bf16>) {
              return to_f32(xr[i]);
            } else {
              return xr[i];
            }
          },
          p.n, p.weight, p.gain, p.eps, p.y + r * p.y_stride);
    }
  });
}

}  // namespace

void rms_norm(const ops::RmsNormParams& p, int threads) {
  p.check();
  if (p.x_dtype == StreamDType::f32) {
    norm_rows(p, static_cast<const float*>(p.x), threads);
  } else {
    norm_rows(p, static_cast<const bf16*>(p.x), threads);
  }
}

void head_rms_norm(const ops::HeadNormParams& p, int threads) {
  p.check();
  for (int t = 0; t < p.tokens; ++t) {
    bf16* row = p.x + static_cast<int64_t>(t) * p.token_stride;
    rms_norm(ops::rms_norm_of(row, p.head_dim, p.heads, p.head_dim, p.weight, p.gain, p.eps, row,
                              p.head_dim),
             p.tokens == 1 ? threads : 1);
  }
}

void residual_boundary(const ops::BoundaryParams& p, const bf16* branch, void* residual, bf16* next,
                       int threads) {
  p.check();
  require(branch != nullptr && residual != nullptr && next != nullptr, "residual_boundary",
          "branch, residual and next must not be null");
  const int h = p.hidden;
  parallel_for(p.rows, threads, [&](int64_t begin, int64_t end) {
    std::vector<bf16> normed(static_cast<size_t>(p.post_norm ? h : 0));
    std::vector<bf16> rounded(static_cast<size_t>(h));
    for (int64_t r = begin; r < end; ++r) {
      const bf16* b = branch + r * h;
      if (p.post_norm) {
        norm_row([b](int i) { return to_f32(b[i]); }, h, p.post_weight, p.gain, p.eps,
                 normed.data());
        b = normed.data();
      }
      for (int i = 0; i < h; ++i) {
        const int64_t at = r * h + i;
        const float s = p.residual_dtype == StreamDType::f32
                            ? static_cast<float*>(residual)[at]
                            : to_f32(static_cast<bf16*>(residual)[at]);
        const float bi = to_f32(b[i]);
        float out;
        if (p.alpha != nullptr) {
          const float scaled_s = p.alpha[i] * s;
          const float scaled_b = p.beta[i] * bi;
          out = scaled_s + scaled_b;
        } else {
          out = s + bi;
        }
        rounded[static_cast<size_t>(i)] = to_bf16(out);
        if (p.residual_dtype == StreamDType::f32) {
          static_cast<float*>(residual)[at] = out;
        } else {
          static_cast<bf16*>(residual)[at] = rounded[static_cast<size_t>(i)];
        }
      }
      norm_row([&rounded](int i) { return to_f32(rounded[static_cast<size_t>(i)]); }, h,
               p.pre_weight, p.gain, p.eps, next + r * h);
    }
  });
}

void rope_table(double theta, int head_dim, int64_t max_positions, float* table) {
  require(head_dim >= 2 && head_dim % 2 == 0, "rope_table",
          "head_dim must be even and >= 2 (got " + std::to_string(head_dim) + ")");
  require(std::isfinite(theta) && theta > 0.0, "rope_table", "theta must be finite and > 0");
  require(max_positions >= 0, "rope_table", "max_positions must be >= 0");
  const int half = head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i)
    inv_freq[static_cast<size_t>(i)] = static_cast<float>(
        1.0 / std::pow(theta, static_cast<double>(2 * i) / static_cast<double>(head_dim)));
  for (int64_t pos = 0; pos < max_positions; ++pos) {
    float* row = table + pos * head_dim;
    for (int i = 0; i < half; ++i) {
      const double angle =
          static_cast<double>(pos) * static_cast<double>(inv_freq[static_cast<size_t>(i)]);
      row[i] = static_cast<float>(std::cos(angle));
      row[half + i] = static_cast<float>(std::sin(angle));
    }
  }
}

void rope(const ops::RopeParams& p, int threads) {
  p.check();
  for (int t = 0; t < p.tokens; ++t)
    require(
        p.positions[t] >= 0, "rope",
        "token " + std::to_string(t) + " has negative position " + std::to_string(p.positions[t]));
  const int head_dim = p.head_dim, heads = p.heads;
  const int64_t x_stride = p.x_stride;
  const RopeStyle style = p.style;
  bf16* x = p.x;
  const int half = head_dim / 2;
  parallel_for(p.tokens, threads, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const float* cos_row = p.table + p.positions[t] * head_dim;
      const float* sin_row = cos_row + half;
      for (int h = 0; h < heads; ++h) {
        bf16* xh = x + t * x_stride + static_cast<int64_t>(h) * head_dim;
        for (int i = 0; i < half; ++i) {
          const int i1 = style == RopeStyle::neox ? i : 2 * i;
          const int i2 = style == RopeStyle::neox ? i + half : 2 * i + 1;
          const float x1 = to_f32(xh[i1]), x2 = to_f32(xh[i2]);
          const float c = cos_row[i], s = sin_row[i];
          const float x1c = x1 * c, x2s = x2 * s, x2c = x2 * c, x1s = x1 * s;
          xh[i1] = to_bf16(x1c - x2s);
          xh[i2] = to_bf16(x2c + x1s);
        }
      }
    }
  });
}

void kv_insert(const ops::KvInsertParams& p) {
  p.check();
  for (int t = 0; t < p.tokens; ++t)
    require(p.slots[t] >= -1, "kv_insert",
            "token " + std::to_string(t) + " has slot " + std::to_string(p.slots[t]) +
                " (must be >= 0, or -1 to skip)");
  const int head_dim = p.head_dim, kv_heads = p.kv_heads;
  const int64_t* slots = p.slots;
  const size_t bytes = static_cast<size_t>(head_dim) * sizeof(bf16);
  for (int t = 0; t < p.tokens; ++t) {
    if (slots[t] < 0) continue;
    for (int h = 0; h < kv_heads; ++h) {
      bf16* dst = p.cache + (slots[t] * kv_heads + h) * 2 * static_cast<int64_t>(head_dim);
      std::memcpy(dst, p.k + t * p.k_stride + static_cast<int64_t>(h) * head_dim, bytes);
      std::memcpy(dst + head_dim, p.v + t * p.v_stride + static_cast<int64_t>(h) * head_dim, bytes);
    }
  }
}

void embed(const ops::EmbedParams& p) {
  p.check();
  for (int r = 0; r < p.rows; ++r) {
    require(p.ids[r] >= 0, "embed",
            "row " + std::to_string(r) + " has negative id " + std::to_string(p.ids[r]));
    std::memcpy(p.out + static_cast<int64_t>(r) * p.hidden, p.table + p.ids[r] * p.hidden,
                static_cast<size_t>(p.hidden) * sizeof(bf16));
  }
}

void prepare_query_block(const ops::QueryBlockParams& p) {
  p.check();
  for (int r = 0; r < p.rows; ++r) {
    const bool pad = p.cache_slots[r] < 0;
    const int64_t a = pad ? 0 : p.anchor_positions[r];
    const int64_t anchor = pad ? 0 : p.anchor_tokens[r];
    const int32_t* table = p.block_tables + static_cast<int64_t>(r) * p.max_pages;
    for (int j = 0; j < p.steps; ++j) {
      const int64_t t = static_cast<int64_t>(r) * p.steps + j;
      p.ids[t] = j == 0 ? anchor : p.mask_token;
      p.positions[t] = a + j;
      p.token_request[t] = pad ? -1 : r;
      p.slots[t] = pad ? -1 : ops::kv_slot(table, p.page_size, a + j);
    }
    p.kv_lens[r] = a + p.steps;
    p.safe_anchor[r] = anchor;
    p.safe_position[r] = a;
  }
}

void select_drafted_rows(const ops::DraftedRowsParams& p) {
  p.check();
  const size_t H = static_cast<size_t>(p.hidden);
  for (int r = 0; r < p.rows; ++r)
    std::memcpy(p.out + static_cast<size_t>(r) * p.drafted * H,
                p.in + (static_cast<size_t>(r) * p.slots + p.first) * H,
                static_cast<size_t>(p.drafted) * H * sizeof(bf16));
}

void widen(const ops::WidenParams& p) {
  p.check();
  for (int64_t i = 0; i < p.n; ++i) p.out[i] = to_f32(p.x[i]);
}

void silu_mul(const ops::SiluMulParams& p, int threads) {
  p.check();
  const int inter = p.inter;
  parallel_for(p.rows, threads, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const bf16* g = p.gu + r * 2 * inter;
      const bf16* u = g + inter;
      for (int i = 0; i < inter; ++i)
        p.y[r * inter + i] = to_bf16(silu_f32(to_f32(g[i])) * to_f32(u[i]));
    }
  });
}

void o_norm_gate(const ops::ONormGateParams& p, int threads) {
  p.check();
  const int heads = p.heads, head_dim = p.head_dim;
  const int64_t width = static_cast<int64_t>(heads) * head_dim;
  parallel_for(p.tokens, threads, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      for (int h = 0; h < heads; ++h) {
        bf16* oh = p.o + t * width + static_cast<int64_t>(h) * head_dim;
        if (p.o_norm)
          norm_row([oh](int i) { return to_f32(oh[i]); }, head_dim, p.o_norm_weight, p.gain, p.eps,
                   oh);
        if (p.g == nullptr) continue;
        const bf16* gh = p.g + t * p.g_stride + static_cast<int64_t>(h) * head_dim;
        for (int i = 0; i < head_dim; ++i)
          oh[i] = to_bf16(to_f32(oh[i]) * sigmoid_f32(to_f32(gh[i])));
      }
    }
  });
}

// ---- gemm ---------------------------------------------------------------------------
void gemm(const ops::GemmParams& p, int threads, const MmaPackedSet* packed) {
  p.check();
  const int M = p.M, N = p.N, K = p.K;
  if (M == 0 || N == 0) return;
  // part[m][s][n]: slice s's chain of (x[m], w[n]); one mma_gemm_rows (or
  // mma_gemm_packed) per slice.
  const int S = p.k_slices, len = K / S;
  const int64_t w_stride = p.w_row_stride(), part_stride = static_cast<int64_t>(S) * N;
  const MmaPacked* pw = packed ? packed->lookup(p.w, w_stride, N, K, S) : nullptr;
  std::vector<float> part(static_cast<size_t>(M) * static_cast<size_t>(part_stride));
  for (int s = 0; s < S; ++s) {
    const bf16* xs = p.x + static_cast<int64_t>(s) * len;
    float* out = part.data() + static_cast<int64_t>(s) * N;
    if (pw)
      mma_gemm_packed(*pw, s, xs, p.x_stride, M, out, part_stride, threads);
    else
      mma_gemm_rows(p.w + static_cast<int64_t>(s) * len, w_stride, N, xs, p.x_stride, M, len, out,
                    part_stride, threads);
  }
  for (int m = 0; m < M; ++m) {
    const float* row = part.data() + m * part_stride;
    for (int n = 0; n < N; ++n) {
      float t[ops::kGemmMaxKSlices];
      for (int s = 0; s < S; ++s) t[s] = row[static_cast<int64_t>(s) * N + n];
      const float sum = canonical_tree_sum(t, S);
      if (p.y_dtype == StreamDType::f32) {
        p.y_f32()[m * p.y_stride + n] = sum;
      } else {
        p.y_bf16()[m * p.y_stride + n] = to_bf16(sum);
      }
    }
  }
}

// ---- Markov head, step logits, sampling -----------------------------------------------
namespace {

// The chains of vocab entries [v_begin, v_end) against every row of e, in chunks
// of 512 entries (cpu/mma_gemm.h: the same bits as mma_chain per entry and row).
void markov_range(const bf16* e, int rows, const bf16* w2, int vocab, int rank, int64_t v_begin,
                  int64_t v_end, bf16* bias) {
  constexpr int64_t kChunk = 512;
  std::vector<float> acc(static_cast<size_t>(rows) * kChunk);
  for (int64_t v0 = v_begin; v0 < v_end; v0 += kChunk) {
    const int n = static_cast<int>(std::min(kChunk, v_end - v0));
    mma_gemm_rows(w2 + v0 * rank, rank, n, e, rank, rows, rank, acc.data(), kChunk);
    for (int r = 0; r < rows; ++r)
      for (int i = 0; i < n; ++i)
        bias[static_cast<int64_t>(r) * vocab + v0 + i] =
            to_bf16(acc[static_cast<size_t>(r) * kChunk + i]);
  }
}

}  // namespace

void markov_bias(const bf16* e, int rows, const bf16* w2, int vocab, int rank, bf16* bias,
                 int threads) {
  require(rows >= 0 && vocab >= 0 && rank >= 1, "markov_bias",
          "needs rows >= 0, vocab >= 0, rank >= 1");
  parallel_for(vocab, threads, [&](int64_t begin, int64_t end) {
    markov_range(e, rows, w2, vocab, rank, begin, end, bias);
  });
}

}  // namespace sparkdraft::cpu

namespace sparkdraft::ops {

LogitTransform LogitTransform::from_config(const ModelConfig& c) {
  LogitTransform t;
  t.enabled = c.has_logit_transform();
  t.multiplier = c.logit_multiplier.value_or(1.0f);
  if (!std::isfinite(t.multiplier))
    throw ConfigError("logit_multiplier must be finite (got " + std::to_string(t.multiplier) + ")");
  if (c.logit_soft_cap.has_value()) {
    t.has_cap = true;
    t.cap = *c.logit_soft_cap;
    if (!(std::isfinite(t.cap) && t.cap > 0.0f))
      throw ConfigError("logit_soft_cap must be finite and > 0 (got " + std::to_string(t.cap) +
                        ")");
    t.inv_cap = 1.0f / t.cap;
  }
  return t;
}

}  // namespace sparkdraft::ops

namespace sparkdraft::cpu {

void step_logits(const bf16* base, const bf16* bias, int n, const ops::LogitTransform& t, bf16* l) {
  require(n >= 0, "step_logits", "needs n >= 0");
  for (int i = 0; i < n; ++i) {
    const bf16 s = to_bf16(to_f32(base[i]) + to_f32(bias[i]));
    if (!t.enabled) {
      l[i] = s;
      continue;
    }
    float v = to_f32(s) * t.multiplier;
    if (t.has_cap) v = tanh_f32(v * t.inv_cap) * t.cap;
    l[i] = to_bf16(v);
  }
}

namespace {

// The row's winner (contract section 4): id_of(i) is the vocabulary id of entry i.
template <class IdOf>
RowBest sample_loop(const bf16* l, int n, float temperature, uint32_t step_seed, IdOf id_of) {
  RowBest best{noised_score(to_f32(l[0]), temperature, step_seed, id_of(0)), id_of(0)};
  for (int i = 1; i < n; ++i) {
    const int64_t id = id_of(i);
    const float z = noised_score(to_f32(l[i]), temperature, step_seed, id);
    if (better(z, id, best.value, best.id)) best = RowBest{z, id};
  }
  return best;
}

// The same loop with noised_score's fma calls as instructions (common/fma_dispatch.h).
SD_FMA_FLATTEN RowBest sample_offset_fma(const bf16* l, int n, int64_t id_offset, float temperature,
                                         uint32_t step_seed) {
  return sample_loop(l, n, temperature, step_seed, [=](int i) { return id_offset + i; });
}
SD_FMA_FLATTEN RowBest sample_ids_fma(const bf16* l, int n, const int32_t* ids, float temperature,
                                      uint32_t step_seed) {
  return sample_loop(l, n, temperature, step_seed, [=](int i) { return int64_t{ids[i]}; });
}

void require_sampling(int n, float temperature, const char* op) {
  require(n >= 1, op, "needs n >= 1");
  require(std::isfinite(temperature) && temperature >= 0.0f, op,
          "temperature must be finite and >= 0 (got " + std::to_string(temperature) + ")");
}

}  // namespace

RowBest sample_row(const bf16* l, int n, int64_t id_offset, float temperature, uint32_t step_seed) {
  require_sampling(n, temperature, "sample_row");
  if (detail::has_fma()) return sample_offset_fma(l, n, id_offset, temperature, step_seed);
  return sample_loop(l, n, temperature, step_seed, [=](int i) { return id_offset + i; });
}

RowBest sample_row_ids(const bf16* l, int n, const int32_t* ids, float temperature,
                       uint32_t step_seed) {
  require_sampling(n, temperature, "sample_row_ids");
  if (detail::has_fma()) return sample_ids_fma(l, n, ids, temperature, step_seed);
  return sample_loop(l, n, temperature, step_seed, [=](int i) { return int64_t{ids[i]}; });
}

}  // namespace sparkdraft::cpu
