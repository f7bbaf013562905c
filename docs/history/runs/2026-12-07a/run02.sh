#!/usr/bin/env bash
# 2026-12-07a run 2 (sitting 24; cut to fit the device time left after failed starts).
# Carry .carry/bin_M24s.tar.xz (main at 6fe3596, sparkdraft) and .carry/bin_P2.tar.xz (branch
# attn-pipe at b909d32, with the GPU tests): the attention chunk loop pipelined by one chunk
# (chunk c + 1's scores issued after chunk c's CTA barrier, which also takes the tile's sum
# exchange: two barriers a chunk instead of three; head dim 256 on three stages) and the
# chunk's eight exps written step by step across them (exp_fast_try_n). P2's exp-of-eight,
# attention and attention-speed tests and check; the step M24 P2 M24.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader | head -1
bash tools/gpu_ab.sh run02 --builds "M24s P2" --suite P2 \
  --filter 'CudaFastMath.ExpOfEight*:CudaAttention*:AttentionSpeed.Published*' \
  --steps "M24s P2 M24s" \
  --match attention_chunk attention_combine gemm_wg fused_step residual_boundary >/dev/null
tar xJOf "$OUT/run02_logs.tar.xz" logs/tests.log | grep -E '^\[attention speed\].*pick|^\[fast'
cat "$OUT/run02_summary.txt"
