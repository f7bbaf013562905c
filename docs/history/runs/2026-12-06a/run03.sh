#!/usr/bin/env bash
# 2026-12-06a run 3: this tree (K of run 1: main at 3f10289's code) beside its PyTorch peer in
# one machine session: bench step --spec, then bench/peer/peer_step.py (eager, graph,
# torch.compile + graph) for both presets (2026-12-05e run 5's commands).
set -u
RUN=${RUN:-run03}
mkdir -p b_K && tar xJf .carry/bin_K.tar.xz -C b_K
B=./b_K/sparkdraft
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)" >> $S 2>&1
timeout 120 $B bench step --spec --preset-dir /tmp --json $OUT/${RUN}_bench_step.json > $L/bench_step.log 2>&1
note "bench step --spec rc $? ($(( $(date +%s)-t0 ))s)"; grep -A7 '^preset ' $L/bench_step.log | tail -7 >> $S
for P in qwen3-8b muse; do
  t1=$(date +%s)
  timeout 200 python3 bench/peer/peer_step.py --preset $P --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
    --modes eager graph compile --json $OUT/${RUN}_peer_$P.json > $L/peer_$P.log 2>&1
  note "peer $P rc $? ($(( $(date +%s)-t1 ))s)"; tail -5 $L/peer_$P.log | grep -v wrote >> $S
done
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
