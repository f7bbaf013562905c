#!/usr/bin/env bash
# 2026-12-06e run 7 (written in sitting 19, not run: the device time was spent). o_proj and down
# from 65 to 192 tokens (10 to 27 requests of 7) on three warpgroups' 192 rows a CTA of the sliced
# wide tile (`88d8923`, reverted by `686e753`): 176 CTAs at qwen3-8b's N 4096 (two waves of the 15 clusters an H100 holds)
# instead of 256 (three). Builds (docs/CONTRIBUTING.md "Binaries carried to the GPU"; packed in
# .carry/ where this checkout keeps them):
#   F2 = main's kernels (sparkdraft and tests; packed at ba80a42, the same kernels);
#   T3 = main + `git revert 686e753` (sparkdraft and tests).
# T3's CudaGemm.* (SlicedWideTileEqualsCpu runs M 65 .. 192 on it: whole and partial 192-row
# blocks) and WgmmaProbe.*, check, then the step at 12 / 16 / 20 / 24 / 27 requests of qwen3-8b,
# F2 T3 F2 T3 (o_proj + down: "false, false, 8>").
set -u
bash tools/gpu_ab.sh run07 --builds "F2 T3" --suite T3 --filter "CudaGemm.*:WgmmaProbe.*" \
  --steps "F2 T3 F2 T3" --step-args "--preset qwen3-8b --ctx 4096 --rows 12 16 20 24 27" \
  --match "gemm_wg_kernel" "false, false, 8>" "attention_chunk" "fused_step"
