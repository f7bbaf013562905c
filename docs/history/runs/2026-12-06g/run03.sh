#!/usr/bin/env bash
# 2026-12-06g run 3: main at 6403320 (build L: 5a458ab + the combine's early o_c loads,
# sparkdraft only) beside its PyTorch peer on an H200, for the README's H200 table and issue
# 24's ratios. On an H100 it stops at once to keep the device time.
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  bash tools/gpu_ab.sh run03 --builds "L" --steps "L" --peer "qwen3-8b muse"
else
  nvidia-smi --query-gpu=name --format=csv,noheader
  echo "not an H200: nothing run"
fi
