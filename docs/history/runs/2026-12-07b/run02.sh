#!/usr/bin/env bash
# 2026-12-07b run 2 (sitting 25, the H100 of run 1 still warm, about 200 s of device time
# left). Carry .carry/bin_M.tar.xz (main at e11e9ea) and .carry/bin_P.tar.xz (branch attn-pipe,
# 44bc2d2 = main + attn-pipe.patch of this folder: the pipelined chunk loop and
# exp_fast_try_n, without run 1's Q from shared memory; sparkdraft and the GPU tests). P's
# attention tests and check; the step P M P.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
bash tools/gpu_ab.sh run02 --builds "M P" --suite P --filter "CudaAttention*:AttentionSpeed*" \
  --steps "P M P" --match attention_chunk attention_combine >/dev/null
tar xJOf "$OUT/run02_logs.tar.xz" logs/tests.log | grep -E '^\[attention speed\].*pick'
cat "$OUT/run02_summary.txt"
