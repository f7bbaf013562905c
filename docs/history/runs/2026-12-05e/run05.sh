#!/usr/bin/env bash
# 2026-12-05e run 5: this sitting's final code (G = main at 1bfb3e8's code: the first split's
# own fold, the hardware bf16 conversion, the K/V loads from three bases) beside its PyTorch
# peer in one machine session: bench step --spec, bench/peer/peer_step.py (eager, graph,
# torch.compile + graph) for both presets, bench markov --spec, bench verify.
set -u
RUN=${RUN:-run05}
mkdir -p b_G && tar xJf .carry/bin_G.tar.xz -C b_G
B=./b_G/sparkdraft
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> $S 2>&1
timeout 120 $B bench step --spec --timeline --preset-dir /tmp --json $OUT/${RUN}_bench_step.json > $L/bench_step.log 2>&1
note "bench step --spec rc $? ($(( $(date +%s)-t0 ))s)"; grep -A7 '^preset ' $L/bench_step.log | tail -7 >> $S
for P in qwen3-8b muse; do
  t1=$(date +%s)
  timeout 200 python3 bench/peer/peer_step.py --preset $P --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
    --modes eager graph compile --json $OUT/${RUN}_peer_$P.json > $L/peer_$P.log 2>&1
  note "peer $P rc $? ($(( $(date +%s)-t1 ))s)"; tail -5 $L/peer_$P.log | grep -v wrote >> $S
done
timeout 100 $B bench markov --spec --json $OUT/${RUN}_bench_markov.json > $L/bench_markov.log 2>&1
note "bench markov --spec rc $? ($(( $(date +%s)-t0 ))s)"; grep -E '^(V |151936 |202048 )' $L/bench_markov.log | head -7 | cut -c1-110 >> $S
timeout 100 $B bench verify --json $OUT/${RUN}_bench_verify.json > $L/bench_verify.log 2>&1
note "bench verify rc $? ($(( $(date +%s)-t0 ))s)"; grep -A7 '^V ' $L/bench_verify.log | cut -c1-110 >> $S
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
