#!/usr/bin/env bash
# 2026-12-06f run 1 (sitting 20). Two changes in one build, their kernels apart in the timeline:
#   F2s = main's kernels (21d9ba0; sparkdraft only);
#   T3P = main + 88d8923's gemm.cu (o_proj and down from 65 to 192 tokens on three warpgroups'
#         192 rows a CTA of the sliced wide tile, 2026-12-06e run07.sh's T3) + attention's
#         padding rows counted as full (the unmasked scores-to-p form for a tile whose last
#         rows pad it: qwen3-8b's 28 rows); sparkdraft and tests.
# T3P's CudaGemm.*, WgmmaProbe.* and CudaAttention.*, check, then the step at 8 to 32 requests of
# qwen3-8b, F2s T3P F2s T3P ("false, false, 8>": o_proj + down; attention_chunk: attention).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
bash tools/gpu_ab.sh run01 --builds "F2s T3P" --suite T3P --filter "CudaGemm.*:WgmmaProbe.*:CudaAttention.*" \
  --steps "F2s T3P F2s T3P" --step-args "--preset qwen3-8b --ctx 4096 --rows 8 16 24 32" \
  --match "gemm_wg_kernel" "false, false, 8>" "attention_chunk" "attention_combine" "fused_step"
