#!/usr/bin/env bash
# 2026-12-07c run 1 (sitting 26). Carry .carry/bin_M.tar.xz: main at 197dde5 (device code of
# e5bb815: attention's scores without their per-step test, never yet run on an H200), sparkdraft
# and the GPU tests. The H200 refresh: the whole GPU suite and check, the step twice (--spec,
# with the roofline floor) and the PyTorch peer in one session, then the Markov loop and the
# verifier benches (each under a time limit, so the step's figures come back whatever happens).
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
bash tools/gpu_ab.sh run01 --builds "M" --suite M --steps "M M" --peer "qwen3-8b muse"
b=b_M/sparkdraft
[[ -x $b ]] || { mkdir -p b_M && tar xJf .carry/bin_M.tar.xz -C b_M; }
timeout 150 $b bench markov --spec --json "$OUT/run01_markov.json" > "$OUT/run01_markov.txt" 2>&1
echo "bench markov rc $?"
timeout 120 $b bench verify --json "$OUT/run01_verify.json" > "$OUT/run01_verify.txt" 2>&1
echo "bench verify rc $?"
tail -12 "$OUT/run01_markov.txt"; tail -10 "$OUT/run01_verify.txt"
