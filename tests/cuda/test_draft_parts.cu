// The GPU backend's parts on their own: the workspace (src/cuda/draft/workspace.h: every
// buffer sized once from the config and the options) and the op table's choices
// (src/cuda/draft/cuda_ops.h). The op table's tests launch nothing and run without a GPU;
// the workspace's skip without one.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "cuda/draft/cuda_ops.h"
#include "cuda/draft/workspace.h"
#include "cuda/gpu_test_util.h"
#include "cuda/kernels.h"
#include "runtime/step.h"
#include "sparkdraft/checkpoint.h"
#include "sparkdraft/cuda/buffer.h"
#include "sparkdraft/error.h"
#include "sparkdraft/scenario.h"

namespace sparkdraft {
namespace {

using cuda::CudaOps;
using cuda::DraftWorkspace;
using cuda::WorkspaceShape;

struct Sized {
  ModelConfig c;
  DraftOptions o;
};

Sized tiny(const char* style) {
  Sized s;
  s.c = preset_config("tiny", style);
  ScenarioOptions so;
  so.request_ids = {0, 1, 2};
  s.o = scenario_draft_options(s.c, so);
  return s;
}

TEST(DraftWorkspace, EveryBufferIsSizedOnceFromTheOptions) {
  SD_REQUIRE_GPU();
  for (const char* style : {"qwen3", "muse"}) {
    SCOPED_TRACE(style);
    const Sized s = tiny(style);
    const ModelConfig& c = s.c;
    const DraftOptions& o = s.o;
    const DraftStep step(c, o);
    const int ctx = 37;
    DraftWorkspace ws(c, o, step, WorkspaceShape{c.vocab_size, 1, ctx}, nullptr);
    const int T = o.max_reqs * c.block_size;
    ASSERT_EQ(ws.max_tokens(), T);
    const BlockSizes n = step.block_sizes(T);
    EXPECT_EQ(ws.ids.size(), n.per_token);
    EXPECT_EQ(ws.token_request.size(), n.per_token);
    EXPECT_EQ(ws.kv_lens.size(), static_cast<size_t>(o.max_reqs));
    EXPECT_EQ(ws.x.size(), n.x);
    EXPECT_EQ(ws.h.size(), n.h);
    EXPECT_EQ(ws.qkv_out.size(), n.qkv);
    EXPECT_EQ(ws.attn_out.size(), n.attn);
    EXPECT_EQ(ws.branch.size(), n.branch);
    EXPECT_EQ(ws.gu.size(), n.gu);
    EXPECT_EQ(ws.act.size(), n.act);
    EXPECT_EQ(ws.residual_f32.size(), n.residual_f32);
    EXPECT_EQ(ws.reduce_f32.size(), 0u) << "replicated layers reduce nothing";
    EXPECT_EQ(ws.block.x, ws.x.data());
    EXPECT_EQ(ws.block.h, ws.h.data());
    EXPECT_EQ(ws.base.size(), static_cast<size_t>(T) * c.vocab_size);
    EXPECT_EQ(ws.in_tables.size(), static_cast<size_t>(o.max_reqs) * o.max_pages_per_req);
    EXPECT_EQ(ws.out_tokens.size(), static_cast<size_t>(T));
    // Attention's scratch covers every row count and layer.
    for (int rows = 1; rows <= o.max_reqs; ++rows)
      for (int l = 0; l < c.num_layers; ++l)
        EXPECT_GE(ws.attn_bytes, cuda::attention_workspace_bytes(
                                     step.attention_params(rows, l, ws.in_tables.data(), ws.block)))
            << "rows " << rows << " layer " << l;
    EXPECT_EQ(ws.attn.size(), ws.attn_bytes);
    const ContextSizes cn = step.context_sizes(ctx);
    EXPECT_EQ(ws.dev_ctx_h.size(), cn.h);
    EXPECT_EQ(ws.dev_ctx_normed.size(), cn.normed);
    EXPECT_EQ(ws.dev_ctx_in.size(), cn.layer_in);
    EXPECT_EQ(ws.dev_ctx_kv.size(), cn.kv);
    EXPECT_EQ(ws.device_context().h, ws.dev_ctx_h.data());
    EXPECT_EQ(ws.v_out_tokens.size(), static_cast<size_t>(o.max_reqs) * (c.block_size + 1));
    ASSERT_NE(ws.verify, nullptr);
    // The draft-logits cache is zeroed: every bit pattern 0.
    ASSERT_EQ(ws.cache.size(), static_cast<size_t>(o.cache_slots) * c.block_size * c.vocab_size);
    const std::vector<bf16> cache = ws.cache.download();
    const auto nonzero =
        std::find_if(cache.begin(), cache.end(), [](bf16 v) { return v.bits != 0; });
    EXPECT_EQ(nonzero, cache.end())
        << "cache element " << (nonzero - cache.begin()) << " is not +0";
    // The two grow-on-demand stagings grow and never shrink.
    EXPECT_EQ(ws.ctx_h.size(), 0u);
    const ContextSizes big = step.context_sizes(100);
    ws.reserve_context(big, 100, 64);
    EXPECT_EQ(ws.ctx_hidden.size(), 6400u);
    EXPECT_EQ(ws.ctx_h.size(), big.h);
    EXPECT_EQ(ws.ctx_pos.size(), 100u);
    EXPECT_EQ(ws.host_context().kv, ws.ctx_kv.data());
    ws.reserve_context(step.context_sizes(10), 10, 64);
    EXPECT_EQ(ws.ctx_hidden.size(), 6400u);
    ws.reserve_target(1000);
    ws.reserve_target(10);
    EXPECT_EQ(ws.v_target.size(), 1000u);
  }
}

TEST(DraftWorkspace, ShardedLayersGetTheReduceBuffer) {
  SD_REQUIRE_GPU();
  const Sized s = tiny("qwen3");
  const DraftStep step(s.c, s.o);
  const DraftWorkspace ws(s.c, s.o, step, WorkspaceShape{s.c.vocab_size / 2, 2, 8}, nullptr);
  EXPECT_EQ(ws.reduce_f32.size(), static_cast<size_t>(ws.max_tokens()) * s.c.hidden_size);
  EXPECT_EQ(ws.base.size(), static_cast<size_t>(ws.max_tokens()) * (s.c.vocab_size / 2));
}

TEST(CudaOps, FusedGateUpRunsFrom9To64RowsWhenThePlanSaysSo) {
  CudaOps ops(nullptr, nullptr, 0, nullptr);
  for (int rows : {1, 8, 9, 64, 65, 512}) EXPECT_FALSE(ops.gate_up_fused(rows)) << rows;
  ops.fusion.mlp = true;
  EXPECT_FALSE(ops.gate_up_fused(8));
  EXPECT_TRUE(ops.gate_up_fused(9));
  EXPECT_TRUE(ops.gate_up_fused(64));
  EXPECT_FALSE(ops.gate_up_fused(65));
}

TEST(CudaOps, FrontsFollowTheirOwnPlanParts) {
  CudaOps ops(nullptr, nullptr, 0, nullptr);
  ops::QkvFrontParams query, context;
  query.heads = 4;  // the QKV front; the context front has no query heads
  context.heads = 0;
  ops.fusion.qkv_front = true;
  EXPECT_TRUE(ops.front_fused(query));
  EXPECT_FALSE(ops.front_fused(context));
  ops.fusion = {};
  ops.fusion.context_front = true;
  EXPECT_FALSE(ops.front_fused(query));
  EXPECT_TRUE(ops.front_fused(context));
}

TEST(CudaOps, ShardedGemmAllReduceRefusesWhatItsReduceBufferCannotTake) {
  // Refused before anything is launched: no GPU needed.
  CudaOps ops(nullptr, nullptr, 0, nullptr);
  std::vector<float> reduce(64);
  ops.shard_layers(nullptr, 2, reduce.data(), reduce.size(), nullptr);
  EXPECT_EQ(ops.layer_tp_size(), 2);
  const bf16 dummy{};
  bf16 y{};
  const auto refused = [&](const ops::GemmParams& p, const char* what) {
    try {
      ops.gemm_all_reduce(p);
      ADD_FAILURE() << what << ": not refused";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("gemm_all_reduce"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("at most its reduce buffer's 64 outputs"),
                std::string::npos)
          << e.what();
    }
  };
  refused(ops::gemm_of(&dummy, 16, &dummy, 4, 8, 16, &y, 9), "y_stride 9 != N 8");
  refused(ops::gemm_of(&dummy, 16, &dummy, 8, 9, 16, &y, 9), "72 outputs > 64");
}

}  // namespace
}  // namespace sparkdraft
