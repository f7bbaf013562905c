// The numerics core (core/*.h) evaluated on the device against the same code on
// the host, bit for bit (contract.md section 3, equality 2): bf16 rounding, Philox,
// uniforms, draft noise and noised scores, every core/math.h function on seeded
// sweeps and special values, the warp canonical reduction, and, exhaustively,
// the Gumbel noise of every distinct u the sampling recipe can draw.
// NaN outputs compare by bits too (core/ makes them with integer operations),
// except a noised score, which divides a NaN logit (see the Philox test).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "common/bits.h"
#include "common/random.h"
#include "cuda/gpu_test_util.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/core/math.h"
#include "sparkdraft/core/philox.h"
#include "sparkdraft/core/reduce.h"
#include "sparkdraft/core/sampling.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/check.h"

namespace sparkdraft {
namespace {

using cuda::DeviceBuffer;

constexpr int kBlocks = 1024;
constexpr int kThreads = 256;

// ---- host side helpers ---------------------------------------------------------

template <class Body>
void host_parallel(int64_t n, Body body) {
  const int threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  std::vector<std::thread> pool;
  for (int t = 0; t < threads; ++t)
    pool.emplace_back([=] {
      for (int64_t i = n * t / threads; i < n * (t + 1) / threads; ++i) body(i);
    });
  for (auto& th : pool) th.join();
}

// Bit-exact comparison (tests/common/bits.h): found is the device, expected the host;
// the message names the first mismatches with their input.
template <class In>
void expect_same_bits(const char* what, const std::vector<In>& in, const std::vector<uint32_t>& dev,
                      const std::vector<uint32_t>& host) {
  ASSERT_EQ(dev.size(), host.size());
  test::BitsOptions o;
  o.report = 10;
  o.note = [&in](size_t i) {
    std::ostringstream os;
    os << "input ";
    if constexpr (std::is_same_v<In, float>)
      os << test::hex_bits(f32_bits(in[i]), 4) << " (" << in[i] << ")";
    else
      os << in[i];
    return os.str();
  };
  EXPECT_TRUE(test::same_bits(dev, host, o)) << what << " (found: device, expected: host)";
}

// ---- float -> float functions ---------------------------------------------------

struct op_round_bf16 {
  SD_HD float operator()(float x) const { return round_bf16(x); }
};
struct op_log {
  SD_HD float operator()(float x) const { return log_f32(x); }
};
struct op_log1p {
  SD_HD float operator()(float x) const { return log1p_f32(x); }
};
struct op_exp {
  SD_HD float operator()(float x) const { return exp_f32(x); }
};
struct op_tanh {
  SD_HD float operator()(float x) const { return tanh_f32(x); }
};
struct op_sigmoid {
  SD_HD float operator()(float x) const { return sigmoid_f32(x); }
};
struct op_silu {
  SD_HD float operator()(float x) const { return silu_f32(x); }
};
struct op_rsqrt {
  SD_HD float operator()(float x) const { return rsqrt_f32(x); }
};
struct op_gumbel {
  SD_HD float operator()(float u) const { return gumbel_noise(u); }
};

template <class Op>
__global__ void map_kernel(const float* in, uint32_t* out, int64_t n, Op op) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    out[i] = f32_bits(op(in[i]));
}

template <class Op>
std::vector<uint32_t> on_device(const DeviceBuffer<float>& in, Op op) {
  DeviceBuffer<uint32_t> out(in.size());
  map_kernel<<<kBlocks, kThreads>>>(in.data(), out.data(), static_cast<int64_t>(in.size()), op);
  SD_CHECK_LAUNCH();
  return out.download();
}

template <class Op>
std::vector<uint32_t> on_host(const std::vector<float>& in, Op op) {
  std::vector<uint32_t> out(in.size());
  host_parallel(static_cast<int64_t>(in.size()), [&](int64_t i) { out[i] = f32_bits(op(in[i])); });
  return out;
}

template <class Op>
void check_map(const char* what, const std::vector<float>& in, Op op) {
  DeviceBuffer<float> d_in(in);
  expect_same_bits(what, in, on_device(d_in, op), on_host(in, op));
}

// Special values of every function: zeros, infinities, NaNs with payloads,
// subnormals, the extremes, and each function's thresholds from both sides.
std::vector<float> special_values() {
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> v = {0.0f,
                          -0.0f,
                          inf,
                          -inf,
                          1.0f,
                          -1.0f,
                          2.0f,
                          0.5f,
                          bits_f32(0x7fc00000u),
                          bits_f32(0xffc00000u),
                          bits_f32(0x7f800001u),
                          bits_f32(0xff812345u),
                          bits_f32(0x7fffffffu),
                          bits_f32(0x00000001u),
                          bits_f32(0x80000001u),
                          bits_f32(0x007fffffu),
                          bits_f32(0x00800000u),
                          std::numeric_limits<float>::max(),
                          -std::numeric_limits<float>::max(),
                          88.72283f,
                          88.72284f,
                          89.0f,
                          -103.972f,
                          -103.973f,
                          -104.0f,
                          -105.0f,
                          9.1f,
                          -9.1f,
                          0.0625f,
                          -0.0625f,
                          40.0f,
                          -40.0f,
                          -120.0f,
                          1e-20f,
                          -1e-20f,
                          kUniformScale,
                          -kUniformScale,
                          0x1.fffffep-1f,
                          -0x1.fffffep-1f};
  const size_t base = v.size();
  for (size_t i = 0; i < base; ++i) {  // and the floats next to each
    if (v[i] != v[i] || v[i] == inf || v[i] == -inf) continue;
    v.push_back(bits_f32(f32_bits(v[i]) + 1));
    if (f32_bits(v[i]) & 0x7fffffffu) v.push_back(bits_f32(f32_bits(v[i]) - 1));
  }
  return v;
}

// Seeded sweep: random bit patterns (every exponent, NaNs included), uniform
// values in the function's working range, and the special values.
std::vector<float> sweep_inputs(uint64_t seed, float lo, float hi) {
  test::Gen gen(seed);
  std::mt19937_64& rng = gen.engine();
  std::vector<float> v;
  v.reserve((1u << 24) + (1u << 22) + 200);
  for (int i = 0; i < (1 << 24); ++i) v.push_back(bits_f32(static_cast<uint32_t>(rng())));
  std::uniform_real_distribution<float> dist(lo, hi);
  for (int i = 0; i < (1 << 22); ++i) v.push_back(dist(rng));
  const std::vector<float> sp = special_values();
  v.insert(v.end(), sp.begin(), sp.end());
  return v;
}

TEST(CoreDevice, Bf16Rounding) {
  SD_REQUIRE_GPU();
  std::vector<float> in;
  // Every upper half with the low halves that decide the rounding: exact, tiny,
  // just below the tie, the tie, just above it, the top.
  const uint32_t lows[] = {0x0000u, 0x0001u, 0x7fffu, 0x8000u, 0x8001u, 0xffffu};
  for (uint32_t h = 0; h < 0x10000u; ++h)
    for (uint32_t l : lows) in.push_back(bits_f32((h << 16) | l));
  test::Gen gen(31);
  std::mt19937_64& rng = gen.engine();
  for (int i = 0; i < (1 << 24); ++i) in.push_back(bits_f32(static_cast<uint32_t>(rng())));
  check_map("round_bf16", in, op_round_bf16{});
}

// to_bf16 on the device (the hardware conversion and its NaN fix) against the rule
// (to_bf16_rne, integer arithmetic) on every one of the 2^32 float bit patterns.
__global__ void bf16_exhaustive_kernel(unsigned long long* mismatches, unsigned int* first_bad) {
  unsigned long long bad = 0;
  const uint64_t stride = static_cast<uint64_t>(gridDim.x) * blockDim.x;
  for (uint64_t i = static_cast<uint64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < (uint64_t{1} << 32); i += stride) {
    const uint32_t u = static_cast<uint32_t>(i);
    if (to_bf16(bits_f32(u)).bits != to_bf16_rne(bits_f32(u)).bits) {
      ++bad;
      atomicMin(first_bad, u);
    }
  }
  if (bad != 0) atomicAdd(mismatches, bad);
}

TEST(CoreDevice, Bf16HardwareConversionEqualsTheRuleOnEveryFloat) {
  SD_REQUIRE_GPU();
  DeviceBuffer<unsigned long long> bad(std::vector<unsigned long long>{0});
  DeviceBuffer<unsigned int> first(std::vector<unsigned int>{0xffffffffu});
  bf16_exhaustive_kernel<<<132 * 16, 256>>>(bad.data(), first.data());
  SD_CHECK_LAUNCH();
  const unsigned long long n = bad.download()[0];
  const uint32_t u = first.download()[0];
  EXPECT_EQ(n, 0u) << n << " float patterns convert differently, the lowest 0x" << std::hex << u
                   << " (the rule gives 0x" << to_bf16_rne(bits_f32(u)).bits << ")";
}

TEST(CoreDevice, MathFunctions) {
  SD_REQUIRE_GPU();
  SCOPED_TRACE("seeds 101..107");
  check_map("log_f32", sweep_inputs(101, 0.0f, 20.0f), op_log{});
  check_map("log1p_f32", sweep_inputs(102, -1.0f, 1.0f), op_log1p{});
  check_map("exp_f32", sweep_inputs(103, -110.0f, 95.0f), op_exp{});
  check_map("tanh_f32", sweep_inputs(104, -10.0f, 10.0f), op_tanh{});
  check_map("sigmoid_f32", sweep_inputs(105, -110.0f, 45.0f), op_sigmoid{});
  check_map("silu_f32", sweep_inputs(106, -125.0f, 45.0f), op_silu{});
  check_map("rsqrt_f32", sweep_inputs(107, 0.0f, 100.0f), op_rsqrt{});
}

// Every distinct u of philox_uniform (float(x) for x in [0, 2^31), scaled and
// clamped: 75,497,473 values): log1p_f32(-u) and the Gumbel noise.
TEST(CoreDevice, ExhaustiveSamplingNoise) {
  SD_REQUIRE_GPU();
  const int64_t n = (int64_t{1} << 24) + 1 + 7 * (int64_t{1} << 23);
  std::vector<float> u(n), neg_u(n);
  host_parallel(n, [&](int64_t i) {
    const float v =
        i <= (int64_t{1} << 24)
            ? static_cast<float>(i)
            : bits_f32(f32_bits(16777216.0f) + static_cast<uint32_t>(i - (int64_t{1} << 24)));
    const float s = v * kUniformScale;
    u[i] = s < kUniformScale ? kUniformScale : s;
    neg_u[i] = -u[i];
  });
  ASSERT_EQ(f32_bits(u[n - 1]), 0x3f7fffffu);  // the largest u, 1 - 2^-24
  {
    DeviceBuffer<float> d(neg_u);
    expect_same_bits("log1p_f32(-u)", neg_u, on_device(d, op_log1p{}), on_host(neg_u, op_log1p{}));
  }
  DeviceBuffer<float> d(u);
  expect_same_bits("gumbel_noise(u)", u, on_device(d, op_gumbel{}), on_host(u, op_gumbel{}));
}

// ---- Philox, uniforms, draft noise, noised scores --------------------------------

struct philox_case {
  int64_t seed, off;  // randint(seed, off); also draft_step_seed(seed, off, step)
  int step;
  int64_t vocab_id;
  float logit, temperature;
};

constexpr int kPhiloxOutputs = 6;

SD_HD void philox_outputs(const philox_case& c, uint32_t* out) {
  const uint32_t r = philox_randint(c.seed, c.off);
  const uint32_t gs = draft_step_seed(c.seed, c.off, c.step);
  out[0] = r;
  out[1] = gs;
  out[2] = f32_bits(philox_uniform(r, c.vocab_id));
  out[3] = f32_bits(draft_noise(gs, c.vocab_id));
  out[4] = f32_bits(noised_score(c.logit, c.temperature, gs, c.vocab_id));
  out[5] =
      philox4x32_10(r, gs, static_cast<uint32_t>(c.vocab_id), 7u, static_cast<uint32_t>(c.seed), 3u)
          .c3;
}

__global__ void philox_kernel(const philox_case* cases, uint32_t* out, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    philox_outputs(cases[i], out + i * kPhiloxOutputs);
}

TEST(CoreDevice, PhiloxUniformNoiseAndScores) {
  SD_REQUIRE_GPU();
  const uint64_t seed = 2718;
  test::Gen gen(seed);  // names the seed in any failure
  std::mt19937_64& rng = gen.engine();
  std::uniform_real_distribution<float> logit(-30.0f, 30.0f);
  const float temps[] = {0.0f, 1.0f, 0.7f, 1e-3f, 3.5f};
  const float inf = std::numeric_limits<float>::infinity();
  const float odd_logits[] = {inf,  -inf,  std::numeric_limits<float>::quiet_NaN(),
                              0.0f, -0.0f, std::numeric_limits<float>::max()};
  std::vector<philox_case> cases(1 << 20);
  for (size_t i = 0; i < cases.size(); ++i) {
    auto& c = cases[i];
    c.seed = static_cast<int64_t>(rng());
    if (i % 4 == 1) c.seed = static_cast<int64_t>(rng() % 100000) - 50000;  // small, negative
    c.off = static_cast<int64_t>(rng() >> (i % 3 == 0 ? 2 : 33));  // a + j + 2^30 must not overflow
    c.step = static_cast<int>(rng() % 16);
    c.vocab_id = static_cast<int64_t>(rng() % 262144);
    c.logit = i % 97 == 0 ? odd_logits[(i / 97) % 6] : round_bf16(logit(rng));
    c.temperature = temps[i % 5];
  }
  cases[0] = {0, 0, 0, 0, 1.0f, 1.0f};  // contract.md section 4's first vector
  DeviceBuffer<philox_case> d_cases(cases);
  DeviceBuffer<uint32_t> d_out(cases.size() * kPhiloxOutputs);
  philox_kernel<<<kBlocks, kThreads>>>(d_cases.data(), d_out.data(),
                                       static_cast<int64_t>(cases.size()));
  SD_CHECK_LAUNCH();
  const std::vector<uint32_t> dev = d_out.download();
  std::vector<uint32_t> host(dev.size());
  host_parallel(static_cast<int64_t>(cases.size()),
                [&](int64_t i) { philox_outputs(cases[i], host.data() + i * kPhiloxOutputs); });
  EXPECT_EQ(dev[0], 1713891541u);
  const char* names[kPhiloxOutputs] = {"randint",     "draft_step_seed", "philox_uniform",
                                       "draft_noise", "noised_score",    "philox4x32_10 word 3"};
  // noised_score of a NaN logit at T > 0 is NaN on both sides, but fp32 division
  // gives the GPU's canonical NaN and keeps the payload on x86: compare NaN-ness
  // there (the sampling rule only asks "is it NaN").
  auto canon = [](int k, uint32_t b) {
    return k == 4 && (b & 0x7fffffffu) > 0x7f800000u ? 0x7fc00000u : b;
  };
  for (int k = 0; k < kPhiloxOutputs; ++k) {
    std::vector<uint32_t> dk(cases.size()), hk(cases.size());
    std::vector<int64_t> idx(cases.size());
    for (size_t i = 0; i < cases.size(); ++i) {
      dk[i] = canon(k, dev[i * kPhiloxOutputs + k]);
      hk[i] = canon(k, host[i * kPhiloxOutputs + k]);
      idx[i] = static_cast<int64_t>(i);
    }
    expect_same_bits(names[k], idx, dk, hk);
  }
}

// ---- warp canonical reduction ------------------------------------------------------

struct reduce_row {
  int64_t offset;
  int n;
};

// One warp per row: lane partials in the canonical order, then the xor butterfly;
// every lane writes what it holds (all 32 must agree).
__global__ void warp_reduce_kernel(const float* x, const float* y, const reduce_row* rows,
                                   int num_rows, uint32_t* out) {
  const int warp =
      static_cast<int>((blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x) / 32);
  const int lane = static_cast<int>(threadIdx.x % 32);
  if (warp >= num_rows) return;  // whole warps exit together (blockDim is a multiple of 32)
  const reduce_row r = rows[warp];
  const float partial = canonical_lane_partial(lane, r.n, [&](int i, float& a, float& b) {
    a = x[r.offset + i];
    b = y[r.offset + i];
  });
  out[static_cast<int64_t>(warp) * 32 + lane] = f32_bits(warp_canonical_combine(partial));
}

TEST(CoreDevice, WarpCanonicalReduction) {
  SD_REQUIRE_GPU();
  const uint64_t seed = 4242;
  test::Gen gen(seed);  // names the seed in any failure
  std::mt19937_64& rng = gen.engine();
  const int fixed[] = {1, 7, 8, 9, 31, 64, 255, 256, 257, 512, 4096, 8193};
  std::vector<reduce_row> rows;
  int64_t total = 0;
  for (int rep = 0; rep < 4; ++rep)
    for (int n : fixed) {
      rows.push_back({total, n});
      total += n;
    }
  for (int i = 0; i < 2000; ++i) {
    const int n = 1 + static_cast<int>(rng() % 3000);
    rows.push_back({total, n});
    total += n;
  }
  std::uniform_real_distribution<float> mant(-1.0f, 1.0f);
  std::vector<float> x(total), y(total);
  for (int64_t i = 0; i < total; ++i) {
    x[i] = round_bf16(std::ldexp(mant(rng), static_cast<int>(rng() % 20) - 10));
    y[i] = i % 3 == 0 ? x[i] : std::ldexp(mant(rng), static_cast<int>(rng() % 20) - 10);
  }
  DeviceBuffer<float> dx(x), dy(y);
  DeviceBuffer<reduce_row> drows(rows);
  const int num_rows = static_cast<int>(rows.size());
  DeviceBuffer<uint32_t> dout(static_cast<size_t>(num_rows) * 32);
  warp_reduce_kernel<<<(num_rows * 32 + kThreads - 1) / kThreads, kThreads>>>(
      dx.data(), dy.data(), drows.data(), num_rows, dout.data());
  SD_CHECK_LAUNCH();
  const std::vector<uint32_t> dev = dout.download();
  std::vector<uint32_t> dev_lane0(rows.size()), host(rows.size());
  std::vector<int64_t> ns(rows.size());
  for (size_t r = 0; r < rows.size(); ++r) {
    const reduce_row row = rows[r];
    host[r] = f32_bits(canonical_sum(row.n, [&](int i, float& a, float& b) {
      a = x[row.offset + i];
      b = y[row.offset + i];
    }));
    dev_lane0[r] = dev[r * 32];
    ns[r] = row.n;
    for (int l = 1; l < 32; ++l)
      ASSERT_EQ(dev[r * 32 + l], dev[r * 32]) << "row " << r << " (n " << row.n << ") lane " << l;
  }
  expect_same_bits("warp canonical sum (input = n)", ns, dev_lane0, host);
}

}  // namespace
}  // namespace sparkdraft
