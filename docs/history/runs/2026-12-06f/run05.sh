#!/usr/bin/env bash
# 2026-12-06f run 5: the tree as landed (T3s = main + the three-warpgroup sliced tile) beside its
# PyTorch peer (eager, CUDA graph, torch.compile + graph) in one machine session, on whatever card
# came (an H100 this sitting: the H200 was not lent).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
bash tools/gpu_ab.sh run05 --builds "T3s" --steps "T3s" --peer "qwen3-8b muse"
