#!/usr/bin/env bash
# 2026-12-03b run 9: the draft step (qwen3-8b, ctx 4096, rows 1 8 32) and its PyTorch peer
# (bench/peer/peer_step.py: eager, CUDA graph, torch.compile + graph), in one machine session.
set -u
P=${1:-qwen3-8b}
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp && cp /tmp/sd_cli build/sparkdraft
S=$OUT/run09_summary.txt; : > $S
note() { echo "$*" | tee -a $S; }
t0=$(date +%s)
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a $S
timeout 240 ./build/sparkdraft bench step --preset $P --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
  --json $OUT/run09_bench_step_$P.json > $OUT/run09_bench_step_$P.log 2>&1
note "bench step $P rc $? ($(( $(date +%s)-t0 ))s)"; grep -A4 '^preset ' $OUT/run09_bench_step_$P.log | tee -a $S
t1=$(date +%s)
timeout 330 python3 bench/peer/peer_step.py --preset $P --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
  --modes eager graph compile --json $OUT/run09_peer_$P.json > $OUT/run09_peer_$P.log 2>&1
note "peer $P rc $? ($(( $(date +%s)-t1 ))s)"; tail -12 $OUT/run09_peer_$P.log | tee -a $S
note "total $(( $(date +%s)-t0 ))s"
