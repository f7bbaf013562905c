#!/usr/bin/env bash
# 2026-12-06f run 4: attention with the masked scores-to-p form only. Run 1 found the padding rows
# taken as full (so qwen3-8b's second 16-row tile ran the unmasked form too) 6% slower at 24 and 32
# requests; so is the unmasked form itself slower? Builds:
#   T3s = main + 88d8923's gemm.cu (the three-warpgroup sliced tile, landed after run 1; sparkdraft);
#   M3  = T3s + attention's chunk loop always on the masked form (sparkdraft and tests).
# M3's CudaAttention.*, check, then bench step --spec (qwen3-8b and muse, 1 / 8 / 32 requests),
# T3s M3 T3s M3 (attention_chunk, attention_combine).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
bash tools/gpu_ab.sh run04 --builds "T3s M3" --suite M3 --filter "CudaAttention.*" \
  --steps "T3s M3 T3s M3" --step-args "--spec" \
  --match "attention_chunk" "attention_combine" "fused_step" "gemm_wg_kernel"
