#!/usr/bin/env bash
# 2026-12-06d run 4 (sitting 18): this tree (F = main's code at 35d3b4b, as in run 3) beside its
# PyTorch peer, asked on an H200 for the README's H200 table. On an H200: `check`, the step
# twice and the peer of both presets; on an H100 (run 3 measured that already) only the step
# twice, to keep the device time.
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash tools/gpu_ab.sh run04 --builds "F" --suite F --filter "CudaAttention*:WgmmaProbe*" \
    --steps "F F" --peer "qwen3-8b muse"
else
  bash tools/gpu_ab.sh run04 --builds "F" --steps "F F"
fi
