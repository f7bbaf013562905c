// The floor of the draft step (bench/step/step_floor.h, contract.md section 7): part by
// part equal to the independent form of tests/common/floor.h (the weights summed
// from the checkpoint's own tensor list) for every preset and both styles and
// several row counts and contexts, and to the bytes worked out by hand for the
// published Qwen3-8B draft shape at ctx 4096 (contract.md section 7, the draft step rows);
// and the step's matrix products and the roofline floor over both measured rates.
#include <gtest/gtest.h>

#include <stdexcept>
#include <string>
#include <vector>

#include "common/floor.h"
#include "sparkdraft/checkpoint.h"
#include "step/step_floor.h"

namespace sparkdraft {
namespace {

// Every part of `got` (its name, value(part)) is the part of `want` of that name, and no
// part is missing.
template <class Part, class Value>
void expect_parts(const std::vector<Part>& got, const test::FloorParts& want, Value value) {
  ASSERT_EQ(got.size(), want.size());
  for (const Part& part : got) {
    ASSERT_EQ(want.count(part.name), 1u) << "unexpected part " << part.name;
    EXPECT_EQ(value(part), want.at(part.name)) << part.name;
  }
}

TEST(StepFloor, EveryPartEqualsTheTensorListForm) {
  for (const std::string& preset : preset_names())
    for (const char* style : {"qwen3", "muse"})
      for (int rows : {1, 3, 32})
        for (int ctx : {1, 40, 4096}) {
          SCOPED_TRACE(preset + "/" + style + " rows " + std::to_string(rows) + " ctx " +
                       std::to_string(ctx));
          const ModelConfig c = preset_config(preset, style);
          const bench::StepFloorBytes got = bench::step_floor_bytes(c, rows, ctx);
          const test::FloorParts want = test::floor_of(c, rows, ctx);
          expect_parts(got.parts, want, [](const bench::FloorPart& p) { return p.bytes; });
          EXPECT_EQ(got.total(), test::total(want));
          // The products, the same way.
          expect_parts(bench::step_floor_flops(c, rows, ctx).parts, test::flops_of(c, rows, ctx),
                       [](const bench::FlopPart& p) { return p.flops; });
        }
}

// H 4096, L 5, 32/8 heads of 128, I 12288, V 151936, markov_rank 256, N 7, QK-norm:
//   per layer 2 B x ((4096 + 2 x 1024) x 4096 + 4096 x 4096 + 2 x 12288 x 4096
//   + 4096 x 12288 + 2 x 4096 + 2 x 128) = 385 892 864, x 5 + the final norm 8192;
//   lm_head 2 x 151936 x 4096; KV 2 x rows x 4103 x 5 x 8 x 2 x 128;
//   w2 2 x 151936 x 256 x 7; logits 2 x rows x 7 x 151936 (base twice, draft once).
TEST(StepFloor, Qwen3_8bAtContext4096ByHand) {
  const ModelConfig c = preset_config("qwen3-8b");
  const bench::StepFloorBytes one = bench::step_floor_bytes(c, 1, 4096);
  const test::FloorParts by_hand = {{"layer_weights", 1929472512.0}, {"lm_head", 1244659712.0},
                                    {"kv_cache", 84029440.0},        {"markov_w2", 544538624.0},
                                    {"base_logits", 4254208.0},      {"draft_logits", 2127104.0}};
  for (const auto& [name, bytes] : by_hand) EXPECT_EQ(one.at(name), bytes) << name;
  EXPECT_EQ(one.total(), 3809081600.0);
  EXPECT_EQ(bench::step_floor_bytes(c, 8, 4096).total(), 4441956864.0);
  EXPECT_EQ(bench::step_floor_bytes(c, 32, 4096).total(), 6611814912.0);
}

// One GPU of TP 2 on the Qwen3-8B draft (its layers shard): per layer the matrices
// 2 B x (6144 x 4096 + 4096 x 4096 + 2 x 12288 x 4096 + 4096 x 12288) / 2 = 192 937 984
// plus the replicated norms 2 B x (2 x 4096 + 2 x 128) = 16 896, x 5 + the final norm
// 8192; lm_head, KV, w2 and the base logits halved; the draft-logits cache whole.
TEST(StepFloor, OneGpuOfTp2ByHand) {
  const ModelConfig c = preset_config("qwen3-8b");
  const bench::StepFloorBytes tp2 = bench::step_floor_bytes(c, 1, 4096, 2);
  const test::FloorParts by_hand = {{"layer_weights", 964782592.0}, {"lm_head", 622329856.0},
                                    {"kv_cache", 42014720.0},       {"markov_w2", 272269312.0},
                                    {"base_logits", 2127104.0},     {"draft_logits", 2127104.0}};
  for (const auto& [name, bytes] : by_hand) EXPECT_EQ(tp2.at(name), bytes) << name;
  EXPECT_EQ(tp2.total(), 1905650688.0);
}

// Where the layers do not split (tiny: 2 KV heads over 4 ranks) every GPU reads all
// of them and the whole KV cache; the vocabulary still shards. A TP that does not
// divide the vocabulary is refused.
TEST(StepFloor, ReplicatedLayersAreReadWholeOnEveryGpu) {
  const ModelConfig c = preset_config("tiny");
  const bench::StepFloorBytes one = bench::step_floor_bytes(c, 3, 40);
  const bench::StepFloorBytes four = bench::step_floor_bytes(c, 3, 40, 4);
  EXPECT_EQ(four.at("layer_weights"), one.at("layer_weights"));
  EXPECT_EQ(four.at("kv_cache"), one.at("kv_cache"));
  EXPECT_EQ(four.at("lm_head"), one.at("lm_head") / 4);
  EXPECT_EQ(four.at("markov_w2"), one.at("markov_w2") / 4);
  EXPECT_EQ(four.at("base_logits"), one.at("base_logits") / 4);
  EXPECT_EQ(four.at("draft_logits"), one.at("draft_logits"));
  EXPECT_THROW(bench::step_floor_bytes(c, 3, 40, 3), std::invalid_argument);
}

// The open Muse Spark draft shape: H 8192, L 5, 128/16 heads of 64, causal windows
// of 2048. At ctx 4096 (kv_len 4103) each layer reads [2049, 4103): 2054 positions,
// so KV is 2 B x rows x 2054 x 5 x 16 x 2 x 64 (about half of the full context).
TEST(StepFloor, MuseWindowCountsOnlyThePositionsRead) {
  const ModelConfig c = preset_config("muse");
  EXPECT_EQ(bench::step_floor_bytes(c, 1, 4096).at("kv_cache"), 2.0 * 2054 * 5 * 16 * 2 * 64);
  EXPECT_EQ(bench::step_floor_bytes(c, 8, 4096).at("kv_cache"), 8 * 2.0 * 2054 * 5 * 16 * 2 * 64);
  // Below the window every position is read.
  EXPECT_EQ(bench::step_floor_bytes(c, 1, 1000).at("kv_cache"), 2.0 * 1007 * 5 * 16 * 2 * 64);
}

// Mixed layers: full layers read the whole context, sliding ones their window.
TEST(StepFloor, MixedLayersCountEachLayersWindow) {
  ModelConfig c = preset_config("tiny", "qwen3");
  c.layer_attention = {{0, false}, {5, true}};
  const int N = c.block_size;
  const double per = 2.0 * c.num_kv_heads * 2 * c.head_dim;
  // ctx 40: layer 0 reads 40 + N, layer 1 [36, 40 + N).
  EXPECT_EQ(bench::step_floor_bytes(c, 3, 40).at("kv_cache"), 3 * per * ((40 + N) + (4 + N)));
  const test::FloorParts want = test::floor_of(c, 3, 40);
  EXPECT_EQ(bench::step_floor_bytes(c, 3, 40).at("kv_cache"), want.at("kv_cache"));
}

// Qwen3-8B draft, 32 requests (224 query tokens), ctx 4096, non-causal layers (every query
// reads all 4103 positions):
//   projections 2 x 224 x 5 x (6144 x 4096 + 4096 x 4096 + 2 x 12288 x 4096 + 4096 x 12288)
//   lm_head 2 x 224 x 151936 x 4096; attention 2 x 2 x 128 x 32 heads x 32 x 7 x 4103 x 5;
//   markov 2 x 32 x 7 x 256 x 151936.
TEST(StepFlops, Qwen3_8bAt32RequestsByHand) {
  const ModelConfig c = preset_config("qwen3-8b");
  const bench::StepFloorFlops f = bench::step_floor_flops(c, 32, 4096);
  EXPECT_EQ(f.at("projections"), 2.0 * 224 * 5 * 192937984);
  EXPECT_EQ(f.at("lm_head"), 2.0 * 224 * 151936 * 4096);
  EXPECT_EQ(f.at("attention"), 2.0 * 2 * 128 * 32 * 32 * 7 * 4103 * 5);
  EXPECT_EQ(f.at("markov"), 2.0 * 32 * 7 * 256 * 151936);
  // One GPU of TP 2: the layers and attention halve (its layers shard), and the vocabulary.
  const bench::StepFloorFlops tp2 = bench::step_floor_flops(c, 32, 4096, 2);
  for (const bench::FlopPart& p : f.parts) EXPECT_EQ(tp2.at(p.name), p.flops / 2) << p.name;
  EXPECT_THROW(bench::step_floor_flops(c, 1, 40, 3), std::invalid_argument);
  EXPECT_THROW(f.at("kv_cache"), std::out_of_range);
}

// The roofline floor takes, part by part, the slower of the bytes over the bandwidth and
// the products over the peak; parts without products (the logits) count their bytes.
TEST(StepFlops, RooflineTakesTheSlowerOfEachPair) {
  bench::StepFloorBytes b;
  b.parts = {{"layer_weights", "", 4e9}, {"kv_cache", "", 8e9}, {"draft_logits", "", 1e9}};
  bench::StepFloorFlops f;
  f.parts = {{"projections", "layer_weights", 2e12}, {"attention", "kv_cache", 1e9}};
  // 1000 GB/s, 1000 TFLOP/s: layer weights 4000 us of bytes, 2000 us of products; KV 8000
  // us against 1 us; logits 1000 us.
  const bench::StepRoofline r = bench::step_roofline(b, f, 1000, 1000);
  EXPECT_EQ(r.bytes_us, 13000.0);
  EXPECT_EQ(r.flops_us, 2001.0);
  EXPECT_EQ(r.floor_us, 13000.0);
  const bench::StepRoofline slow = bench::step_roofline(b, f, 1000, 400);  // products 5000 us
  EXPECT_EQ(slow.floor_us, 5000.0 + 8000 + 1000);
  EXPECT_EQ(slow.parts[0].second, 5000.0);
  EXPECT_THROW(bench::step_roofline(b, f, 0, 1000), std::invalid_argument);
  f.parts.push_back({"markov", "markov_w2", 1e9});  // no bytes part of that name
  EXPECT_THROW(bench::step_roofline(b, f, 1000, 1000), std::out_of_range);
}

}  // namespace
}  // namespace sparkdraft
