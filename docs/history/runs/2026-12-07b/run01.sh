#!/usr/bin/env bash
# 2026-12-07b run 1 (sitting 25; about 440 s of device time were left after the refused starts,
# so this short form ran, on an H100). Carry .carry/bin_M.tar.xz (main at e11e9ea, sparkdraft)
# and .carry/bin_Qs.tar.xz (branch attn-qs, 0561295: main + attn-pipe.patch + attn-qs.patch of
# this folder: attention's chunk loop pipelined by one chunk, a lane's eight exps step by step
# (exp_fast_try_n), Q's fragments from shared memory at every k step; sparkdraft and the GPU
# tests). Qs's GPU tests of attention, the fast math (CudaFastMath.ExpOfEightEqualsEightExps-
# OnEveryFloat among them), the draft step and bench step; check; the step M Qs M Qs with the
# timeline.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
bash tools/gpu_ab.sh run01 --builds "M Qs" --suite Qs \
  --filter "*ttention*:CudaFastMath*:CudaDraft*:BenchStep*" --steps "M Qs M Qs" \
  --match attention_chunk attention_combine gemm_wg fused_step residual_boundary >/dev/null
tar xJOf "$OUT/run01_logs.tar.xz" logs/tests.log | grep -E '^\[attention speed\].*pick|^\[fast'
cat "$OUT/run01_summary.txt"
