#!/usr/bin/env bash
# 2026-12-06h run 2: W3 = run 1's W with the early weights only under programmatic dependent
# launch (Args::early_weights, from the step's PdlScope; without it every kernel keeps its old
# order: run 1's W issued them in every launch and was 0.7-1.2% slower with --step-pdl off), and
# CudaDraftOptions::step_pdl on by default (check's eager side without it). L = main at 6403320
# (step_pdl off by default). W3's whole GPU suite and check; the step with each build's default
# (L W3 L W3) and the PyTorch peer in the same session, then W3 with --step-pdl off (its
# kernels' old order: L's time).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
bash tools/gpu_ab.sh run02 --builds "L W3" --suite W3 --steps "L W3 L W3" --peer "qwen3-8b muse"
bash tools/gpu_ab.sh run02off --builds "W3" --steps "W3" --step-args "--spec --step-pdl off"
cat "$OUT/run02_summary.txt"
