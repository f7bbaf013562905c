#!/usr/bin/env bash
# 2026-12-06a run 3: this tree (K of run 1: main at 3f10289's code) beside its PyTorch peer in
# one machine session: bench step --spec --timeline, then bench/peer/peer_step.py (eager,
# graph, torch.compile + graph) for both presets (tools/gpu_ab.sh --peer).
set -u
bash tools/gpu_ab.sh run03 --builds K --steps K --peer "qwen3-8b muse"
