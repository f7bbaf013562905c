// The fused backbone kernels (cuda/fused/backbone/backbone.h) against the compositions they replace
// (ops/front.h; runtime/step.h eager_qkv_front and eager_embed_norm), bit for bit:
//   * fused == the eager CUDA ops on the GPU, every output buffer and every cache,
//     NaNs compared by their bits (both sides are the GPU's arithmetic);
//   * fused == the same composition of the CPU reference ops (a NaN matching any
//     NaN, as in test_kernels.cu);
//   * the fused kernel captured in a CUDA graph == the eager ops;
// over seeded sweeps: 1, 7, 16, 33 query tokens and 1024 context tokens, head_dim 8
// to 256 (every group size of the kernel: 1, 2, 4, 8, 16, 32 lanes per head, odd
// chunk counts), both RoPE styles, QK-norm and V-norm on and off, every norm gain,
// the output gate's columns and the stride's tail left untouched, padding slots,
// 1 to 16 layers, NaN/inf/huge/subnormal/zero heads. Also the refusals and the plan's
// parts (host logic, run without a GPU).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <numeric>
#include <stdexcept>
#include <string>
#include <vector>

#include "common/bits.h"
#include "common/errors.h"
#include "common/random.h"
#include "cuda/common/graph.h"
#include "cuda/fused/backbone/backbone.h"
#include "cuda/gpu_test_util.h"
#include "cuda/kernels.h"
#include "runtime/step.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/cpu/ops.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/draft.h"
#include "sparkdraft/error.h"

namespace sparkdraft {
namespace {

using cuda::DeviceBuffer;
using cuda::DeviceStream;
using test::Gen;

// The ops the compositions call, on one backend; anything else is a test bug.
class FrontOps : public StepOps {
 public:
  void gemm(const ops::GemmParams&) override { no(); }
  void prepare_query_block(const ops::QueryBlockParams&) override { no(); }
  void select_drafted_rows(const ops::DraftedRowsParams&) override { no(); }
  void attention(const ops::AttentionParams&, const bf16*, const bf16*, bf16*) override { no(); }
  void o_norm_gate(const ops::ONormGateParams&) override { no(); }
  void residual_boundary(const ops::BoundaryParams&, const bf16*, void*, bf16*) override { no(); }
  void silu_mul(const ops::SiluMulParams&) override { no(); }
  void gate_up_swiglu(const ops::GateUpParams&) override { no(); }
  void qkv_front(const ops::QkvFrontParams& p) override { eager_qkv_front(*this, p); }
  void embed_norm(const ops::EmbedNormParams& p) override { eager_embed_norm(*this, p); }

 private:
  [[noreturn]] static void no() { throw std::logic_error("FrontOps: op not used by the fronts"); }
};

class GpuEagerOps final : public FrontOps {
 public:
  explicit GpuEagerOps(cudaStream_t s) : s_(s) {}
  void rms_norm(const ops::RmsNormParams& p) override { cuda::rms_norm(p, s_); }
  void head_rms_norm(const ops::HeadNormParams& p) override { cuda::head_rms_norm(p, s_); }
  void rope(const ops::RopeParams& p) override { cuda::rope(p, s_); }
  void kv_insert(const ops::KvInsertParams& p) override { cuda::kv_insert(p, s_); }
  void embed(const ops::EmbedParams& p) override { cuda::embed(p, s_); }
  void widen(const ops::WidenParams& p) override { cuda::widen(p, s_); }

 private:
  cudaStream_t s_;
};

class CpuRefOps final : public FrontOps {
 public:
  void rms_norm(const ops::RmsNormParams& p) override { cpu::rms_norm(p); }
  void head_rms_norm(const ops::HeadNormParams& p) override { cpu::head_rms_norm(p); }
  void rope(const ops::RopeParams& p) override { cpu::rope(p); }
  void kv_insert(const ops::KvInsertParams& p) override { cpu::kv_insert(p); }
  void embed(const ops::EmbedParams& p) override { cpu::embed(p); }
  void widen(const ops::WidenParams& p) override { cpu::widen(p); }
};

// ---- seeded inputs --------------------------------------------------------------------

// A head (or row) of one of the kinds the sweeps cycle through: ordinary at a random
// scale, one NaN, one +inf, one -inf, huge, subnormal, zeros.
void fill_values(Gen& gen, bf16* v, int n, int kind) {
  const float scales[] = {1e-3f, 0.25f, 1.0f, 37.0f};
  const float scale = scales[gen.integer(0, 3)];
  for (int i = 0; i < n; ++i) {
    float x = gen.uniform(-scale, scale);
    if (kind == 4) x = (gen.integer(0, 1) ? 1.0f : -1.0f) * gen.uniform(1e37f, 3e38f);
    if (kind == 5) x = gen.uniform(-2e-39f, 2e-39f);
    if (kind == 6) x = gen.integer(0, 1) ? 0.0f : -0.0f;
    v[i] = to_bf16(x);
  }
  const int at = static_cast<int>(gen.integer(0, n - 1));
  const uint16_t nans[] = {0x7fc0, 0xffc0, 0x7f81, 0xff95};
  if (kind == 1) v[at] = bf16{nans[gen.integer(0, 3)]};
  if (kind == 2) v[at] = to_bf16(INFINITY);
  if (kind == 3) v[at] = to_bf16(-INFINITY);
}
int value_kind(Gen& gen, bool special) {
  return special ? static_cast<int>(gen.integer(0, 9)) % 7 : 0;
}

struct FrontCase {
  int tokens = 7, heads = 8, kv_heads = 2, head_dim = 64, layers = 1;
  RopeStyle style = RopeStyle::neox;
  bool qk_norm = true, v_norm = false, gate = false, special = true;
  NormGain gain = NormGain::weight;

  std::string name() const {
    char buf[200];
    std::snprintf(buf, sizeof buf,
                  "tokens %d heads %d kv_heads %d head_dim %d layers %d rope %s qk_norm %d "
                  "v_norm %d gate %d gain %s special %d",
                  tokens, heads, kv_heads, head_dim, layers, to_string(style), qk_norm, v_norm,
                  gate, to_string(gain), special);
    return buf;
  }
};

// One qkv_front problem on the host: a row per token of [q | gate | (k | v) per layer |
// tail], norm weights, positions, slots (some -1), caches prefilled with junk.
struct FrontProblem {
  FrontCase c;
  int64_t stride = 0, q_at = 0, kv_at = 0;
  int slots_per_layer = 0, max_positions = 0;
  std::vector<bf16> qkv, q_norm;
  std::vector<std::vector<bf16>> k_norm, cache;
  std::vector<int64_t> positions, slots;
  std::vector<float> table;

  FrontProblem(Gen& gen, const FrontCase& fc) : c(fc) {
    const int hd = c.head_dim, kv = c.kv_heads * hd, q = c.heads * hd;
    q_at = 0;
    kv_at = q + (c.gate ? q : 0);
    stride = kv_at + static_cast<int64_t>(c.layers) * 2 * kv + 8;  // a tail nobody touches
    qkv.resize(static_cast<size_t>(c.tokens) * stride);
    for (int t = 0; t < c.tokens; ++t) {
      bf16* row = qkv.data() + static_cast<size_t>(t) * stride;
      for (int64_t h = 0; h * hd < stride - 8; ++h)
        fill_values(gen, row + h * hd, hd, value_kind(gen, c.special));
      fill_values(gen, row + stride - 8, 8, 0);
    }
    q_norm = gen.bf16s(hd, -1.5f, 1.5f);
    for (int l = 0; l < c.layers; ++l) k_norm.push_back(gen.bf16s(hd, -1.5f, 1.5f));
    max_positions = 4096 + 64;
    table.resize(static_cast<size_t>(max_positions) * hd);
    cpu::rope_table(c.style == RopeStyle::neox ? 1e6 : 5e5, hd, max_positions, table.data());
    slots_per_layer = c.tokens + 5;
    std::vector<int64_t> perm(slots_per_layer);
    std::iota(perm.begin(), perm.end(), 0);
    for (int i = slots_per_layer - 1; i > 0; --i) std::swap(perm[i], perm[gen.integer(0, i)]);
    for (int t = 0; t < c.tokens; ++t) {
      positions.push_back(gen.integer(0, max_positions - 1));
      slots.push_back(t % 5 == 3 ? -1 : perm[t]);  // padding tokens write nothing
    }
    for (int l = 0; l < c.layers; ++l)
      cache.push_back(gen.bf16s(static_cast<size_t>(slots_per_layer) * 2 * kv, -3.0f, 3.0f));
  }

  // The params over these buffers (host or device copies).
  ops::QkvFrontParams params(bf16* buf, const bf16* qn, const std::vector<const bf16*>& kn,
                             const std::vector<bf16*>& caches, const int64_t* pos, const float* tab,
                             const int64_t* sl) const {
    ops::QkvFrontParams p;
    p.tokens = c.tokens;
    p.heads = c.heads;
    p.kv_heads = c.kv_heads;
    p.head_dim = c.head_dim;
    p.token_stride = stride;
    p.q = c.heads > 0 ? buf + q_at : nullptr;
    p.q_norm = qn;
    p.layers = c.layers;
    const int64_t kv = static_cast<int64_t>(c.kv_heads) * c.head_dim;
    for (int l = 0; l < c.layers; ++l) {
      bf16* k = buf + kv_at + l * 2 * kv;
      p.layer[l] = {k, k + kv, kn[l], caches[l]};
    }
    p.qk_norm = c.qk_norm;
    p.v_norm = c.v_norm;
    p.gain = c.gain;
    p.eps = 1e-6f;
    p.positions = pos;
    p.rope_table = tab;
    p.rope_style = c.style;
    p.slots = sl;
    return p;
  }
};

// The device copy of a problem (fresh for each run).
struct FrontDevice {
  DeviceBuffer<bf16> qkv, q_norm;
  std::vector<DeviceBuffer<bf16>> k_norm, cache;
  DeviceBuffer<int64_t> positions, slots;
  DeviceBuffer<float> table;
  ops::QkvFrontParams p;

  explicit FrontDevice(const FrontProblem& fp)
      : qkv(fp.qkv), q_norm(fp.q_norm), positions(fp.positions), slots(fp.slots), table(fp.table) {
    std::vector<const bf16*> kn;
    std::vector<bf16*> caches;
    for (int l = 0; l < fp.c.layers; ++l) {
      k_norm.emplace_back(fp.k_norm[l]);
      cache.emplace_back(fp.cache[l]);
      kn.push_back(k_norm.back().data());
      caches.push_back(cache.back().data());
    }
    p = fp.params(qkv.data(), q_norm.data(), kn, caches, positions.data(), table.data(),
                  slots.data());
  }
};

// Runs the case four ways and compares: eager GPU (reference), fused, fused in a graph,
// CPU composition.
void check_front(const FrontCase& fc, uint64_t seed) {
  SCOPED_TRACE(fc.name());
  Gen gen(seed);
  const FrontProblem fp(gen, fc);
  DeviceStream stream;
  const cudaStream_t s = stream.get();

  FrontDevice eager(fp), fused(fp), graphed(fp);
  GpuEagerOps eager_ops(s);
  eager_qkv_front(eager_ops, eager.p);
  cuda::qkv_front(fused.p, s);
  cuda::GraphExec graph(s, [&](cudaStream_t gs) { cuda::qkv_front(graphed.p, gs); });
  graph.launch(s);
  SD_CUDA_CHECK(cudaStreamSynchronize(s));

  // CPU: the same composition on host copies.
  std::vector<bf16> cpu_qkv = fp.qkv;
  std::vector<std::vector<bf16>> cpu_cache = fp.cache;
  std::vector<const bf16*> kn;
  std::vector<bf16*> caches;
  for (int l = 0; l < fc.layers; ++l) {
    kn.push_back(fp.k_norm[l].data());
    caches.push_back(cpu_cache[l].data());
  }
  CpuRefOps cpu_ops;
  eager_qkv_front(cpu_ops, fp.params(cpu_qkv.data(), fp.q_norm.data(), kn, caches,
                                     fp.positions.data(), fp.table.data(), fp.slots.data()));

  const std::vector<bf16> ref = eager.qkv.download(s);
  EXPECT_TRUE(test::same_bits(fused.qkv.download(s), ref, {fp.stride})) << "fused qkv buffer";
  EXPECT_TRUE(test::same_bits(graphed.qkv.download(s), ref, {fp.stride})) << "graph qkv buffer";
  EXPECT_TRUE(test::same_bits(cpu_qkv, ref, {fp.stride, true})) << "cpu qkv buffer";
  EXPECT_FALSE(test::same_bits(ref, fp.qkv)) << "the front changed nothing: the test is blind";
  const int64_t slot_width = 2LL * fc.kv_heads * fc.head_dim;
  for (int l = 0; l < fc.layers; ++l) {
    const std::vector<bf16> cref = eager.cache[l].download(s);
    EXPECT_TRUE(test::same_bits(fused.cache[l].download(s), cref, {slot_width}))
        << "fused cache of layer " << l;
    EXPECT_TRUE(test::same_bits(graphed.cache[l].download(s), cref, {slot_width}))
        << "graph cache of layer " << l;
    EXPECT_TRUE(test::same_bits(cpu_cache[l], cref, {slot_width, true}))
        << "cpu cache of layer " << l;
  }
}

TEST(FusedBackbone, QkvFrontEqualsEagerOpsOverHeadDimsStylesNormsAndTokens) {
  SD_REQUIRE_GPU();
  uint64_t seed = 0xF40000;
  int n = 0;
  const NormGain gains[] = {NormGain::weight, NormGain::one_plus_weight, NormGain::none};
  for (int hd : {8, 16, 24, 40, 64, 128, 136, 256})
    for (RopeStyle style : {RopeStyle::neox, RopeStyle::gptj})
      for (int tokens : {1, 7, 16, 33}) {
        FrontCase c;
        c.tokens = tokens;
        c.head_dim = hd;
        c.kv_heads = 1 + n % 3;
        c.heads = c.kv_heads * (1 + n % 4);
        c.style = style;
        c.qk_norm = n % 4 != 1;
        c.v_norm = n % 3 == 0;
        c.gate = n % 2 == 0;
        c.gain = gains[n % 3];
        c.special = n % 5 != 4;
        ++n;
        check_front(c, ++seed);
      }
}

// Every combination of the switches at the shapes of the presets' heads.
TEST(FusedBackbone, QkvFrontEveryNormSwitchAndGain) {
  SD_REQUIRE_GPU();
  uint64_t seed = 0xF41000;
  for (int hd : {64, 128})
    for (RopeStyle style : {RopeStyle::neox, RopeStyle::gptj})
      for (bool qk : {false, true})
        for (bool vn : {false, true})
          for (NormGain g : {NormGain::weight, NormGain::one_plus_weight, NormGain::none}) {
            FrontCase c;
            c.tokens = 16;
            c.heads = hd == 64 ? 16 : 8;
            c.kv_heads = hd == 64 ? 4 : 2;
            c.head_dim = hd;
            c.style = style;
            c.qk_norm = qk;
            c.v_norm = vn;
            c.gain = g;
            c.gate = true;
            check_front(c, ++seed);
          }
}

// The context chain's use: no q, every layer in one call, up to 1024 tokens.
TEST(FusedBackbone, ContextFrontEqualsEagerOpsForAllLayersAtOnce) {
  SD_REQUIRE_GPU();
  uint64_t seed = 0xF42000;
  struct Shape {
    int tokens, kv_heads, head_dim, layers;
    RopeStyle style;
    bool qk, vn;
  };
  const Shape shapes[] = {
      {1024, 8, 128, 5, RopeStyle::neox, true, false},  // qwen3-8b's context
      {1024, 16, 64, 1, RopeStyle::gptj, true, true},   // muse: one layer per call
      {33, 2, 16, 16, RopeStyle::neox, true, true},     // the most layers of one call
      {7, 3, 40, 3, RopeStyle::gptj, false, true},     {1, 1, 8, 2, RopeStyle::neox, true, false},
  };
  for (const Shape& sh : shapes) {
    FrontCase c;
    c.tokens = sh.tokens;
    c.heads = 0;
    c.kv_heads = sh.kv_heads;
    c.head_dim = sh.head_dim;
    c.layers = sh.layers;
    c.style = sh.style;
    c.qk_norm = sh.qk;
    c.v_norm = sh.vn;
    check_front(c, ++seed);
  }
}

// ---- embed_norm ------------------------------------------------------------------------

void check_embed_norm(int rows, int hidden, bool f32, NormGain gain, uint64_t seed) {
  SCOPED_TRACE("rows " + std::to_string(rows) + " hidden " + std::to_string(hidden) + " f32 " +
               std::to_string(f32) + " gain " + to_string(gain));
  Gen gen(seed);
  const int vocab = 50;
  std::vector<bf16> table(static_cast<size_t>(vocab) * hidden);
  for (int v = 0; v < vocab; ++v)
    fill_values(gen, table.data() + static_cast<size_t>(v) * hidden, hidden, v % 7);
  std::vector<int64_t> ids(rows);
  for (auto& id : ids) id = gen.integer(0, vocab - 1);
  const std::vector<bf16> weight = gen.bf16s(hidden, -1.5f, 1.5f);
  const size_t n = static_cast<size_t>(rows) * hidden;

  DeviceStream stream;
  const cudaStream_t s = stream.get();
  const DeviceBuffer<bf16> d_table(table), d_weight(weight);
  const DeviceBuffer<int64_t> d_ids(ids);
  struct Out {
    DeviceBuffer<bf16> x, y;
    DeviceBuffer<float> wide;
  };
  auto make_out = [&] {
    Out o{DeviceBuffer<bf16>(gen.bf16s(n, -1, 1)), DeviceBuffer<bf16>(gen.bf16s(n, -1, 1)),
          DeviceBuffer<float>(gen.floats(n, -1, 1))};
    return o;
  };
  auto params = [&](bf16* x, float* wide, bf16* y, const bf16* tab, const int64_t* id,
                    const bf16* w) {
    ops::EmbedNormParams p;
    p.rows = rows;
    p.hidden = hidden;
    p.ids = id;
    p.table = tab;
    p.x = x;
    p.residual_f32 = f32 ? wide : nullptr;
    p.weight = gain == NormGain::none ? nullptr : w;
    p.gain = gain;
    p.eps = 1e-5f;
    p.y = y;
    return p;
  };
  Out eager = make_out(), fused = make_out(), graphed = make_out();
  const std::vector<float> wide_before = eager.wide.download(s);
  GpuEagerOps eager_ops(s);
  eager_embed_norm(eager_ops, params(eager.x.data(), eager.wide.data(), eager.y.data(),
                                     d_table.data(), d_ids.data(), d_weight.data()));
  cuda::embed_norm(params(fused.x.data(), fused.wide.data(), fused.y.data(), d_table.data(),
                          d_ids.data(), d_weight.data()),
                   s);
  const ops::EmbedNormParams gp = params(graphed.x.data(), graphed.wide.data(), graphed.y.data(),
                                         d_table.data(), d_ids.data(), d_weight.data());
  cuda::GraphExec graph(s, [&](cudaStream_t gs) { cuda::embed_norm(gp, gs); });
  graph.launch(s);
  SD_CUDA_CHECK(cudaStreamSynchronize(s));

  std::vector<bf16> cx(n), cy(n);
  std::vector<float> cw = wide_before;
  CpuRefOps cpu_ops;
  eager_embed_norm(
      cpu_ops, params(cx.data(), cw.data(), cy.data(), table.data(), ids.data(), weight.data()));

  const std::vector<bf16> x = eager.x.download(s), y = eager.y.download(s);
  const std::vector<float> wide = eager.wide.download(s);
  for (const Out* o : {&fused, &graphed}) {
    const char* which = o == &fused ? "fused" : "graph";
    EXPECT_TRUE(test::same_bits(o->x.download(s), x, {hidden})) << which << " x";
    EXPECT_TRUE(test::same_bits(o->y.download(s), y, {hidden})) << which << " y";
    if (f32) EXPECT_TRUE(test::same_bits(o->wide.download(s), wide, {hidden})) << which << " f32";
  }
  if (!f32) EXPECT_TRUE(test::same_bits(wide, wide_before)) << "residual_f32 written without f32";
  EXPECT_TRUE(test::same_bits(cx, x, {hidden})) << "cpu x";
  EXPECT_TRUE(test::same_bits(cy, y, {hidden, true})) << "cpu y";
  if (f32) EXPECT_TRUE(test::same_bits(cw, wide, {hidden})) << "cpu f32";
}

TEST(FusedBackbone, EmbedNormEqualsEmbedWidenRmsNorm) {
  SD_REQUIRE_GPU();
  uint64_t seed = 0xF43000;
  int n = 0;
  const NormGain gains[] = {NormGain::weight, NormGain::one_plus_weight, NormGain::none};
  for (int hidden : {8, 64, 136, 4096, 8200})
    for (int rows : {1, 7, 16, 33, 224})
      for (bool f32 : {false, true}) check_embed_norm(rows, hidden, f32, gains[n++ % 3], ++seed);
}

// ---- refusals and the plan (host logic: no GPU needed) ----------------------------------

TEST(FusedBackbone, RefusalsNameTheLimit) {
  EXPECT_EQ(cuda::qkv_front_refusal(128), "");
  EXPECT_EQ(cuda::qkv_front_refusal(8), "");
  EXPECT_EQ(cuda::qkv_front_refusal(256), "");
  test::expect_mentions(cuda::qkv_front_refusal(12), {"head_dim 12", "multiple of 8"});
  test::expect_mentions(cuda::qkv_front_refusal(264), {"head_dim 264", "256"});
  EXPECT_EQ(cuda::embed_norm_refusal(4096), "");
  test::expect_mentions(cuda::embed_norm_refusal(5000 + 4), {"5004", "multiple of 8"});

  // The launchers refuse the same before any launch, and misaligned strides too.
  ops::QkvFrontParams p;
  p.tokens = 1;
  p.kv_heads = 1;
  p.head_dim = 12;
  p.token_stride = 24;
  p.layers = 1;
  bf16 dummy[64];
  int64_t pos = 0;
  float table[16];
  p.layer[0] = {dummy, dummy + 12, nullptr, dummy};
  p.positions = &pos;
  p.slots = &pos;
  p.rope_table = table;
  test::expect_mentions(test::error_of<InvalidArgument>([&] { cuda::qkv_front(p, nullptr); }),
                        {"qkv_front", "multiple of 8"});
  p.head_dim = 8;
  p.token_stride = 20;
  test::expect_mentions(test::error_of<InvalidArgument>([&] { cuda::qkv_front(p, nullptr); }),
                        {"qkv_front", "token_stride 20"});
  p.layers = ops::kMaxFrontLayers + 1;
  test::expect_mentions(test::error_of<InvalidArgument>([&] { cuda::qkv_front(p, nullptr); }),
                        {"layers"});
}

TEST(FusedBackbone, PlanRunsTheFrontsFusedOnThePresetsAndSaysWhyNot) {
  for (const auto& [preset, style] : std::vector<std::pair<std::string, std::string>>{
           {"tiny", "qwen3"}, {"tiny", "muse"}, {"qwen3-8b", "qwen3"}, {"muse", "muse"}}) {
    SCOPED_TRACE(preset + "/" + style);
    const ModelConfig c = preset_config(preset, style);
    const StepPlan plan = cuda::make_plan(c, cuda::CudaDraftOptions{}, 8);
    for (const char* part : {"embed norm", "qkv front", "context front", "mlp"})
      EXPECT_TRUE(plan.runs(part, "fused")) << part << "\n" << plan.text();
    cuda::CudaDraftOptions off;
    off.fused_backbone = false;
    const StepPlan eager = cuda::make_plan(c, off, 8);
    for (const char* part : {"embed norm", "qkv front", "context front", "mlp"}) {
      EXPECT_TRUE(eager.runs(part, "eager")) << part;
      test::expect_mentions(eager.at(part).reason, {"switched off"});
    }
  }
  ModelConfig odd = preset_config("tiny", "qwen3");
  odd.head_dim = 12;
  odd.hidden_size = 60;
  const StepPlan plan = cuda::make_plan(odd, cuda::CudaDraftOptions{}, 8);
  for (const char* part : {"qkv front", "context front"}) {
    EXPECT_TRUE(plan.runs(part, "eager")) << part;
    test::expect_mentions(plan.at(part).reason, {"head_dim 12 is not a multiple of 8"});
  }
  EXPECT_TRUE(plan.runs("embed norm", "eager"));
  test::expect_mentions(plan.at("embed norm").reason, {"hidden size 60 is not a multiple of 8"});
  EXPECT_TRUE(plan.runs("mlp", "eager"));
  test::expect_mentions(plan.at("mlp").reason, {"hidden size 60 is not a multiple of 8 (the GEMM"});
}

// The backend follows its plan: the tiny presets build with the fronts fused, the
// reference options with them eager (test_draft.cu compares the two on every output).
TEST(FusedBackbone, CudaDraftFollowsThePlan) {
  SD_REQUIRE_GPU();
  const ModelConfig c = preset_config("tiny", "muse");
  const std::string dir = ::testing::TempDir() + "/sparkdraft-backbone-tiny-muse";
  SyntheticOptions so;
  so.seed = 3;
  write_synthetic_checkpoint(c, dir, so);
  auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(dir));
  DraftOptions o;
  o.max_reqs = 2;
  cuda::CudaDraft fused(ckpt, o);
  cuda::CudaDraftOptions off;
  off.fused_backbone = false;
  cuda::CudaDraft eager(ckpt, o, off);
  for (const char* part : {"embed norm", "qkv front", "context front", "mlp"}) {
    EXPECT_TRUE(fused.plan().runs(part, "fused")) << part;
    EXPECT_TRUE(eager.plan().runs(part, "eager")) << part;
  }
}

}  // namespace
}  // namespace sparkdraft
