// cpu::attention: ops/attention.h's definition followed literally, with both
// products on cpu/mma_gemm.h (mma_gemm_rows: bit for bit mma_chain, AVX2 where the
// CPU has it).
//
// Work: one unit per (request, KV head) holds every query row of that request that
// reads the KV head (tokens x grouped heads, in token order then head order) and
// walks the union of their chunk ranges once:
//   scores: w = the K rows of a page segment of the chunk (w_stride = one cache
//     slot), x = the packed query rows; S[row][j] = chain(q_row, k_j) for the
//     chunk's positions below kv_len on mapped pages;
//   P.V: the chunk's V transposed to Vt[d][j] (+0 at positions >= kv_len or on
//     unmapped pages), w = Vt's rows, x = the pb rows: o_c[row][d].
// Each row folds only the chunks that intersect its own [lo, hi). Units are split
// over threads; every element gets the same arithmetic whatever thread runs it.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <vector>

#include "common/parallel.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/cpu/mma_gemm.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/ops/kv.h"

namespace sparkdraft::cpu {
namespace {

using ops::require;
constexpr int kChunk = ops::kAttentionChunk;

// Refuses bad values behind the pointers, naming the token.
void check_values(const ops::AttentionParams& p) {
  const char* op = "attention";
  const int64_t capacity = static_cast<int64_t>(p.max_pages) * p.page_size;
  for (int t = 0; t < p.tokens; ++t) {
    const int32_t r = p.token_request[t];
    const std::string who = "token " + std::to_string(t);
    require(r >= -1 && r < p.requests, op,
            who + " has request " + std::to_string(r) + " (requests " + std::to_string(p.requests) +
                ")");
    if (r < 0) continue;
    const int64_t kv_len = p.kv_lens[r], pos = p.positions[t];
    require(kv_len >= 1 && kv_len <= capacity, op,
            who + ": kv_len " + std::to_string(kv_len) + " is outside [1, " +
                std::to_string(capacity) + "]");
    require(pos >= 0, op, who + " has negative position " + std::to_string(pos));
    const ops::AttentionRange rg = ops::attention_range(pos, kv_len, p.window, p.causal);
    require(rg.lo < rg.hi, op,
            who + ": empty range [" + std::to_string(rg.lo) + ", " + std::to_string(rg.hi) +
                ") (window start not below kv_len, or a causal position past it)");
    const int32_t* table = p.block_tables + static_cast<int64_t>(r) * p.max_pages;
    for (int64_t page = rg.lo / p.page_size; page * p.page_size < rg.hi; ++page)
      require(table[page] >= 0, op,
              "request " + std::to_string(r) + " has block table entry " +
                  std::to_string(table[page]) + " at page " + std::to_string(page));
  }
}

struct Row {
  int64_t token = 0;
  int head = 0;
  ops::AttentionRange range;
  int64_t c_begin = 0, c_end = 0;  // chunks intersecting [lo, hi)
};

// Every row of one (request, KV head) unit.
void attend_unit(const ops::AttentionParams& p, const bf16* q, const bf16* cache, bf16* out,
                 int request, int kvh, const std::vector<int64_t>& tokens) {
  const int hd = p.head_dim;
  const int group = p.heads / p.kv_heads;
  const float scale = ops::attention_scale(hd);
  const int64_t kv_len = p.kv_lens[request];
  const int32_t* table = p.block_tables + static_cast<int64_t>(request) * p.max_pages;
  const int64_t slot_stride = static_cast<int64_t>(p.kv_heads) * 2 * hd;

  std::vector<Row> rows;
  int64_t c_min = std::numeric_limits<int64_t>::max(), c_max = 0;
  for (const int64_t t : tokens) {
    for (int g = 0; g < group; ++g) {
      Row row;
      row.token = t;
      row.head = kvh * group + g;
      row.range = ops::attention_range(p.positions[t], kv_len, p.window, p.causal);
      row.c_begin = row.range.lo / kChunk;
      row.c_end = (row.range.hi + kChunk - 1) / kChunk;
      c_min = std::min(c_min, row.c_begin);
      c_max = std::max(c_max, row.c_end);
      rows.push_back(row);
    }
  }
  const int R = static_cast<int>(rows.size());
  std::vector<bf16> qp(static_cast<size_t>(R) * hd);
  for (int i = 0; i < R; ++i)
    std::memcpy(qp.data() + static_cast<size_t>(i) * hd,
                q + rows[i].token * p.q_stride + static_cast<int64_t>(rows[i].head) * hd,
                static_cast<size_t>(hd) * sizeof(bf16));

  std::vector<float> M(static_cast<size_t>(R), -INFINITY), L(static_cast<size_t>(R), 0.0f);
  std::vector<float> O(static_cast<size_t>(R) * hd, 0.0f);
  std::vector<char> started(static_cast<size_t>(R), 0);
  std::vector<float> S(static_cast<size_t>(R) * kChunk), oc(static_cast<size_t>(R) * hd);
  std::vector<bf16> pb(static_cast<size_t>(R) * kChunk), vt(static_cast<size_t>(hd) * kChunk);
  std::vector<int64_t> slot(kChunk);
  float x[kChunk], pj[kChunk];

  for (int64_t c = c_min; c < c_max; ++c) {
    bool any = false;
    for (const Row& row : rows) any = any || (c >= row.c_begin && c < row.c_end);
    if (!any) continue;
    const int64_t p0 = c * kChunk;
    // Slots of the chunk's readable positions (< kv_len, mapped page), -1 otherwise.
    for (int j = 0; j < kChunk; ++j) {
      const int64_t pos = p0 + j;
      slot[j] = -1;
      if (pos < kv_len && table[pos / p.page_size] >= 0)
        slot[j] = ops::kv_slot(table, p.page_size, pos);
    }
    // Scores, one run of consecutive slots (a page segment) at a time.
    for (int j = 0; j < kChunk;) {
      if (slot[j] < 0) {
        ++j;
        continue;
      }
      int e = j + 1;
      while (e < kChunk && slot[e] == slot[e - 1] + 1) ++e;
      mma_gemm_rows(cache + (slot[j] * p.kv_heads + kvh) * 2 * static_cast<int64_t>(hd),
                    slot_stride, e - j, qp.data(), hd, R, hd, S.data() + j, kChunk);
      j = e;
    }
    // Per row: m_c, p_j, l_c, pb_j.
    std::vector<float> l_c(static_cast<size_t>(R)), m_c(static_cast<size_t>(R));
    for (int i = 0; i < R; ++i) {
      const Row& row = rows[static_cast<size_t>(i)];
      bf16* pbi = pb.data() + static_cast<size_t>(i) * kChunk;
      if (c < row.c_begin || c >= row.c_end) {
        std::fill(pbi, pbi + kChunk, bf16{0});
        continue;
      }
      bool unmasked[kChunk];
      for (int j = 0; j < kChunk; ++j) {
        const int64_t pos = p0 + j;
        unmasked[j] = pos >= row.range.lo && pos < row.range.hi;
        x[j] = unmasked[j] ? S[static_cast<size_t>(i) * kChunk + j] * scale : -INFINITY;
      }
      const float m = ops::attention_chunk_max(x);
      for (int j = 0; j < kChunk; ++j) {
        pj[j] = unmasked[j] ? exp_f32(S[static_cast<size_t>(i) * kChunk + j] * scale - m) : 0.0f;
        pbi[j] = to_bf16(pj[j]);
      }
      m_c[static_cast<size_t>(i)] = m;
      l_c[static_cast<size_t>(i)] = ops::attention_chunk_sum(pj);
    }
    // P.V: Vt[d][j].
    for (int j = 0; j < kChunk; ++j) {
      const bf16* v = slot[j] >= 0
                          ? cache + (slot[j] * p.kv_heads + kvh) * 2 * static_cast<int64_t>(hd) + hd
                          : nullptr;
      for (int d = 0; d < hd; ++d) vt[static_cast<size_t>(d) * kChunk + j] = v ? v[d] : bf16{0};
    }
    mma_gemm_rows(vt.data(), kChunk, hd, pb.data(), kChunk, R, kChunk, oc.data(), hd);
    // Fold.
    for (int i = 0; i < R; ++i) {
      const Row& row = rows[static_cast<size_t>(i)];
      if (c < row.c_begin || c >= row.c_end) continue;
      const ops::AttentionFold f = ops::attention_fold(
          M[static_cast<size_t>(i)], L[static_cast<size_t>(i)], m_c[static_cast<size_t>(i)],
          l_c[static_cast<size_t>(i)], !started[static_cast<size_t>(i)]);
      started[static_cast<size_t>(i)] = 1;
      float* Oi = O.data() + static_cast<size_t>(i) * hd;
      const float* oci = oc.data() + static_cast<size_t>(i) * hd;
      for (int d = 0; d < hd; ++d) Oi[d] = ops::attention_fold_value(Oi[d], oci[d], f);
    }
  }
  const int64_t width = static_cast<int64_t>(p.heads) * hd;
  for (int i = 0; i < R; ++i) {
    const Row& row = rows[static_cast<size_t>(i)];
    bf16* o = out + row.token * width + static_cast<int64_t>(row.head) * hd;
    const float* Oi = O.data() + static_cast<size_t>(i) * hd;
    for (int d = 0; d < hd; ++d) o[d] = to_bf16(Oi[d] / L[static_cast<size_t>(i)]);
  }
}

}  // namespace

void attention(const ops::AttentionParams& p, const bf16* q, const bf16* cache, bf16* out,
               int threads) {
  p.check();
  if (p.tokens == 0) return;
  require(q != nullptr && cache != nullptr && out != nullptr, "attention",
          "q, cache and out must not be null");
  check_values(p);
  const int64_t width = static_cast<int64_t>(p.heads) * p.head_dim;
  std::vector<std::vector<int64_t>> by_request(static_cast<size_t>(p.requests));
  for (int t = 0; t < p.tokens; ++t) {
    const int32_t r = p.token_request[t];
    if (r < 0) {
      std::fill(out + t * width, out + (t + 1) * width, bf16{0});
      continue;
    }
    by_request[static_cast<size_t>(r)].push_back(t);
  }
  std::vector<int> live;
  for (int r = 0; r < p.requests; ++r)
    if (!by_request[static_cast<size_t>(r)].empty()) live.push_back(r);
  const int64_t units = static_cast<int64_t>(live.size()) * p.kv_heads;
  parallel_for(units, threads, [&](int64_t begin, int64_t end) {
    for (int64_t u = begin; u < end; ++u) {
      const int r = live[static_cast<size_t>(u / p.kv_heads)];
      attend_unit(p, q, cache, out, r, static_cast<int>(u % p.kv_heads),
                  by_request[static_cast<size_t>(r)]);
    }
  });
}

}  // namespace sparkdraft::cpu
