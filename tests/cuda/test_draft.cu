// The whole draft job on the GPU (issue 3): for each preset and both layer
// styles, the CPU backend (every matrix product on its own tensor-core twin)
// equals the GPU eager path bit for bit, and the
// GPU eager path equals the fused path (fused Markov loop + CUDA graph), on
// tokens, the draft-logits cache and every KV cache, over several rounds.
// Also: a request drafts the same alone and inside a batch of 5 with padding rows.
//
// The tiny presets always run. The full-size presets (qwen3-8b: 4.7 GB, muse:
// 10.6 GB of synthetic weights) run when SPARKDRAFT_BIG_PRESETS=1 (their
// checkpoints are written to SPARKDRAFT_PRESET_DIR, default the temp directory).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <memory>

#include "check/check_draft.h"
#include "common/bits.h"
#include "common/errors.h"
#include "common/files.h"
#include "common/random.h"
#include "cuda/common/graph.h"
#include "cuda/gpu_test_util.h"
#include "cuda/three_requests.h"
#include "io/poke.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/cuda/draft.h"
#include "sparkdraft/scenario.h"

namespace sparkdraft {
namespace {

std::shared_ptr<const Checkpoint> make_preset(const std::string& preset, const std::string& style) {
  const char* root = std::getenv("SPARKDRAFT_PRESET_DIR");
  const std::filesystem::path dir =
      std::filesystem::path(root ? root : std::filesystem::temp_directory_path().string()) /
      ("sparkdraft-gpu-test-" + preset + "-" + style);
  if (!std::filesystem::exists(dir / "config.json")) {
    SyntheticOptions so;
    so.seed = 5;
    write_synthetic_checkpoint(preset_config(preset, style), dir.string(), so);
  }
  return std::make_shared<const Checkpoint>(Checkpoint::load(dir.string()));
}

void check_preset(const std::string& preset, const std::string& style, int requests, int rounds,
                  const cuda::CudaDraftOptions& fused = cuda::CudaDraftOptions{}) {
  auto ckpt = make_preset(preset, style);
  ScenarioOptions s;
  s.request_ids.clear();
  for (int r = 0; r < requests; ++r) s.request_ids.push_back(r);
  s.rounds = rounds;
  const CheckReport report = cuda::check_draft(ckpt, s, fused);
  std::printf("%s/%s:\n%s", preset.c_str(), style.c_str(), report.text().c_str());
  EXPECT_TRUE(report.ok()) << report.text();
  EXPECT_EQ(report.mode, "Markov loop fused") << "the fused Markov loop should run on " << preset;
}

// The device API's step (store_context_device, then propose_device) on device arrays, run once
// (which loads the kernels) and captured in one graph on `s`.
cuda::GraphExec device_step_graph(cuda::CudaDraft& dev, const ContextBatch& ctx,
                                  const ProposeBatch& b, const ProposeOutputs& out,
                                  cudaStream_t s) {
  auto step = [&](cudaStream_t st) {
    dev.store_context_device(ctx, st);
    dev.propose_device(b, out, st);
  };
  step(s);
  return cuda::GraphExec(s, step);
}

bool big_presets() {
  const char* v = std::getenv("SPARKDRAFT_BIG_PRESETS");
  return v && std::string(v) == "1";
}

TEST(CudaDraft, TinyQwen3CpuEqualsEagerEqualsFused) {
  SD_REQUIRE_GPU();
  check_preset("tiny", "qwen3", 4, 3);
}

TEST(CudaDraft, TinyMuseCpuEqualsEagerEqualsFused) {
  SD_REQUIRE_GPU();
  check_preset("tiny", "muse", 4, 3);
}

// The fused step with programmatic dependent launch on every kernel (CudaDraftOptions::step_pdl:
// each kernel may start while the one before it runs; the GEMMs request their first stages'
// weights before they wait). The tests above run the default, off.
TEST(CudaDraft, StepPdlCpuEqualsEagerEqualsFused) {
  SD_REQUIRE_GPU();
  cuda::CudaDraftOptions fused;
  fused.step_pdl = true;
  check_preset("tiny", "qwen3", 4, 3, fused);
  check_preset("tiny", "muse", 4, 3, fused);
}

TEST(CudaDraft, Qwen3_8bCpuEqualsEagerEqualsFused) {
  SD_REQUIRE_GPU();
  if (!big_presets())
    GTEST_SKIP() << "set SPARKDRAFT_BIG_PRESETS=1 to run the 4.7 GB qwen3-8b preset";
  check_preset("qwen3-8b", "qwen3", 2, 2);
  cuda::CudaDraftOptions fused;
  fused.step_pdl = true;
  check_preset("qwen3-8b", "qwen3", 2, 2, fused);
}

TEST(CudaDraft, MuseCpuEqualsEagerEqualsFused) {
  SD_REQUIRE_GPU();
  if (!big_presets()) GTEST_SKIP() << "set SPARKDRAFT_BIG_PRESETS=1 to run the 10.6 GB muse preset";
  check_preset("muse", "muse", 2, 2);
}

TEST(CudaDraft, RequestAloneEqualsRequestInBatchOfFiveWithPadding) {
  SD_REQUIRE_GPU();
  for (const std::string style : {"qwen3", "muse"}) {
    auto ckpt = make_preset("tiny", style);
    ScenarioOptions batch;
    batch.request_ids = {0, 1, 2};
    batch.padding_before = {1, 3};
    ScenarioOptions alone;
    alone.request_ids = {2};
    const DraftOptions o = scenario_draft_options(ckpt->config(), batch);
    cuda::CudaDraft a(ckpt, o), b(ckpt, o);
    const auto ra = run_scenario(a, alone);
    const auto rb = run_scenario(b, batch);
    for (size_t round = 0; round < ra.size(); ++round) {
      const RequestDraft& da = ra[round].drafts[0];
      const RequestDraft& db = rb[round].drafts[2];
      ASSERT_EQ(db.request_id, 2);
      EXPECT_EQ(da.tokens, db.tokens) << style << " round " << round;
      EXPECT_TRUE(test::same_bits(da.logits, db.logits))
          << style << " round " << round << ": cache";
    }
  }
}

// The plan names every kernel the captured step runs (cuda/draft/step_kernels.h): after a
// propose at R rows the plan holds "kernels, R rows", checked at capture against the
// graph's kernel nodes (a kernel launched around cuda/common/launch.h would throw), with
// no collective at TP 1; the fused plan's parts appear by their kernels' names.
TEST(CudaDraft, PlanNamesEveryKernelOfTheCapturedStep) {
  SD_REQUIRE_GPU();
  for (const std::string style : {"qwen3", "muse"}) {
    auto ckpt = make_preset("tiny", style);
    ScenarioOptions batch;
    batch.request_ids = {0, 1, 2};
    batch.padding_before = {1};
    const DraftOptions o = scenario_draft_options(ckpt->config(), batch);
    cuda::CudaDraft d(ckpt, o);
    ASSERT_TRUE(d.plan().runs("cuda graph", "on"));
    run_scenario(d, batch);
    const std::string text = d.plan().text();
    std::printf("%s plan:\n%s", style.c_str(), text.c_str());
    int lists = 0;
    for (const PlanPart& k : d.plan().parts) {
      if (k.part.rfind("kernels, ", 0) != 0) continue;
      ++lists;
      EXPECT_GT(std::stoi(k.variant), 2 * ckpt->config().num_layers) << k.variant;
      EXPECT_EQ(k.reason.find("collective"), std::string::npos) << k.reason;
      EXPECT_NE(k.reason.find("markov_fused_step_kernel"), std::string::npos) << k.reason;
      EXPECT_NE(k.reason.find("attention_chunk_kernel"), std::string::npos) << k.reason;
    }
    EXPECT_GE(lists, 1) << "no captured step's kernel list in the plan";
  }
}

// The device API (store_context_device + propose_device on the caller's stream,
// captured together in one CUDA graph after a warm-up call) equals the host API bit
// for bit: every layer's KV cache, the tokens and the draft-logits cache; three
// requests, one of them a padding row, T 0 / 0.7 / 1.
TEST(CudaDraft, DeviceApiInOneGraphEqualsHostApi) {
  SD_REQUIRE_GPU();
  uint64_t seed = 0x5D2000;
  for (const std::string style : {"qwen3", "muse"}) {
    ++seed;
    SCOPED_TRACE(style + " seed " + std::to_string(seed));
    auto ckpt = make_preset("tiny", style);
    const ModelConfig& c = ckpt->config();
    const DraftOptions o = test::ThreeRequests::options();
    cuda::CudaDraftOptions co;
    co.max_context_tokens = test::ThreeRequests::max_context_tokens();
    cuda::CudaDraft host(ckpt, o, co), dev(ckpt, o, co);
    test::Gen gen(seed);

    const test::ThreeRequests in(c, o, gen);  // row 1 is padding
    const size_t n_tokens = static_cast<size_t>(in.R) * c.block_size;
    const size_t n_cache = static_cast<size_t>(o.cache_slots) * c.block_size * c.vocab_size;
    const bf16 junk{0xABAB};

    host.store_context(in.context());
    std::vector<int64_t> want_tokens(n_tokens, -5);
    std::vector<bf16> want_cache(n_cache, junk);
    host.propose(in.batch(), {want_tokens.data(), want_cache.data()});

    cuda::DeviceStream stream;
    const cudaStream_t s = stream.get();
    const test::ThreeRequests::OnDevice d = in.upload(s);
    cuda::DeviceBuffer<bf16> d_cache(std::vector<bf16>(n_cache, junk), s);
    cuda::DeviceBuffer<int64_t> d_tokens(std::vector<int64_t>(n_tokens, -5), s);
    const cuda::GraphExec graph =
        device_step_graph(dev, d.context(), d.batch(), {d_tokens.data(), d_cache.data()}, s);
    graph.launch(s);
    SD_CUDA_CHECK(cudaStreamSynchronize(s));

    for (int l = 0; l < c.num_layers; ++l)
      EXPECT_TRUE(test::same_bits(dev.kv_cache(l), host.kv_cache(l))) << "KV cache, layer " << l;
    EXPECT_TRUE(test::same_bits(d_tokens.download(s), want_tokens, {c.block_size})) << "tokens";
    EXPECT_TRUE(test::same_bits(d_cache.download(s), want_cache, {c.vocab_size}))
        << "draft-logits cache";

    EXPECT_THROW(
        dev.store_context_device(
            {co.max_context_tokens + 1, d.hidden.data(), d.positions.data(), d.slots.data()}, s),
        InvalidArgument);
  }
}

// The Python package's device paths (docs/python.md): a draft on the caller's KV
// caches (DraftOptions::kv_caches, device memory the test owns) and
// propose_device_graphed (the backend's own graph per row count, captured at the first
// call, replayed after; launched directly inside the caller's capture) equal the host
// API of a draft on its own caches bit for bit: tokens, cache and every KV cache.
TEST(CudaDraft, CallersKvCachesAndGraphedProposeEqualHostApi) {
  SD_REQUIRE_GPU();
  const uint64_t seed = 0x5D2100;
  SCOPED_TRACE("seed " + std::to_string(seed));
  auto ckpt = make_preset("tiny", "qwen3");
  const ModelConfig& c = ckpt->config();
  DraftOptions o;
  o.max_reqs = 3;
  o.cache_slots = 4;
  o.num_pages = 16;
  o.max_pages_per_req = 4;
  const size_t kv_elems =
      static_cast<size_t>(o.num_pages) * o.page_size * c.num_kv_heads * 2 * c.head_dim;
  cuda::DeviceStream stream;
  const cudaStream_t s = stream.get();
  std::vector<cuda::DeviceBuffer<bf16>> mine;
  DraftOptions ext = o;
  for (int l = 0; l < c.num_layers; ++l) {
    mine.emplace_back(std::vector<bf16>(kv_elems, bf16{0}), s);
    ext.kv_caches.push_back(mine.back().data());
  }
  cuda::CudaDraft host(ckpt, o), dev(ckpt, ext);
  for (int l = 0; l < c.num_layers; ++l) EXPECT_EQ(dev.kv_cache_data(l), mine[l].data());
  test::Gen gen(seed);
  const test::ThreeRequests in(c, o, gen, 9, {3, 0, -1}, {1.0f, 0.0f, 0.7f});
  const size_t n_tokens = static_cast<size_t>(in.R) * c.block_size;
  const size_t n_cache = static_cast<size_t>(o.cache_slots) * c.block_size * c.vocab_size;
  host.store_context(in.context());
  std::vector<int64_t> want_tokens(n_tokens, -5);
  std::vector<bf16> want_cache(n_cache, bf16{0});
  host.propose(in.batch(), {want_tokens.data(), want_cache.data()});

  const test::ThreeRequests::OnDevice d = in.upload(s);
  cuda::DeviceBuffer<bf16> d_cache(std::vector<bf16>(n_cache, bf16{0}), s);
  cuda::DeviceBuffer<int64_t> d_tokens(std::vector<int64_t>(n_tokens, -5), s);
  dev.store_context_device(d.context(), s);
  const ProposeBatch db = d.batch();
  const ProposeOutputs dout{d_tokens.data(), d_cache.data()};
  auto check = [&](const char* what) {
    SD_CUDA_CHECK(cudaStreamSynchronize(s));
    EXPECT_TRUE(test::same_bits(d_tokens.download(s), want_tokens, {c.block_size})) << what;
    EXPECT_TRUE(test::same_bits(d_cache.download(s), want_cache, {c.vocab_size})) << what;
    d_tokens.upload(std::vector<int64_t>(n_tokens, -5), s);
    d_cache.upload(std::vector<bf16>(n_cache, bf16{0}), s);
  };
  dev.propose_device_graphed(db, dout, s);  // runs directly, captures the graph for 3 rows
  check("first call");
  dev.propose_device_graphed(db, dout, s);  // replays it
  check("replay");
  // Inside the caller's capture the backend launches its kernels into it.
  const cuda::GraphExec outer(s,
                              [&](cudaStream_t st) { dev.propose_device_graphed(db, dout, st); });
  outer.launch(s);
  check("inside the caller's graph");
  for (int l = 0; l < c.num_layers; ++l) {
    EXPECT_TRUE(test::same_bits(dev.kv_cache(l), host.kv_cache(l))) << "KV cache, layer " << l;
    EXPECT_TRUE(test::same_bits(mine[l].download(s), host.kv_cache(l))) << "caller's layer " << l;
  }
  DraftOptions bad = ext;
  bad.kv_caches.pop_back();
  EXPECT_THROW(cuda::CudaDraft(ckpt, bad), InvalidArgument);
  std::vector<bf16> on_host(kv_elems);
  bad = ext;
  bad.kv_caches[0] = on_host.data();
  EXPECT_THROW(cuda::CudaDraft(ckpt, bad), InvalidArgument);
}

// The deferred NaN/inf scan on the device copies (LoadOptions::defer_nonfinite_scan):
// the CUDA backend refuses exactly as the host scan at load does (same exception,
// same message: tensor, file, kind, index, coordinates), for a plain matrix, a piece
// of a packed matrix (k_proj: in QKV and in the stacked context K/V), the last element
// of the Markov w2 and an fp32 tensor; a clean checkpoint builds.
TEST(CudaDraft, DeferredNonFiniteScanOnTheDeviceRefusesLikeTheHost) {
  SD_REQUIRE_GPU();
  struct Poke {
    std::string style, tensor;
    int64_t index;
    bool f32;
    uint32_t bits;
  };
  const Poke pokes[] = {
      {"qwen3", "lm_head.weight", 7 * 64 + 3, false, 0x7fc0},
      {"qwen3", "layers.1.self_attn.k_proj.weight", 100, false, 0x7f80},
      {"qwen3", "markov_head.markov_w2.weight", 999 * 64 + 63, false, 0xff80},
      {"muse", "layers.0.attn_residual.alpha", 17, true, 0x7f800001u},
  };
  for (const Poke& p : pokes) {
    SCOPED_TRACE(p.style + " " + p.tensor);
    const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                      ("sparkdraft-gpu-nonfinite-" + std::to_string(::getpid()));
    std::filesystem::remove_all(dir);
    write_synthetic_checkpoint(preset_config("tiny", p.style), dir.string(), SyntheticOptions{});
    LoadOptions deferred;
    deferred.defer_nonfinite_scan = true;
    {
      auto clean = std::make_shared<const Checkpoint>(Checkpoint::load(dir.string(), deferred));
      EXPECT_NO_THROW(cuda::CudaDraft(clean, DraftOptions{})) << "clean checkpoint";
    }
    const std::string st = (dir / "model.safetensors").string();
    if (p.f32) {
      test::poke_tensor(st, p.tensor, p.index, &p.bits, 4);
    } else {
      const uint16_t b = static_cast<uint16_t>(p.bits);
      test::poke_tensor(st, p.tensor, p.index, &b, 2);
    }
    std::string host_msg, device_msg;
    try {
      Checkpoint::load(dir.string());
    } catch (const NonFiniteWeights& e) {
      host_msg = e.what();
    }
    auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(dir.string(), deferred));
    ASSERT_TRUE(ckpt->nonfinite_scan_pending());
    try {
      cuda::CudaDraft draft(ckpt, DraftOptions{});
    } catch (const NonFiniteWeights& e) {
      device_msg = e.what();
    }
    EXPECT_FALSE(host_msg.empty()) << "the host scan should refuse";
    EXPECT_EQ(device_msg, host_msg);
    EXPECT_NE(device_msg.find("index " + std::to_string(p.index)), std::string::npos) << device_msg;
    std::filesystem::remove_all(dir);
  }
}

// A reduced draft vocabulary (contract.md section 11, preset tiny-d2t: 612 draft ids of
// 1000): the GPU runs it on the eager Markov loop at TP 1 (the fused loop refuses it, and
// the plan says why); CPU == GPU eager == GPU with the fused backbone, bit for bit, on tokens
// (target ids), the V-wide cache rows (-inf outside the map) and every KV cache, in both
// layer styles (muse: with the logit transform). The deferred NaN/inf scan on the device
// passes over the map (int64 ids, not weights).
TEST(CudaDraft, ReducedDraftVocabularyCpuEqualsEagerEqualsFused) {
  SD_REQUIRE_GPU();
  for (const char* style : {"qwen3", "muse"}) {
    SCOPED_TRACE(style);
    auto ckpt = make_preset("tiny-d2t", style);
    ASSERT_TRUE(ckpt->config().reduced_vocab());
    ScenarioOptions s;
    s.request_ids = {0, 1, 2, 3};
    s.rounds = 3;
    const CheckReport report = cuda::check_draft(ckpt, s);
    std::printf("tiny-d2t/%s:\n%s", style, report.text().c_str());
    EXPECT_TRUE(report.ok()) << report.text();
    EXPECT_EQ(report.mode, "Markov loop eager, fused refused");
    cuda::CudaDraft draft(ckpt, DraftOptions{});
    const std::string plan = draft.plan().text();
    EXPECT_NE(plan.find("reduced draft vocabulary (612 of 1000"), std::string::npos) << plan;
  }
  test::TempDir dir;
  write_synthetic_checkpoint(preset_config("tiny-d2t"), dir.path(), SyntheticOptions{});
  LoadOptions deferred;
  deferred.defer_nonfinite_scan = true;
  auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(dir.path(), deferred));
  ASSERT_TRUE(ckpt->nonfinite_scan_pending());
  EXPECT_NO_THROW(cuda::CudaDraft(ckpt, DraftOptions{}));
}

// The fill-in layout (contract.md section 14, preset tiny-fillin: 1 + 7 query slots, a
// speculators-format config.json): CPU == GPU eager == GPU fused (fused fronts, the fused
// Markov loop, the CUDA graph), bit for bit, on tokens, the cache and every KV cache (the
// block's 1 + N slots inserted), both layer styles, a padding row; the plan names the layout.
// Then with the confidence head (fused loop, confidences compared) and with a reduced draft
// vocabulary (the eager loop, as section 11.4 says).
TEST(CudaDraft, FillInLayoutCpuEqualsEagerEqualsFused) {
  SD_REQUIRE_GPU();
  for (const char* style : {"qwen3", "muse"}) {
    SCOPED_TRACE(style);
    auto ckpt = make_preset("tiny-fillin", style);
    ASSERT_FALSE(ckpt->config().sample_from_anchor);
    ScenarioOptions s;
    s.request_ids = {0, 1, 2, 3};
    s.padding_before = {2};
    s.rounds = 3;
    const CheckReport report = cuda::check_draft(ckpt, s);
    std::printf("tiny-fillin/%s:\n%s", style, report.text().c_str());
    EXPECT_TRUE(report.ok()) << report.text();
    EXPECT_EQ(report.mode, "Markov loop fused");
    cuda::CudaDraft draft(ckpt, DraftOptions{});
    EXPECT_TRUE(draft.plan().runs("layout", "fill-in")) << draft.plan().text();
  }
  for (const int variant : {1, 2}) {
    SCOPED_TRACE("variant " + std::to_string(variant));
    test::TempDir dir;
    ModelConfig c = preset_config("tiny-fillin", "muse");
    if (variant == 1) c.confidence_head = c.confidence_head_with_markov = true;
    if (variant == 2) c.draft_vocab_size = 612;
    write_synthetic_checkpoint(c, dir.path(), SyntheticOptions{});
    auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(dir.path()));
    ScenarioOptions s;
    s.request_ids = {0, 1, 2};
    s.padding_before = {1};
    s.rounds = 3;
    const CheckReport report = cuda::check_draft(ckpt, s);
    std::printf("tiny-fillin variant %d:\n%s", variant, report.text().c_str());
    EXPECT_TRUE(report.ok()) << report.text();
    EXPECT_EQ(report.mode, variant == 2 ? "Markov loop eager, fused refused" : "Markov loop fused");
  }
}

// The GPU backend's TP ranks on one device in the fill-in layout (layers and vocabulary
// sharded) give TP 1's bits, every rank's hidden states of the 1 + N slots included.
TEST(CudaDraft, FillInLayoutTpRanksEqualTp1) {
  SD_REQUIRE_GPU();
  auto ckpt = make_preset("tiny-fillin", "qwen3");
  ScenarioOptions s;
  s.request_ids = {0, 1, 2};
  s.padding_before = {1};
  s.rounds = 2;
  for (int tp : {2, 4}) {
    SCOPED_TRACE("tp " + std::to_string(tp));
    const CheckReport report = cuda::check_tp(ckpt, s, tp, {0});
    EXPECT_TRUE(report.ok()) << report.text();
  }
}

// The GPU vocab-parallel loop does not take a reduced vocabulary (contract.md 11.4): TP 2
// is refused by name before any allocation.
TEST(CudaDraft, RefusesAReducedDraftVocabularyAboveTp1) {
  SD_REQUIRE_GPU();
  test::TempDir dir;
  write_synthetic_checkpoint(preset_config("tiny-d2t"), dir.path(), SyntheticOptions{});
  auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(dir.path()));
  DraftOptions o;
  o.max_reqs = 2;
  o.tp = 2;
  test::expect_mentions(
      test::error_of<ConfigError>([&] { cuda::CudaDraft d(ckpt, o, cuda::CudaDraftOptions{}); }),
      {"reduced draft vocabulary", "612", "TP 1 only", "tp 2"});
}

// The top-k Markov loop (contract.md section 12) through the whole job: CPU == GPU eager ==
// GPU fused backbone (the fused Markov loop refuses it, the plan says why), bit for bit:
// tokens, the cache rows (-inf off the candidates) and every KV cache, both layer styles
// (muse: with the logit transform), k = 5 and k = V.
TEST(CudaDraft, TopkMarkovLoopCpuEqualsEagerEqualsFused) {
  SD_REQUIRE_GPU();
  for (const char* style : {"qwen3", "muse"}) {
    // (k, m): the plain top-k loop, k = V, and the union form (m > 0, 12.5).
    for (const auto [k, m] : {std::pair{5, 0}, std::pair{1000, 0}, std::pair{5, 7}}) {
      SCOPED_TRACE(std::string(style) + " k " + std::to_string(k) + " m " + std::to_string(m));
      test::TempDir dir;
      ModelConfig c = preset_config("tiny", style);
      ASSERT_EQ(c.vocab_size, 1000);
      c.markov_topk = k;
      c.markov_bias_topk = m;
      write_synthetic_checkpoint(c, dir.path(), SyntheticOptions{});
      auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(dir.path()));
      ScenarioOptions s;
      s.request_ids = {0, 1, 2, 3};
      s.padding_before = {1};
      s.rounds = 3;
      const CheckReport report = cuda::check_draft(ckpt, s);
      std::printf("tiny %s markov_topk %d markov_bias_topk %d:\n%s", style, k, m,
                  report.text().c_str());
      EXPECT_TRUE(report.ok()) << report.text();
      EXPECT_EQ(report.mode, "Markov loop eager, fused refused");
      cuda::CudaDraft draft(ckpt, DraftOptions{});
      const std::string plan = draft.plan().text();
      EXPECT_NE(plan.find("top-k Markov loop (markov_topk " + std::to_string(k)), std::string::npos)
          << plan;
    }
  }
}

// The GPU vocab-parallel loop does not take the top-k loop (contract.md 12.4): TP 2 is
// refused by name before any allocation.
TEST(CudaDraft, RefusesTheTopkMarkovLoopAboveTp1) {
  SD_REQUIRE_GPU();
  test::TempDir dir;
  ModelConfig c = preset_config("tiny");
  c.markov_topk = 8;
  write_synthetic_checkpoint(c, dir.path(), SyntheticOptions{});
  auto ckpt = std::make_shared<const Checkpoint>(Checkpoint::load(dir.path()));
  DraftOptions o;
  o.max_reqs = 2;
  o.tp = 2;
  test::expect_mentions(
      test::error_of<ConfigError>([&] { cuda::CudaDraft d(ckpt, o, cuda::CudaDraftOptions{}); }),
      {"top-k Markov loop", "markov_topk 8", "TP 1 only", "tp 2"});
}

// Per-request lengths (contract.md 9.5) through `check` on every tiny preset: the scenario's
// odd rounds draft seeded lengths in [0, N] (ScenarioOptions::lengths), and the CPU, the GPU
// eager path and the GPU fused path give the same tokens (-1 past the length), cache rows (not
// written past it), confidences and KV caches.
TEST(CudaDraft, LengthsCpuEqualsEagerEqualsFused) {
  SD_REQUIRE_GPU();
  const std::pair<const char*, const char*> presets[] = {
      {"tiny", "qwen3"},       {"tiny", "muse"},       {"tiny-conf", "qwen3"},
      {"tiny-d2t", "qwen3"},   {"tiny-topk", "qwen3"}, {"tiny-topk-union", "qwen3"},
      {"tiny-gated", "qwen3"}, {"tiny-rnn", "qwen3"},  {"tiny-fillin", "qwen3"}};
  for (const auto& [preset, style] : presets) {
    SCOPED_TRACE(std::string(preset) + "/" + style);
    auto ckpt = make_preset(preset, style);
    ScenarioOptions s;
    s.request_ids = {0, 1, 2, 3, 4};
    s.padding_before = {2};
    s.rounds = 4;
    s.lengths = true;
    const CheckReport report = cuda::check_draft(ckpt, s);
    std::printf("%s/%s with lengths:\n%s", preset, style, report.text().c_str());
    EXPECT_TRUE(report.ok()) << report.text();
  }
}

// The device API's lengths live in device memory: one captured graph replays for any lengths
// (nothing recaptured), a device length past N counts as N and a negative one as 0, and each
// replay equals the host API with the same lengths (tokens, and the cache rows past a length
// keep the caller's junk in both).
TEST(CudaDraft, DeviceLengthsReplayInOneGraphAndEqualTheHostApi) {
  SD_REQUIRE_GPU();
  auto ckpt = make_preset("tiny", "qwen3");
  const ModelConfig& c = ckpt->config();
  const int N = c.block_size;
  const DraftOptions o = test::ThreeRequests::options();
  cuda::CudaDraftOptions co;
  co.max_context_tokens = test::ThreeRequests::max_context_tokens();
  cuda::CudaDraft host(ckpt, o, co), dev(ckpt, o, co);
  test::Gen gen(0x5D2100);
  std::printf("seed 0x5D2100\n");
  const test::ThreeRequests in(c, o, gen);  // row 1 is padding
  const size_t n_tokens = static_cast<size_t>(in.R) * N;
  const size_t n_cache = static_cast<size_t>(o.cache_slots) * N * c.vocab_size;
  const bf16 junk{0xABAB};
  host.store_context(in.context());

  cuda::DeviceStream stream;
  const cudaStream_t s = stream.get();
  const test::ThreeRequests::OnDevice d = in.upload(s);
  cuda::DeviceBuffer<bf16> d_cache(std::vector<bf16>(n_cache, junk), s);
  cuda::DeviceBuffer<int64_t> d_tokens(std::vector<int64_t>(n_tokens, -5), s);
  cuda::DeviceBuffer<int32_t> d_len(std::vector<int32_t>(in.R, N), s);
  ProposeBatch db = d.batch();
  db.lengths = d_len.data();
  const cuda::GraphExec graph =
      device_step_graph(dev, d.context(), db, {d_tokens.data(), d_cache.data()}, s);
  // (device lengths, the host's): rows 0 and 2 are requests, row 1 padding (never read).
  const std::vector<std::pair<std::vector<int32_t>, std::vector<int32_t>>> cases = {
      {{N, 5, N}, {N, 5, N}},
      {{3, 5, 0}, {3, 5, 0}},
      {{99, -8, -3}, {N, 0, 0}},
      {{1, 0, N - 1}, {1, 0, N - 1}}};
  for (const auto& [dl, hl] : cases) {
    SCOPED_TRACE("lengths " + std::to_string(dl[0]) + " " + std::to_string(dl[2]));
    d_len.upload(dl, s);
    d_cache.upload(std::vector<bf16>(n_cache, junk), s);
    d_tokens.upload(std::vector<int64_t>(n_tokens, -5), s);
    graph.launch(s);
    SD_CUDA_CHECK(cudaStreamSynchronize(s));
    std::vector<int64_t> want_tokens(n_tokens, -5);
    std::vector<bf16> want_cache(n_cache, junk);
    ProposeBatch hb = in.batch();
    hb.lengths = hl.data();
    host.propose(hb, {want_tokens.data(), want_cache.data()});
    const std::vector<int64_t> got = d_tokens.download(s);
    for (int r : {0, 2})
      for (int j = 0; j < N; ++j) {
        const size_t i = static_cast<size_t>(r) * N + j;
        EXPECT_EQ(got[i], want_tokens[i]) << "row " << r << " step " << j;
        if (j >= hl[r]) EXPECT_EQ(got[i], -1) << "row " << r << " step " << j << " past the length";
      }
    EXPECT_TRUE(test::same_bits(d_cache.download(s), want_cache, {c.vocab_size}))
        << "draft-logits cache";
  }
}

}  // namespace
}  // namespace sparkdraft
