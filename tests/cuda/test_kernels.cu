// The eager CUDA kernels against the CPU reference (cpu/ops.h), contract.md section 3:
// every non-matmul kernel equals its CPU op bit for bit over seeded sweeps (odd
// sizes, 1 to 64 rows, NaN/inf/overflowing/subnormal rows, padding slots and
// tokens, both stream dtypes, every norm gain, both rope styles). Attention has its
// own file (test_attention.cu).
//
// NaN: a NaN output matches a NaN output whatever its sign and payload. The GPU's
// fp32 arithmetic returns the canonical NaN 0x7fffffff where x86 keeps an
// operand's payload or returns 0xffc00000; a rounding to bf16 makes any NaN
// 0x7fc0 (contract.md section 3). Exact copies (embed, kv_insert) compare raw bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "common/bits.h"
#include "common/query_block.h"
#include "common/random.h"
#include "cuda/gpu_test_util.h"
#include "cuda/kernels.h"
#include "sparkdraft/core/bf16.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/cuda/buffer.h"

namespace sparkdraft {
namespace {

using cuda::DeviceBuffer;
using cuda::DeviceStream;

// ---- seeded inputs -------------------------------------------------------------------

using test::Gen;  // tests/common/random.h

template <class T>
T from_float(float v);
template <>
bf16 from_float<bf16>(float v) {
  return to_bf16(v);
}
template <>
float from_float<float>(float v) {
  return v;
}

// Quiet and signaling NaNs of both signs, as the input type.
template <class T>
T nan_value(int which);
template <>
bf16 nan_value<bf16>(int which) {
  const uint16_t bits[] = {0x7fc0, 0xffc0, 0x7f81, 0xff95};
  return bf16{bits[which % 4]};
}
template <>
float nan_value<float>(int which) {
  const uint32_t bits[] = {0x7fc00000u, 0xffc00000u, 0x7f800001u, 0xff951234u};
  return bits_f32(bits[which % 4]);
}

// Row kinds a sweep cycles through (row 0 is always ordinary).
enum class RowKind { ordinary, one_nan, one_pos_inf, one_neg_inf, huge, tiny, zeros };

RowKind row_kind(int row) {
  switch (row % 8) {
    case 1: return RowKind::one_nan;
    case 2: return RowKind::one_pos_inf;
    case 3: return RowKind::one_neg_inf;
    case 4: return RowKind::huge;
    case 5: return RowKind::tiny;
    case 6: return RowKind::zeros;
    default: return RowKind::ordinary;
  }
}

// Fills n values of one row of the given kind. Ordinary rows take a random scale so
// that sums of squares cover several binades.
template <class T>
void fill_row(Gen& gen, T* row, int n, RowKind kind) {
  const float scales[] = {1e-3f, 0.25f, 1.0f, 37.0f};
  const float scale = scales[gen.integer(0, 3)];
  for (int i = 0; i < n; ++i) {
    float v = gen.uniform(-scale, scale);
    if (kind == RowKind::huge) v = (gen.integer(0, 1) ? 1.0f : -1.0f) * gen.uniform(1e37f, 3e38f);
    if (kind == RowKind::tiny) v = gen.uniform(-2e-39f, 2e-39f);  // subnormal in fp32 and bf16
    if (kind == RowKind::zeros) v = gen.integer(0, 1) ? 0.0f : -0.0f;
    row[i] = from_float<T>(v);
  }
  const int at = gen.integer(0, n - 1);
  if (kind == RowKind::one_nan) row[at] = nan_value<T>(gen.integer(0, 3));
  if (kind == RowKind::one_pos_inf) row[at] = from_float<T>(INFINITY);
  if (kind == RowKind::one_neg_inf) row[at] = from_float<T>(-INFINITY);
}

// rows x stride values: each row's first n of its kind (ordinary only if !special),
// the padding past n filled with junk that would change any sum that read it.
template <class T>
std::vector<T> make_rows(Gen& gen, int rows, int n, int64_t stride, bool special) {
  std::vector<T> v(static_cast<size_t>(rows) * stride);
  for (int r = 0; r < rows; ++r) {
    T* row = v.data() + static_cast<int64_t>(r) * stride;
    fill_row(gen, row, n, special ? row_kind(r) : RowKind::ordinary);
    for (int64_t i = n; i < stride; ++i) row[i] = from_float<T>(gen.uniform(500.0f, 900.0f));
  }
  return v;
}

// ---- comparisons --------------------------------------------------------------------

// The common comparator (tests/common/bits.h), naming row and column of a `width`-wide
// row. nan_equal: a NaN output matches any NaN output (see the top of this file).
::testing::AssertionResult bf16_bits_equal(const std::vector<bf16>& found,
                                           const std::vector<bf16>& expected, int64_t width,
                                           bool nan_equal = true) {
  return test::same_bits(found, expected, {width, nan_equal});
}

::testing::AssertionResult f32_bits_equal(const std::vector<float>& found,
                                          const std::vector<float>& expected, int64_t width) {
  return test::same_bits(found, expected, {width, true});
}

const NormGain kGains[] = {NormGain::weight, NormGain::one_plus_weight, NormGain::none};

std::vector<bf16> gain_weights(Gen& gen, int n, NormGain gain) {
  // 1 + w stays near 1 as real checkpoints do; plain weights span both signs.
  return gain == NormGain::one_plus_weight ? gen.bf16s(n, -0.9f, 0.9f) : gen.bf16s(n, -2.5f, 2.5f);
}

// ---- RMSNorm ------------------------------------------------------------------------

template <class In>
void check_rms_norm(uint64_t seed, int rows, int n, int pad, NormGain gain, bool in_place,
                    cudaStream_t stream) {
  std::ostringstream trace;
  trace << "rms_norm seed " << seed << " input " << (sizeof(In) == 4 ? "f32" : "bf16") << " rows "
        << rows << " n " << n << " pad " << pad << " gain " << to_string(gain)
        << (in_place ? " in place" : "");
  SCOPED_TRACE(trace.str());
  Gen gen(seed);
  const int64_t x_stride = n + pad;
  const int64_t y_stride = in_place ? x_stride : n + (pad + 1) % 4;
  const float eps = seed % 2 ? 1e-6f : 1e-5f;
  const std::vector<In> x = make_rows<In>(gen, rows, n, x_stride, true);
  const std::vector<bf16> w = gain_weights(gen, n, gain);
  const bf16* w_host = gain == NormGain::none ? nullptr : w.data();

  DeviceBuffer<In> dx(x, stream);
  DeviceBuffer<bf16> dw(w, stream);
  const bf16* w_dev = gain == NormGain::none ? nullptr : dw.data();
  std::vector<bf16> expected, found;
  if constexpr (std::is_same_v<In, bf16>) {
    if (in_place) {
      expected = x;
      cpu::rms_norm(ops::rms_norm_of(expected.data(), x_stride, rows, n, w_host, gain, eps,
                                     expected.data(), x_stride));
      cuda::rms_norm(
          ops::rms_norm_of(dx.data(), x_stride, rows, n, w_dev, gain, eps, dx.data(), x_stride),
          stream);
      found = dx.download(stream);
      EXPECT_TRUE(bf16_bits_equal(found, expected, x_stride));
      return;
    }
  }
  const std::vector<bf16> y0 = gen.bf16s(static_cast<size_t>(rows) * y_stride, -5.0f, 5.0f);
  expected = y0;
  cpu::rms_norm(
      ops::rms_norm_of(x.data(), x_stride, rows, n, w_host, gain, eps, expected.data(), y_stride));
  DeviceBuffer<bf16> dy(y0, stream);
  cuda::rms_norm(
      ops::rms_norm_of(dx.data(), x_stride, rows, n, w_dev, gain, eps, dy.data(), y_stride),
      stream);
  found = dy.download(stream);
  EXPECT_TRUE(bf16_bits_equal(found, expected, y_stride));
}

const int kNormSizes[] = {1, 7, 8, 9, 31, 64, 100, 128, 255, 256, 257, 1000, 4096, 5003, 16384};
const int kRowCounts[] = {1, 13, 64};

TEST(CudaRmsNorm, Bf16InputMatchesCpuBitForBit) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  uint64_t seed = 0x5D0100;
  for (int n : kNormSizes)
    for (NormGain gain : kGains)
      for (int rows : kRowCounts) {
        ++seed;
        check_rms_norm<bf16>(seed, rows, n, static_cast<int>(seed % 3) * 3, gain, false,
                             stream.get());
      }
}

TEST(CudaRmsNorm, F32InputMatchesCpuBitForBit) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  uint64_t seed = 0x5D0200;
  for (int n : kNormSizes)
    for (NormGain gain : kGains)
      for (int rows : kRowCounts) {
        ++seed;
        check_rms_norm<float>(seed, rows, n, static_cast<int>(seed % 3) * 5, gain, false,
                              stream.get());
      }
}

TEST(CudaRmsNorm, InPlaceMatchesCpuBitForBit) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  uint64_t seed = 0x5D0300;
  for (int n : {1, 33, 128, 4099})
    for (NormGain gain : kGains)
      for (int rows : {1, 9, 64})
        check_rms_norm<bf16>(++seed, rows, n, 2, gain, true, stream.get());
}

// ---- residual boundary ----------------------------------------------------------------

struct BoundaryCase {
  int rows, hidden;
  StreamDType dtype;
  bool post_norm, norm_preserving;
  NormGain gain;
};

std::string describe(const BoundaryCase& c, uint64_t seed) {
  std::ostringstream os;
  os << "residual_boundary seed " << seed << " rows " << c.rows << " H " << c.hidden << " stream "
     << to_string(c.dtype) << (c.post_norm ? " post-norm" : " no post-norm")
     << (c.norm_preserving ? " alpha/beta" : " plain") << " gain " << to_string(c.gain);
  return os.str();
}

// Host inputs of one boundary case.
struct BoundaryInputs {
  std::vector<bf16> branch, post_w, pre_w, next0;
  std::vector<float> alpha, beta, stream_f32;
  std::vector<bf16> stream_bf16;
};

BoundaryInputs make_boundary_inputs(Gen& gen, const BoundaryCase& c) {
  BoundaryInputs in;
  const size_t total = static_cast<size_t>(c.rows) * c.hidden;
  in.branch = make_rows<bf16>(gen, c.rows, c.hidden, c.hidden, true);
  in.post_w = gain_weights(gen, c.hidden, c.gain);
  in.pre_w = gain_weights(gen, c.hidden, c.gain);
  in.alpha = gen.floats(c.hidden, 0.5f, 1.5f);
  in.beta = gen.floats(c.hidden, -1.5f, 1.5f);
  // The stream's special rows fall on other rows than the branch's (rows shifted by 3).
  in.stream_f32.assign(total, 0.0f);
  for (int r = 0; r < c.rows; ++r)
    fill_row(gen, in.stream_f32.data() + static_cast<size_t>(r) * c.hidden, c.hidden,
             r == 0 ? RowKind::ordinary : row_kind(r + 3));
  in.stream_bf16.resize(total);
  for (size_t i = 0; i < total; ++i) in.stream_bf16[i] = to_bf16(in.stream_f32[i]);
  in.next0 = gen.bf16s(total, -3.0f, 3.0f);
  return in;
}

struct BoundaryOutputs {
  std::vector<bf16> next, stream_bf16;
  std::vector<float> stream_f32;
};

BoundaryOutputs run_boundary_gpu(const BoundaryCase& c, const BoundaryInputs& in, bool ones,
                                 cudaStream_t stream) {
  DeviceBuffer<bf16> branch(in.branch, stream), post_w(in.post_w, stream), pre_w(in.pre_w, stream),
      next(in.next0, stream);
  const std::vector<float> one(c.hidden, 1.0f);
  DeviceBuffer<float> alpha(ones ? one : in.alpha, stream), beta(ones ? one : in.beta, stream);
  DeviceBuffer<float> s_f32(in.stream_f32, stream);
  DeviceBuffer<bf16> s_bf16(in.stream_bf16, stream);
  ops::BoundaryParams p;
  p.rows = c.rows;
  p.hidden = c.hidden;
  p.residual_dtype = c.dtype;
  p.post_norm = c.post_norm;
  p.post_weight = c.gain == NormGain::none ? nullptr : post_w.data();
  p.pre_weight = c.gain == NormGain::none ? nullptr : pre_w.data();
  p.alpha = c.norm_preserving || ones ? alpha.data() : nullptr;
  p.beta = c.norm_preserving || ones ? beta.data() : nullptr;
  p.gain = c.gain;
  p.eps = 1e-6f;
  void* s = c.dtype == StreamDType::f32 ? static_cast<void*>(s_f32.data())
                                        : static_cast<void*>(s_bf16.data());
  cuda::residual_boundary(p, branch.data(), s, next.data(), stream);
  BoundaryOutputs out;
  out.next = next.download(stream);
  out.stream_f32 = s_f32.download(stream);
  out.stream_bf16 = s_bf16.download(stream);
  return out;
}

TEST(CudaResidualBoundary, MatchesCpuBitForBit) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  uint64_t seed = 0x5D0400;
  for (int hidden : {1, 40, 257, 1024, 4099, 16384, 30000})
    for (StreamDType dtype : {StreamDType::bf16, StreamDType::f32})
      for (bool post_norm : {false, true})
        for (bool norm_preserving : {false, true})
          for (NormGain gain : kGains) {
            ++seed;
            const BoundaryCase c{kRowCounts[seed % 3], hidden, dtype, post_norm,
                                 norm_preserving,      gain};
            SCOPED_TRACE(describe(c, seed));
            Gen gen(seed);
            const BoundaryInputs in = make_boundary_inputs(gen, c);

            ops::BoundaryParams p;
            p.rows = c.rows;
            p.hidden = c.hidden;
            p.residual_dtype = dtype;
            p.post_norm = post_norm;
            p.post_weight = gain == NormGain::none ? nullptr : in.post_w.data();
            p.pre_weight = gain == NormGain::none ? nullptr : in.pre_w.data();
            p.alpha = norm_preserving ? in.alpha.data() : nullptr;
            p.beta = norm_preserving ? in.beta.data() : nullptr;
            p.gain = gain;
            p.eps = 1e-6f;
            std::vector<bf16> next = in.next0;
            std::vector<float> s_f32 = in.stream_f32;
            std::vector<bf16> s_bf16 = in.stream_bf16;
            void* s = dtype == StreamDType::f32 ? static_cast<void*>(s_f32.data())
                                                : static_cast<void*>(s_bf16.data());
            cpu::residual_boundary(p, in.branch.data(), s, next.data());

            const BoundaryOutputs got = run_boundary_gpu(c, in, false, stream.get());
            EXPECT_TRUE(bf16_bits_equal(got.next, next, hidden)) << "next";
            if (dtype == StreamDType::f32)
              EXPECT_TRUE(f32_bits_equal(got.stream_f32, s_f32, hidden)) << "fp32 stream";
            else
              EXPECT_TRUE(bf16_bits_equal(got.stream_bf16, s_bf16, hidden)) << "bf16 stream";
          }
}

// contract.md section 3: the plain residual is alpha = beta = 1 and gives the bits of s + b.
TEST(CudaResidualBoundary, UnitAlphaBetaEqualsPlain) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  uint64_t seed = 0x5D0500;
  for (int hidden : {3, 256, 5000})
    for (StreamDType dtype : {StreamDType::bf16, StreamDType::f32})
      for (bool post_norm : {false, true}) {
        ++seed;
        const BoundaryCase c{7, hidden, dtype, post_norm, false, NormGain::weight};
        SCOPED_TRACE(describe(c, seed));
        Gen gen(seed);
        const BoundaryInputs in = make_boundary_inputs(gen, c);
        const BoundaryOutputs plain = run_boundary_gpu(c, in, false, stream.get());
        const BoundaryOutputs unit = run_boundary_gpu(c, in, true, stream.get());
        EXPECT_TRUE(bf16_bits_equal(unit.next, plain.next, hidden)) << "next";
        EXPECT_TRUE(f32_bits_equal(unit.stream_f32, plain.stream_f32, hidden)) << "fp32 stream";
        EXPECT_TRUE(bf16_bits_equal(unit.stream_bf16, plain.stream_bf16, hidden)) << "bf16 stream";
      }
}

// ---- RoPE ------------------------------------------------------------------------------

TEST(CudaRope, MatchesCpuBitForBit) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  constexpr int64_t kPositions = 4099;
  uint64_t seed = 0x5D0600;
  for (int head_dim : {2, 16, 64, 80, 128, 256})
    for (double theta : {1e4, 1e6}) {
      std::vector<float> table(static_cast<size_t>(kPositions) * head_dim);
      cpu::rope_table(theta, head_dim, kPositions, table.data());
      DeviceBuffer<float> dtable(table, stream.get());
      for (RopeStyle style : {RopeStyle::neox, RopeStyle::gptj})
        for (int heads : {1, 5, 8}) {
          ++seed;
          const int tokens = kRowCounts[seed % 3];
          const int64_t x_stride =
              static_cast<int64_t>(heads) * head_dim + (seed % 2 ? 2 * head_dim : 0);
          std::ostringstream trace;
          trace << "rope seed " << seed << " style " << to_string(style) << " theta " << theta
                << " head_dim " << head_dim << " heads " << heads << " tokens " << tokens
                << " x_stride " << x_stride;
          SCOPED_TRACE(trace.str());
          Gen gen(seed);
          std::vector<bf16> x = gen.bf16s(static_cast<size_t>(tokens) * x_stride, -4.0f, 4.0f);
          for (int t = 1; t < tokens; t += 5) {  // a NaN and an inf in some tokens
            x[t * x_stride + gen.integer(0, heads * head_dim - 1)] = nan_value<bf16>(t);
            x[t * x_stride + gen.integer(0, heads * head_dim - 1)] = to_bf16(INFINITY);
          }
          std::vector<int64_t> pos(tokens);
          for (auto& p : pos) p = gen.integer(0, kPositions - 1);
          pos[0] = kPositions - 1;
          if (tokens > 1) pos[1] = 0;

          std::vector<bf16> expected = x;
          cpu::rope(ops::rope_heads(expected.data(), x_stride, tokens, heads, head_dim, pos.data(),
                                    table.data(), style));
          DeviceBuffer<bf16> dx(x, stream.get());
          DeviceBuffer<int64_t> dpos(pos, stream.get());
          cuda::rope(ops::rope_heads(dx.data(), x_stride, tokens, heads, head_dim, dpos.data(),
                                     dtable.data(), style),
                     stream.get());
          EXPECT_TRUE(bf16_bits_equal(dx.download(stream.get()), expected, x_stride));
        }
    }
}

// ---- KV insert, embedding -------------------------------------------------------------------

TEST(CudaKvInsert, MatchesCpuBitForBitWithPaddingSlots) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  constexpr int kSlots = 160;
  uint64_t seed = 0x5D0700;
  for (int head_dim : {16, 72, 128})
    for (int kv_heads : {1, 2, 8})
      for (int tokens : {1, 9, 64}) {
        ++seed;
        const int width = kv_heads * head_dim;
        const int64_t k_stride = width + 5, v_stride = width + 11;
        std::ostringstream trace;
        trace << "kv_insert seed " << seed << " tokens " << tokens << " kv_heads " << kv_heads
              << " head_dim " << head_dim;
        SCOPED_TRACE(trace.str());
        Gen gen(seed);
        std::vector<bf16> k = gen.bf16s(static_cast<size_t>(tokens) * k_stride, -3.0f, 3.0f);
        std::vector<bf16> v = gen.bf16s(static_cast<size_t>(tokens) * v_stride, -3.0f, 3.0f);
        k[0] = nan_value<bf16>(2);  // payloads travel unchanged
        std::vector<int64_t> all(kSlots);
        std::iota(all.begin(), all.end(), 0);
        std::shuffle(all.begin(), all.end(), gen.engine());
        // Distinct slots (two tokens never share one), the last slot of the cache included.
        if (tokens > 1)
          std::swap(*std::find(all.begin(), all.end(), int64_t{kSlots - 1}), all[tokens - 1]);
        std::vector<int64_t> slots(all.begin(), all.begin() + tokens);
        for (int t = 0; t < tokens; t += 4) slots[t] = -1;
        const std::vector<bf16> cache0 =
            gen.bf16s(static_cast<size_t>(kSlots) * width * 2, -9.0f, 9.0f);

        std::vector<bf16> expected = cache0;
        cpu::kv_insert(ops::kv_insert_of(k.data(), k_stride, v.data(), v_stride, tokens, kv_heads,
                                         head_dim, slots.data(), expected.data()));
        DeviceBuffer<bf16> dk(k, stream.get()), dv(v, stream.get()), dcache(cache0, stream.get());
        DeviceBuffer<int64_t> dslots(slots, stream.get());
        cuda::kv_insert(ops::kv_insert_of(dk.data(), k_stride, dv.data(), v_stride, tokens,
                                          kv_heads, head_dim, dslots.data(), dcache.data()),
                        stream.get());
        EXPECT_TRUE(bf16_bits_equal(dcache.download(stream.get()), expected, 2 * width, false));
      }
}

TEST(CudaEmbed, MatchesCpuBitForBit) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  constexpr int kVocab = 1000;
  uint64_t seed = 0x5D0800;
  for (int hidden : {1, 33, 256, 4096})
    for (int rows : {1, 7, 64}) {
      ++seed;
      std::ostringstream trace;
      trace << "embed seed " << seed << " rows " << rows << " hidden " << hidden;
      SCOPED_TRACE(trace.str());
      Gen gen(seed);
      std::vector<bf16> table = gen.bf16s(static_cast<size_t>(kVocab) * hidden, -1.0f, 1.0f);
      table[static_cast<size_t>(kVocab - 1) * hidden] = nan_value<bf16>(3);
      std::vector<int64_t> ids(rows);
      for (auto& id : ids) id = gen.integer(0, kVocab - 1);
      ids[0] = kVocab - 1;
      if (rows > 1) ids[1] = 0;
      std::vector<bf16> expected(static_cast<size_t>(rows) * hidden);
      cpu::embed(ops::embed_of(ids.data(), rows, table.data(), hidden, expected.data()));
      DeviceBuffer<bf16> dtable(table, stream.get()), dout(expected.size());
      DeviceBuffer<int64_t> dids(ids, stream.get());
      cuda::embed(ops::embed_of(dids.data(), rows, dtable.data(), hidden, dout.data()),
                  stream.get());
      EXPECT_TRUE(bf16_bits_equal(dout.download(stream.get()), expected, hidden, false));
    }
}

// ---- activations ------------------------------------------------------------------------------

TEST(CudaSiluMul, MatchesCpuBitForBit) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  const float specials[] = {NAN,   INFINITY, -INFINITY, -130.0f, -104.5f, -40.0f,  41.0f,
                            88.0f, -0.0f,    0.0f,      1e-40f,  -3e-39f, 3.0e38f, -3.0e38f};
  uint64_t seed = 0x5D0900;
  // inter 4096 at 256 rows takes the vector form (8 outputs a thread), the rest one output a
  // thread (cuda/eager/silu_mul.cu).
  for (int inter : {1, 3, 100, 1023, 4096})
    for (int rows : {1, 5, 64, 256}) {
      if (rows == 256 && inter != 4096) continue;
      ++seed;
      std::ostringstream trace;
      trace << "silu_mul seed " << seed << " rows " << rows << " inter " << inter;
      SCOPED_TRACE(trace.str());
      Gen gen(seed);
      std::vector<bf16> gu = gen.bf16s(static_cast<size_t>(rows) * 2 * inter, -12.0f, 12.0f);
      for (size_t i = 0; i < gu.size(); i += 7)
        gu[i] = to_bf16(specials[gen.integer(0, static_cast<int>(std::size(specials)) - 1)]);
      std::vector<bf16> expected(static_cast<size_t>(rows) * inter);
      cpu::silu_mul(ops::silu_mul_of(gu.data(), rows, inter, expected.data()));
      DeviceBuffer<bf16> dgu(gu, stream.get()), dy(expected.size());
      cuda::silu_mul(ops::silu_mul_of(dgu.data(), rows, inter, dy.data()), stream.get());
      EXPECT_TRUE(bf16_bits_equal(dy.download(stream.get()), expected, inter));
    }
}

TEST(CudaONormGate, MatchesCpuBitForBit) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  uint64_t seed = 0x5D0A00;
  for (int head_dim : {13, 16, 40, 64, 80, 128, 256})
    for (int heads : {1, 4, 16})
      for (bool o_norm : {false, true})
        for (bool gate : {false, true}) {
          ++seed;
          const int tokens = kRowCounts[seed % 3];
          const NormGain gain = kGains[seed % 3];
          const int64_t width = static_cast<int64_t>(heads) * head_dim;
          const int64_t g_stride = width + 3 * head_dim;
          std::ostringstream trace;
          trace << "o_norm_gate seed " << seed << " tokens " << tokens << " heads " << heads
                << " head_dim " << head_dim << (o_norm ? " o_norm" : "") << (gate ? " gate" : "")
                << " gain " << to_string(gain);
          SCOPED_TRACE(trace.str());
          Gen gen(seed);
          // Each (token, head) is a normed row of head_dim values.
          const std::vector<bf16> o =
              make_rows<bf16>(gen, tokens * heads, head_dim, head_dim, true);
          std::vector<bf16> g = gen.bf16s(static_cast<size_t>(tokens) * g_stride, -9.0f, 9.0f);
          for (size_t i = 0; i < g.size(); i += 11) g[i] = to_bf16(i % 2 ? -120.0f : 50.0f);
          const std::vector<bf16> w = gain_weights(gen, head_dim, gain);
          const bf16* w_host = gain == NormGain::none ? nullptr : w.data();

          std::vector<bf16> expected = o;
          cpu::o_norm_gate(ops::o_norm_gate_of(expected.data(), tokens, heads, head_dim, o_norm,
                                               w_host, gain, 1e-6f, gate ? g.data() : nullptr,
                                               g_stride));
          DeviceBuffer<bf16> dout(o, stream.get()), dg(g, stream.get()), dw(w, stream.get());
          cuda::o_norm_gate(ops::o_norm_gate_of(dout.data(), tokens, heads, head_dim, o_norm,
                                                gain == NormGain::none ? nullptr : dw.data(), gain,
                                                1e-6f, gate ? dg.data() : nullptr, g_stride),
                            stream.get());
          EXPECT_TRUE(bf16_bits_equal(dout.download(stream.get()), expected, width));
        }
}

// ---- draft-step kernels (head norm, widening, query block) ---------------------------

// cuda::head_rms_norm equals cpu::head_rms_norm (itself held to the naive formula in
// tests/cpu/test_ops.cpp) bit for bit, NaN matching NaN: odd head sizes, padded token
// strides, 1 to 64 tokens, heads with a NaN, +-inf, huge, subnormal or zero values.
TEST(CudaHeadRmsNorm, MatchesCpuBitForBit) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  uint64_t seed = 0x5D0E00;
  for (int tokens : {1, 7, 64})
    for (int heads : {1, 3, 8})
      for (int hd : {1, 7, 32, 33, 128, 257})
        for (NormGain gain : kGains) {
          ++seed;
          const int pad = static_cast<int>(seed % 3) * 3;
          SCOPED_TRACE("head_rms_norm tokens " + std::to_string(tokens) + " heads " +
                       std::to_string(heads) + " head_dim " + std::to_string(hd) + " pad " +
                       std::to_string(pad) + " gain " + to_string(gain));
          Gen gen(seed);
          const int64_t stride = static_cast<int64_t>(heads) * hd + pad;
          // Each head is a row of make_rows' kinds; the token padding is junk.
          const std::vector<bf16> heads_rows = make_rows<bf16>(gen, tokens * heads, hd, hd, true);
          std::vector<bf16> x(static_cast<size_t>(tokens) * stride);
          for (int t = 0; t < tokens; ++t) {
            std::copy(heads_rows.begin() + static_cast<int64_t>(t) * heads * hd,
                      heads_rows.begin() + static_cast<int64_t>(t + 1) * heads * hd,
                      x.begin() + t * stride);
            for (int i = heads * hd; i < stride; ++i)
              x[t * stride + i] = to_bf16(gen.uniform(500.0f, 900.0f));
          }
          const float eps = seed % 2 ? 1e-6f : 1e-5f;
          const std::vector<bf16> w = gain_weights(gen, hd, gain);
          std::vector<bf16> expected = x;
          cpu::head_rms_norm(ops::head_norm(expected.data(), stride, tokens, heads, hd,
                                            gain == NormGain::none ? nullptr : w.data(), gain,
                                            eps));
          DeviceBuffer<bf16> dx(x, stream.get()), dw(w, stream.get());
          cuda::head_rms_norm(
              ops::head_norm(dx.data(), stride, tokens, heads, hd,
                             gain == NormGain::none ? nullptr : dw.data(), gain, eps),
              stream.get());
          EXPECT_TRUE(bf16_bits_equal(dx.download(stream.get()), expected, stride));
        }
}

// cuda::widen: out[i] = f32(x[i]) exactly, i.e. the bf16 bits in the upper half
// (NaN payloads, signed zeros, infinities and subnormals kept), odd sizes.
TEST(CudaWidenBf16, IsTheExactWidening) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  uint64_t seed = 0x5D0F00;
  for (int64_t n : {1, 7, 255, 256, 257, 4099, 100003}) {
    ++seed;
    SCOPED_TRACE("widen n " + std::to_string(n));
    Gen gen(seed);
    std::vector<bf16> x(static_cast<size_t>(n));
    for (auto& v : x) v = bf16{static_cast<uint16_t>(gen.integer(0, 0xffff))};  // every kind
    const uint16_t specials[] = {0x7fc0, 0xffc0, 0x7f81, 0xff95, 0x7f80, 0xff80,
                                 0x0000, 0x8000, 0x0001, 0x8001, 0x7f7f, 0xff7f};
    for (size_t i = 0; i < std::size(specials) && i < x.size(); ++i)
      x[(i * 7919) % x.size()] = bf16{specials[i]};
    std::vector<uint32_t> expected(x.size());
    for (size_t i = 0; i < x.size(); ++i) expected[i] = static_cast<uint32_t>(x[i].bits) << 16;
    DeviceBuffer<bf16> dx(x, stream.get());
    DeviceBuffer<float> dout(x.size());
    cuda::widen(ops::widen_of(dx.data(), n, dout.data()), stream.get());
    const std::vector<float> out = dout.download(stream.get());
    std::vector<uint32_t> found(out.size());
    for (size_t i = 0; i < out.size(); ++i) found[i] = f32_bits(out[i]);
    EXPECT_TRUE(test::same_bits(found, expected));
  }
  cuda::widen(ops::widen_of(nullptr, 0, nullptr), stream.get());  // n == 0: nothing to do
}

// cuda::prepare_query_block equals cpu::prepare_query_block (itself held to the
// formula in tests/cpu/test_step_ops.cpp) on every entry, with padding rows, odd page
// sizes and shuffled block tables.
TEST(CudaPrepareQueryBlock, MatchesCpu) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  cudaStream_t s = stream.get();
  uint64_t seed = 0x5D1000;
  for (int rows : test::kQueryBlockRows)
    for (int steps : test::kQueryBlockSteps)
      for (int page : test::kQueryBlockPages) {
        ++seed;
        SCOPED_TRACE("prepare_query_block rows " + std::to_string(rows) + " steps " +
                     std::to_string(steps) + " page_size " + std::to_string(page));
        Gen gen(seed);
        test::QueryBlockData want(gen, rows, steps, page);
        test::QueryBlockData got = want;
        cpu::prepare_query_block(want.params());
        DeviceBuffer<int64_t> anchor(got.anchor_tokens, s), apos(got.anchor_positions, s),
            cslot(got.cache_slots, s), ids(got.ids, s), pos(got.positions, s), slots(got.slots, s),
            kv(got.kv_lens, s), sa(got.safe_anchor, s), sp(got.safe_position, s);
        DeviceBuffer<int32_t> tables(got.block_tables, s), req(got.token_request, s);
        ops::QueryBlockParams p = got.params();
        p.anchor_tokens = anchor.data();
        p.anchor_positions = apos.data();
        p.cache_slots = cslot.data();
        p.block_tables = tables.data();
        p.ids = ids.data();
        p.positions = pos.data();
        p.slots = slots.data();
        p.token_request = req.data();
        p.kv_lens = kv.data();
        p.safe_anchor = sa.data();
        p.safe_position = sp.data();
        cuda::prepare_query_block(p, s);
        EXPECT_TRUE(test::same_bits(ids.download(s), want.ids, {steps})) << "ids";
        EXPECT_TRUE(test::same_bits(pos.download(s), want.positions, {steps})) << "positions";
        EXPECT_TRUE(test::same_bits(slots.download(s), want.slots, {steps})) << "slots";
        EXPECT_TRUE(test::same_bits(req.download(s), want.token_request, {steps}))
            << "token_request";
        EXPECT_TRUE(test::same_bits(kv.download(s), want.kv_lens)) << "kv_lens";
        EXPECT_TRUE(test::same_bits(sa.download(s), want.safe_anchor)) << "safe_anchor";
        EXPECT_TRUE(test::same_bits(sp.download(s), want.safe_position)) << "safe_position";
      }
}

// cuda::select_drafted_rows equals cpu::select_drafted_rows (held to the formula in
// tests/cpu/test_step_ops.cpp), bit patterns of every kind, on odd and aligned hidden sizes
// (the 8-byte path and the bf16 path), one and several rows, an offset input (unaligned).
TEST(CudaSelectDraftedRows, MatchesCpu) {
  SD_REQUIRE_GPU();
  DeviceStream stream;
  cudaStream_t s = stream.get();
  uint64_t seed = 0x5D1100;
  for (int rows : {1, 3, 8})
    for (int hidden : {1, 7, 64, 130, 4096})
      for (int offset : {0, 1}) {
        ++seed;
        const int slots = 8, drafted = 7, first = 1;
        SCOPED_TRACE("select_drafted_rows rows " + std::to_string(rows) + " hidden " +
                     std::to_string(hidden) + " offset " + std::to_string(offset));
        Gen gen(seed);
        std::vector<bf16> in(static_cast<size_t>(rows) * slots * hidden + offset);
        for (auto& v : in) v = bf16{static_cast<uint16_t>(gen.integer(0, 0xffff))};
        std::vector<bf16> want(static_cast<size_t>(rows) * drafted * hidden, bf16{0x1234});
        cpu::select_drafted_rows(ops::DraftedRowsParams{rows, slots, drafted, first, hidden,
                                                        in.data() + offset, want.data()});
        DeviceBuffer<bf16> din(in, s);
        DeviceBuffer<bf16> dout(std::vector<bf16>(want.size(), bf16{0x1234}), s);
        cuda::select_drafted_rows(ops::DraftedRowsParams{rows, slots, drafted, first, hidden,
                                                         din.data() + offset, dout.data()},
                                  s);
        EXPECT_TRUE(test::same_bits(dout.download(s), want, {hidden}));
      }
}

// ---- argument checks
// ------------------------------------------------------------------------------

TEST(CudaKernelArguments, BadSizesAreRefusedBeforeAnyLaunch) {
  SD_REQUIRE_GPU();
  bf16* const none = nullptr;
  EXPECT_THROW(cuda::rms_norm(ops::rms_norm_of(none, 8, 1, 0, none, NormGain::none, 1e-6f, none, 8),
                              nullptr),
               InvalidArgument);
  EXPECT_THROW(cuda::rms_norm(ops::rms_norm_of(none, 7, 1, 8, none, NormGain::none, 1e-6f, none, 8),
                              nullptr),
               InvalidArgument);
  EXPECT_THROW(
      cuda::rms_norm(ops::rms_norm_of(none, 8, 1, 8, none, NormGain::weight, 1e-6f, none, 8),
                     nullptr),
      InvalidArgument);
  EXPECT_THROW(
      cuda::rms_norm(ops::rms_norm_of(none, 8, 1, 8, none, NormGain::none, NAN, none, 8), nullptr),
      InvalidArgument);

  ops::BoundaryParams bp;
  bp.rows = 1;
  bp.hidden = 8;
  bp.gain = NormGain::none;
  const float coeff = 1.0f;
  bp.alpha = &coeff;  // beta missing
  EXPECT_THROW(bp.check(), InvalidArgument);
  bp.alpha = nullptr;
  bp.gain = NormGain::weight;  // pre_weight missing
  EXPECT_THROW(bp.check(), InvalidArgument);

  EXPECT_THROW(
      cuda::rope(ops::rope_heads(none, 8, 1, 1, 7, nullptr, nullptr, RopeStyle::neox), nullptr),
      InvalidArgument);
  EXPECT_THROW(
      cuda::rope(ops::rope_heads(none, 15, 1, 2, 8, nullptr, nullptr, RopeStyle::gptj), nullptr),
      InvalidArgument);
  EXPECT_THROW(
      cuda::kv_insert(ops::kv_insert_of(none, 15, none, 16, 1, 2, 8, nullptr, none), nullptr),
      InvalidArgument);
  EXPECT_THROW(cuda::embed(ops::embed_of(nullptr, 1, none, 0, none), nullptr), InvalidArgument);
  EXPECT_THROW(cuda::silu_mul(ops::silu_mul_of(none, 1, 0, none), nullptr), InvalidArgument);
  EXPECT_THROW(cuda::o_norm_gate(ops::o_norm_gate_of(none, 1, 2, 8, true, none, NormGain::weight,
                                                     1e-6f, none, 16),
                                 nullptr),
               InvalidArgument);

  ops::AttentionParams ap;
  ap.tokens = 0;
  ap.heads = 6;
  ap.kv_heads = 4;  // not a divisor
  ap.head_dim = 64;
  ap.page_size = 16;
  ap.max_pages = 4;
  ap.q_stride = 6 * 64;
  ap.max_kv_len = 64;
  EXPECT_THROW(ap.check(), InvalidArgument);
  ap.kv_heads = 3;
  EXPECT_NO_THROW(ap.check());
  ap.head_dim = cuda::kAttentionMaxHeadDim + 1;
  EXPECT_THROW(cuda::check_attention_limits(ap), InvalidArgument);  // a kernel limit
  ap.head_dim = 64;
  ap.max_kv_len = 65;  // past the block table
  EXPECT_THROW(ap.check(), InvalidArgument);
  ap.max_kv_len = 64;
  ap.tokens = 1;
  EXPECT_THROW(ap.check(), InvalidArgument);  // null device pointers with tokens
}

}  // namespace
}  // namespace sparkdraft
