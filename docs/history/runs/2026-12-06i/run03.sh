#!/usr/bin/env bash
# 2026-12-06i run 3 (sitting 23). Carry .carry/bin_A2t.tar.xz: main with attention's scores
# without the per-step test (run 2's A2, the code as landed) and the GPU tests: the attention,
# draft and bench tests, then check on tiny qwen3 and muse.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
bash tools/gpu_ab.sh run03 --builds "A2t" --suite A2t \
  --filter 'CudaAttention*:CudaDraft.*:BenchStep.*:CudaTp.*'
