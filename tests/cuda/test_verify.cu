// The verifier on the GPU (issue 22; cuda/verify/verify.h) against the CPU
// reference (src/cpu/verify.cpp), bit for bit on num_accepted and every output
// token: every row count (1, odd, max_reqs), every block size the launcher can
// pick and several vocabulary splits (with and without the sums' exp table; the resident form at
// several slice widths and counts of requests in flight), NaN / +inf / all -inf
// / tied rows, padding rows (left untouched), T 0 / 0.05 / 0.7 / 1 / 2, top-k and top-p, bf16 and
// fp32 target logits, both methods; a graph replay equals the eager call; the comparison catches a
// decision flipped by one corrupted logit; CudaDraft's host and device entry points equal the CPU
// reference.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "common/random.h"
#include "cuda/common/graph.h"
#include "cuda/gpu_test_util.h"
#include "cuda/verify/select.h"
#include "cuda/verify/verify.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/cpu/verify.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/draft.h"
#include "sparkdraft/error.h"
#include "sparkdraft/scenario.h"

namespace sparkdraft {
namespace {

constexpr int64_t kUnwritten = -7;  // what padding rows must keep
constexpr int32_t kUnwrittenK = -3;

// One verify call's host inputs.
struct Case {
  int rows = 0, n = 0, vocab = 0, cache_rows = 0;
  LogitsDType dtype = LogitsDType::bf16;
  VerifyMethod method = VerifyMethod::standard;
  int64_t accept_salt = kVerifyAcceptSalt, draw_salt = kVerifyDrawSalt;
  std::vector<int64_t> tokens, anchors, seeds, slots;
  std::vector<float> temps, top_p;
  std::vector<int32_t> top_k;
  std::vector<int32_t> lengths;  // [rows] n_r, or empty (N)
  std::vector<bf16> cache;
  std::vector<bf16> target_bf16;
  std::vector<float> target_f32;

  const void* target() const {
    return dtype == LogitsDType::f32 ? static_cast<const void*>(target_f32.data())
                                     : static_cast<const void*>(target_bf16.data());
  }
  size_t target_bytes() const {
    return dtype == LogitsDType::f32 ? target_f32.size() * sizeof(float)
                                     : target_bf16.size() * sizeof(bf16);
  }
  float target_at(int r, int j, int v) const {
    const size_t i = (static_cast<size_t>(r) * (n + 1) + j) * vocab + v;
    return dtype == LogitsDType::f32 ? target_f32[i] : to_f32(target_bf16[i]);
  }
  void set_target(int r, int j, int v, float x) {
    const size_t i = (static_cast<size_t>(r) * (n + 1) + j) * vocab + v;
    if (dtype == LogitsDType::f32)
      target_f32[i] = x;
    else
      target_bf16[i] = to_bf16(x);
  }
  // The greedy pick of the target at (r, j) (section 4's rule).
  int64_t target_pick(int r, int j) const {
    int64_t best = 0;
    for (int v = 1; v < vocab; ++v)
      if (better(target_at(r, j, v), v, target_at(r, j, static_cast<int>(best)), best)) best = v;
    return best;
  }
};

struct Result {
  std::vector<int32_t> k;
  std::vector<int64_t> tokens;
};

const float kTemps[] = {0.0f, 0.05f, 0.7f, 1.0f, 2.0f};

// Seeded inputs: the draft's cache near the target (acceptance happens) or its
// negation (rejections), special rows (NaN, +inf, every value -inf, all tied),
// padding rows, a temperature, top-k and top-p per row.
Case make_case(test::Gen& g, int rows, int n, int vocab, LogitsDType dtype, VerifyMethod method,
               bool truncation) {
  Case c;
  c.rows = rows;
  c.n = n;
  c.vocab = vocab;
  c.cache_rows = rows + 2;
  c.dtype = dtype;
  c.method = method;
  const size_t tn = static_cast<size_t>(rows) * (n + 1) * vocab;
  if (dtype == LogitsDType::f32)
    c.target_f32 = g.floats(tn, -6.0f, 6.0f);
  else
    c.target_bf16 = g.bf16s(tn, -6.0f, 6.0f);
  c.cache = g.bf16s(static_cast<size_t>(c.cache_rows) * n * vocab, -6.0f, 6.0f);
  // Slots: a shuffled subset of the cache rows; every fifth row (from row 2) padding.
  std::vector<int64_t> free_slots(c.cache_rows);
  for (int i = 0; i < c.cache_rows; ++i) free_slots[i] = i;
  std::shuffle(free_slots.begin(), free_slots.end(), g.engine());
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int r = 0; r < rows; ++r) {
    const bool pad = rows > 2 && r % 5 == 2;
    c.slots.push_back(pad ? -1 : free_slots[r]);
    c.anchors.push_back(100 + 13 * r);
    c.seeds.push_back(static_cast<int64_t>(g.bits() >> 1));
    c.temps.push_back(kTemps[(r + g.integer(0, 4)) % 5]);
    const int32_t ks[] = {0, 1, 5, vocab - 1, vocab + 3, 50};
    const float ps[] = {1.0f, 0.9f, 0.5f, 0.01f, 0.999f, 1.0f};
    c.top_k.push_back(truncation ? ks[g.integer(0, 5)] : 0);
    c.top_p.push_back(truncation ? ps[g.integer(0, 5)] : 1.0f);
    const int64_t slot = pad ? free_slots[r] : c.slots.back();
    const int kind = static_cast<int>(g.integer(0, 9));
    for (int j = 0; j < n; ++j) {
      bf16* row = c.cache.data() + (static_cast<size_t>(slot) * n + j) * vocab;
      for (int v = 0; v < vocab; ++v) {
        const float t = c.target_at(r, j, v);
        // Near the target (kind < 6), its negation (kind 6, 7), unrelated otherwise.
        if (kind < 6) row[v] = to_bf16(t + g.uniform(-0.5f, 0.5f));
        if (kind == 6 || kind == 7) row[v] = to_bf16(-t);
      }
    }
    // Special rows (each at one position j).
    const int j = static_cast<int>(g.integer(0, n));
    switch (r % 7) {
      case 1:  // NaNs in the target
        c.set_target(r, j, static_cast<int>(g.integer(0, vocab - 1)), nan);
        c.set_target(r, j, static_cast<int>(g.integer(0, vocab - 1)), nan);
        break;
      case 3:  // +inf in the target
        c.set_target(r, j, static_cast<int>(g.integer(0, vocab - 1)), inf);
        break;
      case 4:  // every value -inf
        for (int v = 0; v < vocab; ++v) c.set_target(r, j, v, -inf);
        break;
      case 5:  // all tied
        for (int v = 0; v < vocab; ++v) c.set_target(r, j, v, 1.5f);
        break;
      case 6:  // NaN in the draft's cache row
        if (j < n)
          c.cache[(static_cast<size_t>(slot) * n + j) * vocab + g.integer(0, vocab - 1)] =
              to_bf16(nan);
        break;
      default: break;
    }
    // Draft tokens: the target's pick (accepted at T 0), the cache's greedy pick, or random.
    for (int jj = 0; jj < n; ++jj) {
      const int how = static_cast<int>(g.integer(0, 2));
      int64_t x = g.integer(0, vocab - 1);
      if (how == 0) x = c.target_pick(r, jj);
      if (how == 1) {
        const bf16* row = c.cache.data() + (static_cast<size_t>(slot) * n + jj) * vocab;
        int64_t best = 0;
        for (int v = 1; v < vocab; ++v)
          if (better(to_f32(row[v]), v, to_f32(row[best]), best)) best = v;
        x = best;
      }
      c.tokens.push_back(x);
    }
  }
  return c;
}

ops::VerifyParams params_of(const Case& c) {
  ops::VerifyParams p;
  p.rows = c.rows;
  p.n = c.n;
  p.vocab = c.vocab;
  p.cache_rows = c.cache_rows;
  p.target_dtype = c.dtype;
  p.method = c.method;
  p.accept_salt = c.accept_salt;
  p.draw_salt = c.draw_salt;
  return p;
}

Result cpu_verify(const Case& c) {
  Result res{std::vector<int32_t>(c.rows, kUnwrittenK),
             std::vector<int64_t>(static_cast<size_t>(c.rows) * (c.n + 1), kUnwritten)};
  ops::VerifyParams p = params_of(c);
  p.draft_tokens = c.tokens.data();
  p.anchor_positions = c.anchors.data();
  p.seeds = c.seeds.data();
  p.temperatures = c.temps.data();
  p.top_k = c.top_k.data();
  p.top_p = c.top_p.data();
  p.lengths = c.lengths.empty() ? nullptr : c.lengths.data();
  p.cache_slots = c.slots.data();
  p.draft_logits = c.cache.data();
  p.target_logits = c.target();
  p.num_accepted = res.k.data();
  p.tokens = res.tokens.data();
  cpu::verify(p, 0, 4);
  return res;
}

// The case on the device, and the outputs.
struct DeviceCase {
  explicit DeviceCase(const Case& c)
      : tokens(c.tokens),
        anchors(c.anchors),
        seeds(c.seeds),
        slots(c.slots),
        temps(c.temps),
        top_p(c.top_p),
        top_k(c.top_k),
        lengths(c.lengths.empty() ? std::vector<int32_t>{0} : c.lengths),
        cache(c.cache),
        target(c.target_bytes()),
        k(c.rows),
        out(static_cast<size_t>(c.rows) * (c.n + 1)) {
    target.upload(static_cast<const unsigned char*>(c.target()), c.target_bytes());
    p = params_of(c);
    p.draft_tokens = tokens.data();
    p.anchor_positions = anchors.data();
    p.seeds = seeds.data();
    p.temperatures = temps.data();
    p.top_k = top_k.data();
    p.top_p = top_p.data();
    p.lengths = c.lengths.empty() ? nullptr : lengths.data();
    p.cache_slots = slots.data();
    p.draft_logits = cache.data();
    p.target_logits = target.data();
    p.num_accepted = k.data();
    p.tokens = out.data();
  }
  void reset_outputs(const Case& c) {
    k.upload(std::vector<int32_t>(c.rows, kUnwrittenK));
    out.upload(std::vector<int64_t>(static_cast<size_t>(c.rows) * (c.n + 1), kUnwritten));
  }
  Result result() const { return {k.download(), out.download()}; }

  cuda::DeviceBuffer<int64_t> tokens, anchors, seeds, slots;
  cuda::DeviceBuffer<float> temps, top_p;
  cuda::DeviceBuffer<int32_t> top_k, lengths;
  cuda::DeviceBuffer<bf16> cache;
  cuda::DeviceBuffer<unsigned char> target;
  cuda::DeviceBuffer<int32_t> k;
  cuda::DeviceBuffer<int64_t> out;
  ops::VerifyParams p;
};

// "" when equal, else where and what.
std::string difference(const Case& c, const Result& want, const Result& got) {
  for (int r = 0; r < c.rows; ++r) {
    std::ostringstream os;
    os << "row " << r << " (T " << c.temps[r] << ", top_k " << c.top_k[r] << ", top_p "
       << c.top_p[r] << ", slot " << c.slots[r] << "): ";
    if (want.k[r] != got.k[r]) {
      os << "num_accepted cpu " << want.k[r] << ", gpu " << got.k[r];
      return os.str();
    }
    for (int i = 0; i <= c.n; ++i) {
      const size_t at = static_cast<size_t>(r) * (c.n + 1) + i;
      if (want.tokens[at] != got.tokens[at]) {
        os << "token " << i << " cpu " << want.tokens[at] << ", gpu " << got.tokens[at];
        return os.str();
      }
    }
  }
  return "";
}

Result gpu_verify(const Case& c, DeviceCase& d, cuda::VerifyWorkspace& ws,
                  const cuda::VerifyShape* shape) {
  d.reset_outputs(c);
  cuda::verify(d.p, ws, nullptr, shape);
  SD_CUDA_CHECK(cudaDeviceSynchronize());
  return d.result();
}

// Every block size with several slice widths (the launcher's pick, one slice,
// narrow, odd and the most slices the workspace holds) against the CPU, in both forms
// of the vocabulary passes: rows (list_capacity 0), lists with room for every list,
// and lists of one pair (every longer list left unwritten: those slices' sums read the
// logits).
void check_every_shape(const Case& c, int max_rows) {
  const Result want = cpu_verify(c);
  int accepted = 0, padding = 0;
  for (int r = 0; r < c.rows; ++r) {
    if (c.slots[r] < 0)
      ++padding;
    else
      accepted += want.k[r];
  }
  std::printf("  rows %d, V %d, %s, %s: %d drafts accepted, %d padding rows\n", c.rows, c.vocab,
              to_string(c.dtype), to_string(c.method), accepted, padding);
  DeviceCase d(c);
  cuda::VerifyWorkspace ws(max_rows, c.n, c.vocab);
  const int most = (c.vocab + cuda::kVerifyMaxSlices - 1) / cuda::kVerifyMaxSlices;
  // The launcher's staged cut (where it picks the resident form, the rows form's).
  cuda::VerifyShape staged = ws.pick(c.rows);
  if (staged.resident_rows > 0) staged = ws.pick(c.rows, cuda::VerifyForm::rows);
  std::vector<int> slices = {staged.slice, c.vocab, 1021, most};
  if (c.vocab <= 4096) slices.push_back(std::max(most, 97));
  // The draw's own cut: the pick's, one slice, odd, and the most it may take.
  const int most_draw = (c.vocab + cuda::kVerifyMaxDrawSlices - 1) / cuda::kVerifyMaxDrawSlices;
  const std::vector<int> draw_slices = {staged.draw_slice, c.vocab, 333, most_draw};
  for (int threads : cuda::kVerifyThreadChoices)
    for (int slice : slices)
      for (int draw_slice : draw_slices) {
        const int S = (c.vocab + slice - 1) / slice;
        std::vector<int> capacities = {0};
        if (slice <= cuda::kVerifyMaxListSlice)
          capacities.insert(capacities.end(), {static_cast<int>(ws.list_region() / S), 1});
        for (int capacity : capacities) {
          const cuda::VerifyShape shape{threads, slice, draw_slice, capacity};
          const std::string diff = difference(c, want, gpu_verify(c, d, ws, &shape));
          ASSERT_EQ(diff, "") << "threads " << threads << ", slice " << slice << ", draw slice "
                              << draw_slice << ", list capacity " << capacity;
        }
      }
  // The resident form: every block size; the pick's cut, one CTA a request, an odd cut,
  // a narrow one and the most CTAs a request the workspace holds; one request in flight
  // (a CTA takes several rows in turn), two, and as many as can be resident.
  const int most_resident = (c.vocab + ws.max_resident_slices() - 1) / ws.max_resident_slices();
  const std::vector<int> resident_slices = {
      ws.pick(c.rows, cuda::VerifyForm::resident, c.dtype).slice, c.vocab, 1021, 97, most_resident};
  int resident_runs = 0;
  for (int threads : cuda::kVerifyThreadChoices)
    for (int slice : resident_slices) {
      const int G = (c.vocab + slice - 1) / slice;
      const int per_sm = cuda::detail::resident_occupancy(
          threads, cuda::detail::resident_smem_bytes(c.n, slice, c.dtype));
      ASSERT_GT(per_sm, 0) << "threads " << threads << ", slice " << slice;
      const int fit = per_sm * ws.sm_count() / G;
      for (int in_flight : std::set<int>{1, 2, std::min(fit, c.rows)}) {
        if (in_flight > fit) continue;
        cuda::VerifyShape shape{threads, slice};
        shape.resident_rows = in_flight;
        const std::string diff = difference(c, want, gpu_verify(c, d, ws, &shape));
        ASSERT_EQ(diff, "") << "resident form: threads " << threads << ", slice " << slice << " ("
                            << G << " CTAs a request), " << in_flight << " requests in flight";
        ++resident_runs;
      }
    }
  EXPECT_GT(resident_runs, 0);
}

TEST(CudaVerify, EqualsCpuAtEveryRowCountBlockSizeAndSplit) {
  SD_REQUIRE_GPU();
  for (LogitsDType dtype : {LogitsDType::bf16, LogitsDType::f32})
    for (VerifyMethod method : {VerifyMethod::standard, VerifyMethod::block})
      for (int rows : {1, 7, 32})
        for (bool truncation : {false, true}) {
          test::Gen g(1000 + rows * 10 + (truncation ? 1 : 0) +
                      (dtype == LogitsDType::f32 ? 100 : 0) +
                      (method == VerifyMethod::block ? 200 : 0));
          SCOPED_TRACE(std::string(to_string(dtype)) + " " + to_string(method) + " rows " +
                       std::to_string(rows) + (truncation ? " top-k/top-p" : ""));
          const Case c = make_case(g, rows, 7, 1237, dtype, method, truncation);
          check_every_shape(c, 32);
          if (HasFatalFailure()) return;
        }
}

TEST(CudaVerify, EqualsCpuAtOneDraftToken) {
  SD_REQUIRE_GPU();
  for (VerifyMethod method : {VerifyMethod::standard, VerifyMethod::block}) {
    test::Gen g(77);
    const Case c = make_case(g, 9, 1, 333, LogitsDType::bf16, method, true);
    check_every_shape(c, 9);
    if (HasFatalFailure()) return;
  }
}

// The branches the kernels take only on rare inputs, each checked against the CPU
// and shown to be taken (the CPU result that proves the case is what it says):
// raw logits that the division by a small T sends to +inf (the first id is the
// lowest scaled +inf, not the raw maximum) or to -inf (the first id is 0), on the
// target and on the draft; and a residual with no mass (the cache row equals the
// target row, the draft token has p = q = 0), where the target's own draw decides.
TEST(CudaVerify, EqualsCpuOnTheRareBranches) {
  SD_REQUIRE_GPU();
  const uint64_t seed = 2718;
  std::printf("  seed %llu\n", static_cast<unsigned long long>(seed));
  test::Gen g(seed);
  const int V = 1000;
  Case c = make_case(g, 5, 3, V, LogitsDType::bf16, VerifyMethod::standard, false);
  ASSERT_EQ(c.slots[2], -1);  // row 2 is padding
  const float inf = std::numeric_limits<float>::infinity();
  for (int r : {0, 1, 3, 4}) {
    c.top_k[r] = 0;
    c.top_p[r] = 1.0f;
    for (int j = 0; j <= c.n; ++j)
      for (int v = 0; v < V; ++v) c.set_target(r, j, v, g.uniform(-6.0f, 6.0f));
  }
  auto cache_row = [&](int r, int j) {
    return c.cache.data() + (static_cast<size_t>(c.slots[r]) * c.n + j) * V;
  };
  // Row 0: target ids 3 and 10 overflow at T 0.05; the raw maximum is id 10, the law
  // a point mass at id 3. Draft token 10: p = 0, rejected, the residual emits 3.
  c.temps[0] = 0.05f;
  c.set_target(0, 0, 3, 2.0e38f);
  c.set_target(0, 0, 10, 3.0e38f);
  c.tokens[0] = 10;
  // Row 1: every target logit at j 0 goes to -inf at T 0.05 (the raw maximum id 7):
  // a point mass at id 0; draft token 7 is rejected and 0 emitted.
  c.temps[1] = 0.05f;
  for (int v = 0; v < V; ++v) c.set_target(1, 0, v, v == 7 ? -1.0e38f : -3.0e38f);
  c.tokens[1 * c.n] = 7;
  // Row 3: the cache row equals the target row, the draft token's logit -inf on both:
  // p = q = 0 there, rejected, and no residual mass anywhere.
  c.temps[3] = 1.0f;
  const int64_t x3 = 123;
  c.set_target(3, 0, static_cast<int>(x3), -inf);
  for (int v = 0; v < V; ++v) cache_row(3, 0)[v] = to_bf16(c.target_at(3, 0, v));
  c.tokens[3 * c.n] = x3;
  // Row 4: draft ids 2 and 5 overflow at T 0.05 (raw maximum id 5, the law a point
  // mass at 2); draft token 5: q = 0.
  c.temps[4] = 0.05f;
  cache_row(4, 0)[2] = to_bf16(2.0e38f);
  cache_row(4, 0)[5] = to_bf16(3.0e38f);
  c.tokens[4 * c.n] = 5;

  const Result want = cpu_verify(c);
  const size_t W = static_cast<size_t>(c.n) + 1;
  EXPECT_EQ(want.k[0], 0);
  EXPECT_EQ(want.tokens[0 * W], 3) << "the target law at row 0 is a point mass at id 3";
  EXPECT_EQ(want.k[1], 0);
  EXPECT_EQ(want.tokens[1 * W], 0) << "the target law at row 1 is a point mass at id 0";
  EXPECT_EQ(want.k[3], 0);
  EXPECT_NE(want.tokens[3 * W], x3) << "row 3 emits the target's own draw";
  std::printf("  row 4: k %d, tokens[0] %lld\n", want.k[4],
              static_cast<long long>(want.tokens[4 * W]));
  DeviceCase d(c);
  cuda::VerifyWorkspace ws(5, c.n, V);
  for (int threads : cuda::kVerifyThreadChoices) {
    const cuda::VerifyShape shape{threads, 256, 128};
    ASSERT_EQ(difference(c, want, gpu_verify(c, d, ws, &shape)), "") << "threads " << threads;
    cuda::VerifyShape resident{threads, 256};  // 4 CTAs a request, every row in flight
    resident.resident_rows = c.rows;
    ASSERT_EQ(difference(c, want, gpu_verify(c, d, ws, &resident)), "")
        << "resident form, threads " << threads;
  }
  EXPECT_EQ(difference(c, want, gpu_verify(c, d, ws, nullptr)), "");
}

struct ExpLaw {
  SD_HD float operator()(float x) const { return exp_law(x); }
};
struct LogLaw {
  SD_HD float operator()(float x) const { return log_law(x); }
};

template <class F>
__global__ void map_kernel(const float* x, float* y, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = F{}(x[i]);
}

// F on the device equals F on the host on every input of x, bit for bit.
template <class F>
void expect_device_equals_host(const char* name, const std::vector<float>& x) {
  const int n = static_cast<int>(x.size());
  cuda::DeviceBuffer<float> dx(x, nullptr), dy(x.size());
  map_kernel<F><<<(n + 255) / 256, 256>>>(dx.data(), dy.data(), n);
  SD_CUDA_CHECK(cudaGetLastError());
  SD_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<float> y = dy.download(nullptr);
  for (int i = 0; i < n; ++i)
    ASSERT_EQ(f32_bits(y[i]), f32_bits(F{}(x[i])))
        << name << "(" << x[i] << "): device " << y[i] << ", host " << F{}(x[i]);
  std::printf("  %s: %d inputs, device == host\n", name, n);
}

// The device is the authority: exp_law on the GPU (its __fmaf_rn and _rn operations)
// equals the host's (std::fmaf, -ffp-contract=off) on every 7th float of [-88, 0],
// and -inf; log_law on every 5th float of [2^-33, 1] (the verifier's uniforms).
TEST(CudaVerify, ExpLawAndLogLawOnTheDeviceEqualTheHost) {
  SD_REQUIRE_GPU();
  std::vector<float> d;
  for (uint64_t b = f32_bits(-0.0f); b <= f32_bits(-88.0f); b += 7)
    d.push_back(bits_f32(static_cast<uint32_t>(b)));
  d.push_back(-87.0f);
  d.push_back(-std::numeric_limits<float>::infinity());
  expect_device_equals_host<ExpLaw>("exp_law", d);
  std::vector<float> u;
  for (uint32_t b = f32_bits(0x1p-33f); b <= f32_bits(1.0f); b += 5) u.push_back(bits_f32(b));
  expect_device_equals_host<LogLaw>("log_law", u);
}

// Per-request lengths (contract.md 8.5): rows of every length 0 .. N (a length beyond
// N on the device clamps to N), both methods, every block size and split.
TEST(CudaVerify, EqualsCpuWithPerRowLengths) {
  SD_REQUIRE_GPU();
  for (VerifyMethod method : {VerifyMethod::standard, VerifyMethod::block}) {
    test::Gen g(6060 + (method == VerifyMethod::block ? 1 : 0));
    Case c = make_case(g, 19, 7, 1237, LogitsDType::bf16, method, true);
    for (int r = 0; r < c.rows; ++r) c.lengths.push_back(r % (c.n + 1));
    const Result want = cpu_verify(c);
    int short_all_accepted = 0;
    for (int r = 0; r < c.rows; ++r) {
      if (c.slots[r] < 0) continue;
      ASSERT_LE(want.k[r], c.lengths[r]) << "row " << r;
      if (c.lengths[r] < c.n && want.k[r] == c.lengths[r]) ++short_all_accepted;
    }
    std::printf("  %s: %d short rows accepted all their drafts (the bonus at n_r)\n",
                to_string(method), short_all_accepted);
    check_every_shape(c, 19);
    if (HasFatalFailure()) return;
  }
}

// The streams' salts reach the kernels (the broken verifier of the statistics
// tests sets the accept salt to the draft's): the GPU follows the CPU there too,
// and the outputs change with the salts.
TEST(CudaVerify, EqualsCpuWithOtherStreamSalts) {
  SD_REQUIRE_GPU();
  test::Gen g(4321);
  Case c = make_case(g, 16, 7, 777, LogitsDType::bf16, VerifyMethod::standard, false);
  for (float& t : c.temps) t = 1.0f;
  const Result ours = cpu_verify(c);
  c.accept_salt = kDraftNoiseSalt;
  c.draw_salt = 12345;
  const Result want = cpu_verify(c);
  EXPECT_NE(difference(c, ours, want), "") << "the salts changed nothing";
  DeviceCase d(c);
  cuda::VerifyWorkspace ws(16, c.n, c.vocab);
  EXPECT_EQ(difference(c, want, gpu_verify(c, d, ws, nullptr)), "");
  const cuda::VerifyShape resident = ws.pick(c.rows, cuda::VerifyForm::resident);
  EXPECT_EQ(difference(c, want, gpu_verify(c, d, ws, &resident)), "") << "resident form";
}

// T = 1 everywhere (the passes' path without the division) over logits spread so wide
// that the sums' terms take every road: E = 1 at tied maxima, d between -45 and -87
// (zero terms by exp_law), d below -87 and -inf (the clamp); bf16 and fp32 targets,
// both methods, with and without top-k / top-p, at 1, 8 and 32 rows, odd vocabularies.
TEST(CudaVerify, EqualsCpuAtUnitTemperatureOverWideLogits) {
  SD_REQUIRE_GPU();
  for (LogitsDType dtype : {LogitsDType::bf16, LogitsDType::f32})
    for (VerifyMethod method : {VerifyMethod::standard, VerifyMethod::block})
      for (int rows : {1, 8, 32})
        for (bool truncation : {false, true}) {
          const uint64_t seed = 5000 + rows * 10 + (truncation ? 1 : 0) +
                                (dtype == LogitsDType::f32 ? 100 : 0) +
                                (method == VerifyMethod::block ? 200 : 0);
          std::printf("  seed %llu\n", static_cast<unsigned long long>(seed));
          test::Gen g(seed);
          const int V = rows == 32 ? 1237 : 4099;
          Case c = make_case(g, rows, 7, V, dtype, method, truncation);
          const float inf = std::numeric_limits<float>::infinity();
          for (int r = 0; r < rows; ++r) {
            c.temps[r] = 1.0f;
            const float spread = r % 3 == 0 ? 30.0f : (r % 3 == 1 ? 4.0f : 1.0f);
            for (int j = 0; j <= c.n; ++j)
              for (int v = 0; v < V; ++v) {
                const float x = c.target_at(r, j, v);
                if (x == x && x != inf && x != -inf) c.set_target(r, j, v, x * spread);
                if (c.slots[r] >= 0 && j < c.n) {  // the cache row spread alike
                  bf16& q = c.cache[(static_cast<size_t>(c.slots[r]) * c.n + j) * V + v];
                  const float y = to_f32(q);
                  if (y == y && y != inf && y != -inf) q = to_bf16(y * spread);
                }
              }
            // Ties at the maximum and a few -inf ids on the target and the cache.
            const int j = r % (c.n + 1);
            float top = -inf;
            for (int v = 0; v < V; ++v) top = std::max(top, c.target_at(r, j, v));
            if (top == top && top != inf && top != -inf) {
              c.set_target(r, j, 11 % V, top);
              c.set_target(r, j, 29 % V, top);
            }
            c.set_target(r, j, 5 % V, -inf);
            if (c.slots[r] >= 0 && j < c.n)
              c.cache[(static_cast<size_t>(c.slots[r]) * c.n + j) * V + 7 % V] = to_bf16(-inf);
          }
          SCOPED_TRACE(std::string(to_string(dtype)) + " " + to_string(method) + " rows " +
                       std::to_string(rows) + (truncation ? " top-k/top-p" : ""));
          check_every_shape(c, 32);
          if (HasFatalFailure()) return;
        }
}

__global__ void law_term_kernel(const float* d, uint64_t* lo, uint32_t* one, U128* sum, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) {
    const verify_select::LawTerm t = verify_select::law_term_of_diff(d[i]);
    lo[i] = t.lo;
    one[i] = t.one;
  }
  if (i == 0) {  // one thread's 96-bit partial over every 16th input (carries, E = 1)
    verify_select::TermSum acc;
    for (int k = 0; k < n; k += 16) acc.add(verify_select::law_term_of_diff(d[k]));
    *sum = acc.wide();
  }
}

// The sums pass's term and partial on the device equal the host's (the device's
// clamped 64-bit shift and carry chain): every 97th float of [-inf, 0], -inf, both
// zeros, and every float near the clamp (-87) and the zero terms' edge (-45).
TEST(CudaVerify, LawTermOnTheDeviceEqualsTheHost) {
  SD_REQUIRE_GPU();
  std::vector<float> d;
  for (uint64_t b = f32_bits(-0.0f); b <= 0xff800000u; b += 97)
    d.push_back(bits_f32(static_cast<uint32_t>(b)));
  d.push_back(-std::numeric_limits<float>::infinity());
  d.push_back(0.0f);
  for (float edge : {-87.0f, -45.0f})
    for (int k = -3000; k <= 3000; ++k)
      d.push_back(bits_f32(static_cast<uint32_t>(static_cast<int64_t>(f32_bits(edge)) + k)));
  const int n = static_cast<int>(d.size());
  cuda::DeviceBuffer<float> dd(d, nullptr);
  cuda::DeviceBuffer<uint64_t> lo(d.size());
  cuda::DeviceBuffer<uint32_t> one(d.size());
  cuda::DeviceBuffer<U128> sum(1);
  law_term_kernel<<<(n + 255) / 256, 256>>>(dd.data(), lo.data(), one.data(), sum.data(), n);
  SD_CUDA_CHECK(cudaGetLastError());
  SD_CUDA_CHECK(cudaDeviceSynchronize());
  const std::vector<uint64_t> glo = lo.download(nullptr);
  const std::vector<uint32_t> gone = one.download(nullptr);
  U128 want;
  for (int i = 0; i < n; ++i) {
    const U128 t = law_term(d[i], 0.0f);
    ASSERT_TRUE(glo[i] == t.lo && gone[i] == t.hi) << "s - M = " << d[i];
    if (i % 16 == 0) want = u128_add(want, t);
  }
  const U128 got = sum.download(nullptr)[0];
  EXPECT_TRUE(got.lo == want.lo && got.hi == want.hi) << "the device's 96-bit partial";
  std::printf("  %d terms, device == host\n", n);
}

// The bench's vocabulary: the launcher's shapes over 152k ids.
TEST(CudaVerify, EqualsCpuAtAFullVocabulary) {
  SD_REQUIRE_GPU();
  for (LogitsDType dtype : {LogitsDType::bf16, LogitsDType::f32}) {
    test::Gen g(4242);
    const Case c = make_case(g, 3, 7, 151936, dtype, VerifyMethod::standard, true);
    const Result want = cpu_verify(c);
    DeviceCase d(c);
    cuda::VerifyWorkspace ws(8, c.n, c.vocab);
    for (cuda::VerifyForm form :
         {cuda::VerifyForm::rows, cuda::VerifyForm::lists, cuda::VerifyForm::resident})
      for (int threads : cuda::kVerifyThreadChoices) {
        cuda::VerifyShape shape = ws.pick(c.rows, form, c.dtype);
        shape.threads = threads;
        ASSERT_EQ(difference(c, want, gpu_verify(c, d, ws, &shape)), "")
            << "threads " << threads << ", list capacity " << shape.list_capacity
            << ", resident rows " << shape.resident_rows;
      }
    ASSERT_EQ(difference(c, want, gpu_verify(c, d, ws, nullptr)), "");
  }
}

// The resident form at the bench's vocabularies and row counts: the pick's shape (each
// CTA holding 2N + 1 slices of a few thousand ids) and one request in flight (every
// group takes its rows in turn), bf16 and fp32 targets, both methods, with top-k /
// top-p, against the CPU.
TEST(CudaVerify, ResidentFormEqualsCpuAtFullVocabularies) {
  SD_REQUIRE_GPU();
  for (int V : {151936, 202048})
    for (LogitsDType dtype : {LogitsDType::bf16, LogitsDType::f32})
      for (VerifyMethod method : {VerifyMethod::standard, VerifyMethod::block}) {
        const uint64_t seed = 7100 + (V == 202048 ? 10 : 0) + (dtype == LogitsDType::f32 ? 1 : 0) +
                              (method == VerifyMethod::block ? 2 : 0);
        std::printf("  seed %llu\n", static_cast<unsigned long long>(seed));
        test::Gen g(seed);
        const Case c = make_case(g, 9, 7, V, dtype, method, true);
        const Result want = cpu_verify(c);
        DeviceCase d(c);
        cuda::VerifyWorkspace ws(c.rows, c.n, c.vocab);
        cuda::VerifyShape shape = ws.pick(c.rows, cuda::VerifyForm::resident, dtype);
        for (int in_flight : {shape.resident_rows, 1}) {
          shape.resident_rows = in_flight;
          ASSERT_EQ(difference(c, want, gpu_verify(c, d, ws, &shape)), "")
              << "V " << V << ", " << to_string(dtype) << ", " << to_string(method) << ", slice "
              << shape.slice << ", " << in_flight << " requests in flight";
        }
      }
}

// The resident pick's shapes can run: at most the workspace's CTAs a request, every CTA
// resident at once (the occupancy calculator), slices of whole 16-byte bf16 pieces, the
// rows' rounds as few as fit.
TEST(CudaVerify, ResidentPickFitsTheGpu) {
  SD_REQUIRE_GPU();
  for (int V : {1237, 151936, 202048})
    for (LogitsDType dtype : {LogitsDType::bf16, LogitsDType::f32})
      for (int rows : {1, 8, 32, 256}) {
        cuda::VerifyWorkspace ws(rows, 7, V);
        const cuda::VerifyShape shape = ws.pick(rows, cuda::VerifyForm::resident, dtype);
        const int G = (V + shape.slice - 1) / shape.slice;
        const int per_sm = cuda::detail::resident_occupancy(
            shape.threads, cuda::detail::resident_smem_bytes(7, shape.slice, dtype));
        std::printf(
            "  V %d, %s, %d rows: %d threads, slice %d (%d CTAs a request), %d in "
            "flight, %d CTAs an SM\n",
            V, to_string(dtype), rows, shape.threads, shape.slice, G, shape.resident_rows, per_sm);
        EXPECT_EQ(shape.slice % 8, 0);
        EXPECT_LE(G, ws.max_resident_slices());
        EXPECT_GE(shape.resident_rows, 1);
        EXPECT_LE(shape.resident_rows, rows);
        EXPECT_LE(static_cast<int64_t>(shape.resident_rows) * G,
                  static_cast<int64_t>(per_sm) * ws.sm_count());
        if (rows == 1) EXPECT_LE(G, ws.sm_count()) << "one request: one CTA an SM at most";
      }
}

// The automatic pick: the resident form for one request of standard verification (one
// launch; faster there, gpu-log 2026-12-05d run 3), the staged forms for block
// verification and from two requests; each of those choices equals the CPU.
TEST(CudaVerify, AutomaticPickTakesTheResidentFormForOneRequest) {
  SD_REQUIRE_GPU();
  for (VerifyMethod method : {VerifyMethod::standard, VerifyMethod::block})
    for (int rows : {1, 2}) {
      test::Gen g(2024 + rows);
      const Case c = make_case(g, rows, 7, 20011, LogitsDType::bf16, method, true);
      cuda::VerifyWorkspace ws(rows, c.n, c.vocab);
      const cuda::VerifyShape shape =
          ws.pick(rows, cuda::VerifyForm::automatic, LogitsDType::bf16, method);
      const bool resident =
          rows <= cuda::kVerifyResidentUpToRows && method == VerifyMethod::standard;
      EXPECT_EQ(shape.resident_rows > 0, resident)
          << to_string(method) << ", " << rows << " rows: resident rows " << shape.resident_rows;
      DeviceCase d(c);
      EXPECT_EQ(difference(c, cpu_verify(c), gpu_verify(c, d, ws, nullptr)), "")
          << to_string(method) << ", " << rows << " rows";
    }
}

// The lists form's histogram, seen from outside: after a call, each (row, position,
// side, slice) of a bf16 law with T > 0 holds as many pairs as its slice has distinct
// finite bf16 patterns (the CPU counts them), and the pairs' counts add up to the
// slice's finite ids. Rows with ties (a few patterns), wide spreads, NaN / inf ids.
TEST(CudaVerify, ListsFormCountsEveryPatternOfItsSlice) {
  SD_REQUIRE_GPU();
  const uint64_t seed = 8080;
  std::printf("  seed %llu\n", static_cast<unsigned long long>(seed));
  test::Gen g(seed);
  const int V = 20011, N = 3, rows = 5;
  Case c = make_case(g, rows, N, V, LogitsDType::bf16, VerifyMethod::standard, false);
  for (int r = 0; r < rows; ++r) c.temps[r] = r == 1 ? 0.7f : 1.0f;
  // Row 0, position 0: four patterns only (ties everywhere).
  for (int v = 0; v < V; ++v) c.set_target(0, 0, v, static_cast<float>(v % 4));
  DeviceCase d(c);
  cuda::VerifyWorkspace ws(rows, N, V);
  const cuda::VerifyShape shape = ws.pick(rows, cuda::VerifyForm::lists);
  ASSERT_GT(shape.list_capacity, 0);
  ASSERT_EQ(difference(c, cpu_verify(c), gpu_verify(c, d, ws, &shape)), "");
  const int S = (V + shape.slice - 1) / shape.slice;
  const std::vector<uint32_t> lengths = ws.list_lengths.download();
  const std::vector<uint32_t> lists = ws.lists.download();
  int checked = 0;
  for (int r = 0; r < rows; ++r) {
    if (c.slots[r] < 0 || !(c.temps[r] > 0.0f)) continue;
    for (int j = 0; j <= N; ++j)
      for (int side = 0; side < (j < N ? 2 : 1); ++side)
        for (int s = 0; s < S; ++s) {
          std::set<uint16_t> patterns;
          size_t finite = 0;
          for (int v = s * shape.slice; v < std::min(V, (s + 1) * shape.slice); ++v) {
            const uint16_t b =
                side == 0 ? to_bf16(c.target_at(r, j, v)).bits
                          : c.cache[(static_cast<size_t>(c.slots[r]) * N + j) * V + v].bits;
            if ((b & 0x7f80u) == 0x7f80u) continue;
            patterns.insert(b);
            ++finite;
          }
          const size_t list = (static_cast<size_t>(r * (N + 1) + j) * 2 + side) * S + s;
          ASSERT_EQ(lengths[list], patterns.size())
              << "row " << r << " position " << j << " side " << side << " slice " << s;
          if (lengths[list] > static_cast<uint32_t>(shape.list_capacity)) continue;
          size_t counted = 0;
          std::set<uint16_t> listed;
          for (uint32_t i = 0; i < lengths[list]; ++i) {
            const uint32_t pair = lists[list * shape.list_capacity + i];
            listed.insert(static_cast<uint16_t>(pair >> 16));
            counted += pair & 0xffffu;
          }
          ASSERT_EQ(listed, patterns) << "row " << r << " position " << j << " slice " << s;
          ASSERT_EQ(counted, finite) << "row " << r << " position " << j << " slice " << s;
          ++checked;
        }
  }
  std::printf("  %d slice lists checked against the CPU's patterns\n", checked);
  EXPECT_GT(checked, 0);
}

TEST(CudaVerify, GraphReplayEqualsEager) {
  SD_REQUIRE_GPU();
  for (VerifyMethod method : {VerifyMethod::standard, VerifyMethod::block}) {
    test::Gen g(31337);
    const Case c = make_case(g, 11, 7, 2048, LogitsDType::bf16, method, true);
    DeviceCase d(c);
    cuda::VerifyWorkspace ws(16, c.n, c.vocab);
    const Result eager = gpu_verify(c, d, ws, nullptr);
    ASSERT_EQ(difference(c, cpu_verify(c), eager), "");
    cuda::DeviceStream stream;
    d.reset_outputs(c);
    const cuda::GraphExec graph(stream.get(),
                                [&](cudaStream_t s) { cuda::verify(d.p, ws, s, nullptr); });
    for (int i = 0; i < 3; ++i) graph.launch(stream.get());
    stream.synchronize();
    EXPECT_EQ(difference(c, eager, d.result()), "");
    // The resident form (a cooperative kernel node; its arrival counters back at 0
    // after each replay).
    const cuda::VerifyShape resident = ws.pick(c.rows, cuda::VerifyForm::resident);
    d.reset_outputs(c);
    const cuda::GraphExec resident_graph(
        stream.get(), [&](cudaStream_t s) { cuda::verify(d.p, ws, s, &resident); });
    for (int i = 0; i < 3; ++i) resident_graph.launch(stream.get());
    stream.synchronize();
    EXPECT_EQ(difference(c, eager, d.result()), "") << "the resident form in a graph";
  }
}

// The comparison can fail: one corrupted target logit (a new maximum at position 0
// of a greedy row whose first draft was the target's pick) flips that decision; the
// GPU on the corrupted input differs from the CPU on the original, and equals the
// CPU on the corrupted input.
TEST(CudaVerify, ACorruptedLogitFlipsADecisionAndTheComparisonSeesIt) {
  SD_REQUIRE_GPU();
  test::Gen g(99);
  Case c = make_case(g, 4, 7, 1000, LogitsDType::bf16, VerifyMethod::standard, false);
  c.temps[0] = 0.0f;
  c.tokens[0] = c.target_pick(0, 0);
  const Result original = cpu_verify(c);
  ASSERT_GE(original.k[0], 1);
  const int other = static_cast<int>((c.tokens[0] + 1) % c.vocab);
  c.set_target(0, 0, other, 100.0f);
  DeviceCase d(c);
  cuda::VerifyWorkspace ws(4, c.n, c.vocab);
  const Result corrupted = gpu_verify(c, d, ws, nullptr);
  EXPECT_EQ(corrupted.k[0], 0);
  EXPECT_EQ(corrupted.tokens[0], other);
  const std::string diff = difference(c, original, corrupted);
  EXPECT_NE(diff, "");
  std::printf("  the comparison reports: %s\n", diff.c_str());
  EXPECT_EQ(difference(c, cpu_verify(c), corrupted), "");
}

TEST(CudaVerify, RefusesShapesTheLauncherCannotRun) {
  SD_REQUIRE_GPU();
  test::Gen g(5);
  const Case c = make_case(g, 3, 7, 1000, LogitsDType::bf16, VerifyMethod::standard, false);
  DeviceCase d(c);
  cuda::VerifyWorkspace ws(2, c.n, c.vocab);
  EXPECT_THROW(cuda::verify(d.p, ws, nullptr), InvalidArgument);  // 3 rows > 2
  cuda::VerifyWorkspace ws3(3, c.n, c.vocab);
  const cuda::VerifyShape odd{100, 256, 256}, narrow{256, 10, 256}, narrow_draw{256, 256, 3};
  EXPECT_THROW(cuda::verify(d.p, ws3, nullptr, &odd), InvalidArgument);
  EXPECT_THROW(cuda::verify(d.p, ws3, nullptr, &narrow), InvalidArgument);       // 100 slices
  EXPECT_THROW(cuda::verify(d.p, ws3, nullptr, &narrow_draw), InvalidArgument);  // 334 > 256
  const cuda::VerifyShape negative_lists{256, 256, 256, -1};
  const cuda::VerifyShape too_many_pairs{256, 256, 256,
                                         static_cast<int>(ws3.list_region() / 4 + 1)};  // 4 slices
  EXPECT_THROW(cuda::verify(d.p, ws3, nullptr, &negative_lists), InvalidArgument);
  EXPECT_THROW(cuda::verify(d.p, ws3, nullptr, &too_many_pairs), InvalidArgument);
  const cuda::VerifyShape odd_draw{256, 256, 256, 0, 100};
  EXPECT_THROW(cuda::verify(d.p, ws3, nullptr, &odd_draw), InvalidArgument);
  const cuda::VerifyShape wide_slice{256, 70000, 1024, 64};  // more than 65535 ids a slice
  EXPECT_THROW(cuda::verify(d.p, ws3, nullptr, &wide_slice), InvalidArgument);
  cuda::VerifyWorkspace other_n(3, 5, c.vocab);
  EXPECT_THROW(cuda::verify(d.p, other_n, nullptr), InvalidArgument);
  // The resident form: more CTAs than can be resident, more CTAs a request than the
  // workspace holds (slice 1: 1000), lists, a negative count; and a pick for a request
  // larger than the GPU's shared memory.
  cuda::VerifyShape resident = ws3.pick(c.rows, cuda::VerifyForm::resident);
  cuda::VerifyShape crowded = resident, narrow_resident = resident, listed = resident,
                    negative = resident;
  crowded.resident_rows = 1000000;
  narrow_resident.slice = 1;
  listed.list_capacity = 1;
  negative.resident_rows = -1;
  EXPECT_THROW(cuda::verify(d.p, ws3, nullptr, &crowded), InvalidArgument);
  EXPECT_THROW(cuda::verify(d.p, ws3, nullptr, &narrow_resident), InvalidArgument);
  EXPECT_THROW(cuda::verify(d.p, ws3, nullptr, &listed), InvalidArgument);
  EXPECT_THROW(cuda::verify(d.p, ws3, nullptr, &negative), InvalidArgument);
  cuda::VerifyWorkspace wide(1, 64, 151936);
  EXPECT_THROW(wide.pick(1, cuda::VerifyForm::resident, LogitsDType::f32), InvalidArgument)
      << "one request of N 64, V 151936 in fp32 needs 59 MB; the GPU's shared memory is "
         "about 30 MB";
}

std::shared_ptr<const Checkpoint> tiny_checkpoint() {
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() / "sparkdraft-gpu-test-verify-tiny";
  if (!std::filesystem::exists(dir / "config.json")) {
    SyntheticOptions so;
    so.seed = 5;
    write_synthetic_checkpoint(preset_config("tiny", "qwen3"), dir.string(), so);
  }
  return std::make_shared<const Checkpoint>(Checkpoint::load(dir.string()));
}

// CudaDraft::verify (host buffers) and verify_device (device pointers, a stream)
// equal the CPU reference (DraftBackend::verify's own definition).
TEST(CudaVerify, CudaDraftHostAndDeviceEntryPointsEqualTheCpuReference) {
  SD_REQUIRE_GPU();
  auto ckpt = tiny_checkpoint();
  const ModelConfig& mc = ckpt->config();
  DraftOptions o;
  o.max_reqs = 5;
  o.cache_slots = 7;
  o.threads = 2;
  cuda::CudaDraft draft(ckpt, o);
  test::Gen g(2026);
  Case c =
      make_case(g, 5, mc.block_size, mc.vocab_size, LogitsDType::f32, VerifyMethod::block, true);
  ASSERT_EQ(c.cache_rows, o.cache_slots);  // rows + 2
  VerifyBatch b;
  b.num_rows = c.rows;
  b.draft_tokens = c.tokens.data();
  b.anchor_positions = c.anchors.data();
  b.seeds = c.seeds.data();
  b.temperatures = c.temps.data();
  b.top_k = c.top_k.data();
  b.top_p = c.top_p.data();
  b.cache_slots = c.slots.data();
  b.draft_logits = c.cache.data();
  b.target_logits = c.target();
  b.target_dtype = c.dtype;
  b.method = c.method;
  Result want{std::vector<int32_t>(c.rows, kUnwrittenK),
              std::vector<int64_t>(static_cast<size_t>(c.rows) * (c.n + 1), kUnwritten)};
  Result got = want;
  draft.DraftBackend::verify(b, VerifyOutputs{want.k.data(), want.tokens.data()});
  draft.verify(b, VerifyOutputs{got.k.data(), got.tokens.data()});
  EXPECT_EQ(difference(c, want, got), "");

  DeviceCase d(c);
  d.reset_outputs(c);
  VerifyBatch db = b;
  db.draft_tokens = d.tokens.data();
  db.anchor_positions = d.anchors.data();
  db.seeds = d.seeds.data();
  db.temperatures = d.temps.data();
  db.top_k = d.top_k.data();
  db.top_p = d.top_p.data();
  db.cache_slots = d.slots.data();
  db.draft_logits = d.cache.data();
  db.target_logits = d.target.data();
  cuda::DeviceStream stream;
  draft.verify_device(db, VerifyOutputs{d.k.data(), d.out.data()}, stream.get());
  stream.synchronize();
  EXPECT_EQ(difference(c, want, d.result()), "");

  // The boundary refuses what validate_verify refuses (a draft token out of range).
  c.tokens[0] = mc.vocab_size;
  EXPECT_THROW(draft.verify(b, VerifyOutputs{got.k.data(), got.tokens.data()}), InvalidArgument);
}

// The multi-round scenario with the real verifier (draft, verify, continue from the
// accepted drafts and the emitted token): the GPU backend (propose and verify on the
// GPU) gives the CPU backend's tokens, accepted counts and emitted tokens, round
// after round, also with padding rows in the batch.
TEST(CudaVerify, ScenarioWithTheRealVerifierEqualsTheCpuBackend) {
  SD_REQUIRE_GPU();
  auto ckpt = tiny_checkpoint();
  ScenarioOptions s;
  s.request_ids = {0, 1, 2, 3, 4};
  s.rounds = 4;
  s.seed = 9;
  s.real_verifier = true;
  s.target_noise = 0.3f;
  s.padding_before = {0, 3};
  DraftOptions o = scenario_draft_options(ckpt->config(), s);
  o.threads = 2;
  auto cpu_backend = make_cpu_backend(ckpt, o);
  cuda::CudaDraft gpu(ckpt, o);
  const std::vector<ScenarioRound> want = run_scenario(*cpu_backend, s);
  const std::vector<ScenarioRound> got = run_scenario(gpu, s);
  ASSERT_EQ(want.size(), got.size());
  int accepted = 0;
  for (size_t round = 0; round < want.size(); ++round) {
    ASSERT_EQ(want[round].drafts.size(), got[round].drafts.size());
    for (size_t i = 0; i < want[round].drafts.size(); ++i) {
      const RequestDraft &a = want[round].drafts[i], &b = got[round].drafts[i];
      const std::string where =
          "round " + std::to_string(round) + ", request " + std::to_string(a.request_id);
      ASSERT_EQ(a.request_id, b.request_id) << where;
      EXPECT_EQ(a.tokens, b.tokens) << where;
      EXPECT_EQ(a.accepted, b.accepted) << where;
      EXPECT_EQ(a.emitted, b.emitted) << where;
      accepted += a.accepted;
    }
  }
  EXPECT_GT(accepted, 0) << "no draft accepted: the accept path was not exercised";
}

}  // namespace
}  // namespace sparkdraft
