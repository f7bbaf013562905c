#!/usr/bin/env bash
# 2026-12-06d run 1 (sitting 18). Builds (docs/CONTRIBUTING.md "Binaries carried to the GPU"):
#   B  = main at af79c1f (the attention changes of 2026-12-06c run 5 landed:
#        71ea235, 849c748), sparkdraft only;
#   Y1 = B + 2178021: the 128-token wg tiles on one m64n128k16 a k16 step (o_proj and down at 224 tokens:
#        <2, 128, groups, halves 2>), sparkdraft only;
#   Y  = Y1 + cc974b8: attention's K and V under an evict-first L2 policy and the combine's partials by
#        streaming loads (sparkdraft and sparkdraft_cuda_tests).
# Y's whole GPU suite (WgmmaProbe with the m64n128k16 shapes, the GEMM sweep, CudaAttention at
# every split) and check, then the step B Y1 Y B Y1 Y: the timeline separates o_proj / down
# (gemm_wg_kernel<2, 128, false, true, 2> at 32 requests) and attention_chunk / combine at 8.
set -u
bash tools/gpu_ab.sh run01 --builds "B Y1 Y" --suite Y --steps "B Y1 Y B Y1 Y"
