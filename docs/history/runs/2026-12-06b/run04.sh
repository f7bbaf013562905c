#!/usr/bin/env bash
# 2026-12-06b run 4 (written, not run: no device time left): M = main at the end of the
# sitting (the fast silu and sigmoid, qkv on the one-warpgroup wide tile) on the H200: its
# whole GPU suite and check, then the step beside its PyTorch peer in the same session,
# for the README's tables (the last H200 figures are 2026-12-06a run 3's, the tree before).
set -u
bash tools/gpu_ab.sh run04 --builds M --suite M --steps M --peer "qwen3-8b muse"
