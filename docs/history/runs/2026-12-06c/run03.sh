#!/usr/bin/env bash
# 2026-12-06c run 3: P = main fb22589 (wg_n256 on one warpgroup where that fills its waves
# better; sparkdraft only); R = P + o_norm_gate's elementwise pass on all 32 lanes, two
# elements a lane at a time (a head of 64 was 8 lanes x 8 sigmoids in sequence) + its test at
# head dims 13 and 40. R's whole GPU suite and check, the step P R P R, then the PyTorch peer
# of both presets in the same session (the README's tables).
set -u
bash tools/gpu_ab.sh run03 --builds "P R" --suite R --steps "P R P R" --peer "qwen3-8b muse"
