#!/usr/bin/env bash
# 2026-12-06g run 4: main at 6403320 (build L, sparkdraft only) beside its PyTorch peer on the
# H100 that run 3 got instead of an H200 (run from the device tool's command line as below).
set -u
bash tools/gpu_ab.sh run04 --builds "L" --steps "L" --peer "qwen3-8b muse"
