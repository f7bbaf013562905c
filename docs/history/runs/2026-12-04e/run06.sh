#!/usr/bin/env bash
# 2026-12-04e run 6: the draft step (the tree of run 5; ctx 4096, rows 1 8 32) and its PyTorch
# peer (bench/peer/peer_step.py: eager, CUDA graph, torch.compile + graph), in one machine
# session: `bash run06.sh qwen3-8b; bash run06.sh muse` (then the logs are tarred).
set -u
P=${1:-qwen3-8b}
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp && cp /tmp/sd_cli build/sparkdraft
mkdir -p $OUT/logs
S=$OUT/run06_summary_$P.txt; : > $S
note() { echo "$*" | tee -a $S; }
t0=$(date +%s)
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" | tee -a $S
timeout 240 ./build/sparkdraft bench step --preset $P --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
  --json $OUT/run06_bench_step_$P.json > $OUT/logs/run06_bench_step_$P.log 2>&1
note "bench step $P rc $? ($(( $(date +%s)-t0 ))s)"; grep -A4 '^preset ' $OUT/logs/run06_bench_step_$P.log | tee -a $S
t1=$(date +%s)
timeout 330 python3 bench/peer/peer_step.py --preset $P --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
  --modes eager graph compile --json $OUT/run06_peer_$P.json > $OUT/logs/run06_peer_$P.log 2>&1
note "peer $P rc $? ($(( $(date +%s)-t1 ))s)"; tail -12 $OUT/logs/run06_peer_$P.log | tee -a $S
note "total $(( $(date +%s)-t0 ))s"
