// Attention test cases shared by the CPU and GPU tests: seeded paged caches with
// shuffled pages, several requests of different kv_len, a block of queries per
// request, padding tokens, and the traps the definition must survive:
//   * slots at positions >= kv_len (the rest of the last page, and a mapped page
//     past it) hold NaN in K and V;
//   * pages wholly below every query's window start are unmapped (-1);
//   * optionally a NaN and a +inf query head.
// reference_attention is an independent scalar implementation of
// ops/attention.h's definition, written from the header comment with mma_chain
// (core/mma.h) for both products: one (token, head) at a time.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <sstream>
#include <string>
#include <vector>

#include "common/random.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/core/mma.h"
#include "sparkdraft/ops/attention.h"

namespace sparkdraft::test {

struct AttentionCase {
  int heads = 4, kv_heads = 1, head_dim = 64;
  int window = 0;
  bool causal = false;
  std::vector<int64_t> kv_lens;
  int block = 7;  // queries per request (positions kv_len - n .. kv_len - 1, n = min(block,
                  // kv_len): a request shorter than the block gets one query per position)
  int page_size = 16;
  int padding_tokens = 0;  // -1 tokens, spread between the requests
  bool special_q = false;  // a NaN and a +inf query head
};

inline std::string describe(const AttentionCase& c) {
  std::ostringstream os;
  os << "heads " << c.heads << "/" << c.kv_heads << " head_dim " << c.head_dim << " window "
     << c.window << (c.causal ? " causal" : " non-causal") << " block " << c.block << " page "
     << c.page_size << " padding " << c.padding_tokens << (c.special_q ? " special_q" : "")
     << " kv_lens";
  for (int64_t l : c.kv_lens) os << " " << l;
  return os.str();
}

// Host data of one call; params() points into it.
struct AttentionData {
  AttentionCase c;
  int tokens = 0, max_pages = 0, pages = 0;
  int64_t q_stride = 0, max_kv_len = 0;
  std::vector<bf16> q, cache;
  std::vector<int32_t> block_tables, token_request;
  std::vector<int64_t> positions, kv_lens;

  ops::AttentionParams params() const {
    ops::AttentionParams p;
    p.tokens = tokens;
    p.requests = static_cast<int>(kv_lens.size());
    p.heads = c.heads;
    p.kv_heads = c.kv_heads;
    p.head_dim = c.head_dim;
    p.page_size = c.page_size;
    p.max_pages = max_pages;
    p.window = c.window;
    p.causal = c.causal;
    p.q_stride = q_stride;
    p.max_kv_len = max_kv_len;
    p.block_tables = block_tables.data();
    p.token_request = token_request.data();
    p.positions = positions.data();
    p.kv_lens = kv_lens.data();
    return p;
  }
  size_t out_size() const { return static_cast<size_t>(tokens) * c.heads * c.head_dim; }
};

inline AttentionData make_attention_data(Gen& gen, const AttentionCase& c) {
  AttentionData d;
  d.c = c;
  const int requests = static_cast<int>(c.kv_lens.size());
  const int hd = c.head_dim;
  d.kv_lens = c.kv_lens;
  d.max_kv_len = *std::max_element(c.kv_lens.begin(), c.kv_lens.end());
  // One mapped page past the longest context, so that every request has a mapped
  // page beyond its kv_len (NaN-filled below).
  d.max_pages = static_cast<int>((d.max_kv_len + c.page_size - 1) / c.page_size) + 1;
  d.pages = requests * d.max_pages + 2;
  std::vector<int32_t> ids(static_cast<size_t>(d.pages));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), gen.engine());
  d.block_tables.assign(static_cast<size_t>(requests) * d.max_pages, -1);
  const int64_t slot_elems = static_cast<int64_t>(c.kv_heads) * 2 * hd;
  d.cache = gen.bf16s(static_cast<size_t>(d.pages) * c.page_size * slot_elems, -2.0f, 2.0f);
  const bf16 nan = to_bf16(std::numeric_limits<float>::quiet_NaN());
  int next = 0;
  for (int r = 0; r < requests; ++r) {
    const int64_t kv_len = c.kv_lens[static_cast<size_t>(r)];
    // The lowest window start of the request's queries: pages wholly below it stay
    // unmapped.
    const int64_t first_pos = kv_len - std::min<int64_t>(c.block, kv_len);
    const int64_t lo = ops::attention_range(first_pos, kv_len, c.window, c.causal).lo;
    const int mapped_end = static_cast<int>((kv_len + c.page_size - 1) / c.page_size) + 1;
    for (int i = 0; i < d.max_pages; ++i) {
      const bool below = static_cast<int64_t>(i + 1) * c.page_size <= lo;
      if (below || i >= mapped_end) continue;
      const int32_t page = ids[static_cast<size_t>(next++)];
      d.block_tables[static_cast<size_t>(r) * d.max_pages + i] = page;
      for (int o = 0; o < c.page_size; ++o)
        if (static_cast<int64_t>(i) * c.page_size + o >= kv_len)
          std::fill_n(d.cache.begin() + (static_cast<int64_t>(page) * c.page_size + o) * slot_elems,
                      slot_elems, nan);
    }
  }
  for (int r = 0; r < requests; ++r) {
    const int64_t kv_len = c.kv_lens[static_cast<size_t>(r)];
    const int64_t n = std::min<int64_t>(c.block, kv_len);
    for (int64_t j = 0; j < n; ++j) {
      d.token_request.push_back(r);
      d.positions.push_back(kv_len - n + j);
    }
    if (r < c.padding_tokens) {
      d.token_request.push_back(-1);
      d.positions.push_back(0);
    }
  }
  for (int extra = requests; extra < c.padding_tokens; ++extra) {
    d.token_request.push_back(-1);
    d.positions.push_back(0);
  }
  d.tokens = static_cast<int>(d.token_request.size());
  d.q_stride = static_cast<int64_t>(c.heads + 2 * c.kv_heads) * hd;  // packed QKV rows
  d.q = gen.bf16s(static_cast<size_t>(d.tokens) * d.q_stride, -2.0f, 2.0f);
  if (c.special_q && d.tokens >= 2 && c.heads >= 2) {
    d.q[static_cast<size_t>(0 * d.q_stride + 1 * hd + hd / 2)] = nan;
    d.q[static_cast<size_t>(1 * d.q_stride + 0 * hd + 1)] =
        to_bf16(std::numeric_limits<float>::infinity());
  }
  return d;
}

// The definition, one (token, head) at a time: returns [tokens, heads * head_dim].
inline std::vector<bf16> reference_attention(const AttentionData& d) {
  const AttentionCase& c = d.c;
  const int hd = c.head_dim, group = c.heads / c.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::vector<bf16> out(d.out_size(), bf16{0});
  auto slot_of = [&](int r, int64_t pos) -> int64_t {  // -1: unmapped
    const int32_t page = d.block_tables[static_cast<size_t>(r) * d.max_pages + pos / c.page_size];
    return page < 0 ? -1 : static_cast<int64_t>(page) * c.page_size + pos % c.page_size;
  };
  auto maxf = [](float a, float b) {
    if (std::isnan(a)) return b;
    if (std::isnan(b)) return a;
    return a > b ? a : b;
  };
  for (int t = 0; t < d.tokens; ++t) {
    const int r = d.token_request[static_cast<size_t>(t)];
    if (r < 0) continue;
    const int64_t pos = d.positions[static_cast<size_t>(t)];
    const int64_t kv_len = d.kv_lens[static_cast<size_t>(r)];
    const int64_t lo = c.window > 0 ? std::max<int64_t>(0, pos - c.window + 1) : 0;
    const int64_t hi = c.causal ? std::min(pos + 1, kv_len) : kv_len;
    for (int h = 0; h < c.heads; ++h) {
      const int kvh = h / group;
      const bf16* qh = &d.q[static_cast<size_t>(t * d.q_stride + static_cast<int64_t>(h) * hd)];
      float M = -INFINITY, L = 0.0f;
      std::vector<float> O(static_cast<size_t>(hd), 0.0f);
      bool first = true;
      for (int64_t ch = lo / 64; ch * 64 < hi; ++ch) {
        float s[64], p[64];
        bool live[64];
        bf16 pb[64];
        for (int j = 0; j < 64; ++j) {
          const int64_t x = ch * 64 + j;
          live[j] = x >= lo && x < hi;
          s[j] = 0.0f;
          if (live[j]) {
            const int64_t slot = slot_of(r, x);
            const bf16* k = &d.cache[static_cast<size_t>((slot * c.kv_heads + kvh) * 2 * hd)];
            s[j] = mma_chain(qh, k, hd) * scale;
          }
        }
        // chunk max: u_l = max(x_l, x_{l+32}), then the butterfly.
        float u[64];
        for (int j = 0; j < 64; ++j) u[j] = live[j] ? s[j] : -INFINITY;
        for (int l = 0; l < 32; ++l) u[l] = maxf(u[l], u[l + 32]);
        for (int off = 16; off >= 1; off /= 2)
          for (int l = 0; l < off; ++l) u[l] = maxf(u[l], u[l + off]);
        const float m = u[0];
        for (int j = 0; j < 64; ++j) {
          p[j] = live[j] ? exp_f32(s[j] - m) : 0.0f;
          pb[j] = to_bf16(p[j]);
        }
        float w[64];
        std::copy(p, p + 64, w);
        for (int l = 0; l < 32; ++l) w[l] = w[l] + w[l + 32];
        for (int off = 16; off >= 1; off /= 2)
          for (int l = 0; l < off; ++l) w[l] = w[l] + w[l + off];
        const float l_c = w[0];
        // o_c[d] = chain over the 64 slots of (pb_j, v_j[d]).
        std::vector<float> oc(static_cast<size_t>(hd));
        for (int dd = 0; dd < hd; ++dd) {
          bf16 vcol[64];
          for (int j = 0; j < 64; ++j) {
            const int64_t x = ch * 64 + j;
            const int64_t slot = x < kv_len ? slot_of(r, x) : -1;
            vcol[j] =
                slot < 0
                    ? bf16{0}
                    : d.cache[static_cast<size_t>((slot * c.kv_heads + kvh) * 2 * hd + hd + dd)];
          }
          oc[static_cast<size_t>(dd)] = mma_chain(pb, vcol, 64);
        }
        const float Mn = maxf(M, m);
        const float a = first ? 0.0f : exp_f32(M - Mn);
        const float b = exp_f32(m - Mn);
        const float la = L * a, lb = l_c * b;
        L = la + lb;
        for (int dd = 0; dd < hd; ++dd) {
          const float oa = O[static_cast<size_t>(dd)] * a, ob = oc[static_cast<size_t>(dd)] * b;
          O[static_cast<size_t>(dd)] = oa + ob;
        }
        M = Mn;
        first = false;
      }
      bf16* o = &out[(static_cast<size_t>(t) * c.heads + h) * hd];
      for (int dd = 0; dd < hd; ++dd) o[dd] = to_bf16(O[static_cast<size_t>(dd)] / L);
    }
  }
  return out;
}

// The cases both the CPU and the GPU attention tests run: GQA group 1, 4, 8; head
// dims 16, 40, 64, 128; kv_len on and off the chunk grid; windows, causal and not
// (the window start inside a chunk, and pages wholly below it unmapped).
inline std::vector<AttentionCase> attention_cases() {
  std::vector<AttentionCase> out;
  out.push_back({4, 4, 16, 0, false, {1, 63, 64, 65}, 1, 16, 2, false});
  out.push_back({8, 2, 40, 0, false, {7, 130, 200}, 7, 5, 1, true});
  out.push_back({8, 1, 64, 0, true, {9, 129}, 7, 16, 0, false});
  out.push_back({4, 1, 128, 0, false, {257}, 3, 32, 1, true});
  out.push_back({8, 1, 64, 70, true, {300, 71, 64}, 7, 16, 1, false});
  out.push_back({8, 2, 64, 70, false, {300, 150}, 7, 8, 0, true});
  out.push_back({4, 4, 40, 5, true, {100, 6}, 3, 16, 0, false});
  out.push_back({16, 2, 16, 130, false, {400, 131}, 5, 16, 2, false});
  out.push_back({4, 1, 128, 1, true, {66, 3}, 2, 16, 0, false});
  return out;
}

}  // namespace sparkdraft::test
