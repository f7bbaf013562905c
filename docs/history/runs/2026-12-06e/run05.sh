#!/usr/bin/env bash
# 2026-12-06e run 5: this tree (F = main at 97e2860: the sliced wide tile, sparkdraft only) beside
# its PyTorch peer on an H200, for the README's H200 table and issue 24's ratios. On an H100
# (runs 1-4 measured it there) it stops at once to keep the device time.
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash tools/gpu_ab.sh run05 --builds "F" --steps "F" --peer "qwen3-8b muse"
else
  nvidia-smi --query-gpu=name --format=csv,noheader
  echo "not an H200: nothing run"
fi
