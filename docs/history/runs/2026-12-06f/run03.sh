#!/usr/bin/env bash
# 2026-12-06f run 3: the landed tree (T3s = main + the three-warpgroup sliced tile, sparkdraft only) beside its PyTorch
# peer on an H200, for the README's H200 table and issue 24's ratios (2026-12-06e run05.sh with
# this sitting's build name). On an H100 it stops at once to keep the device time.
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash tools/gpu_ab.sh run03 --builds "T3s" --steps "T3s" --peer "qwen3-8b muse"
else
  nvidia-smi --query-gpu=name --format=csv,noheader
  echo "not an H200: nothing run"
fi
