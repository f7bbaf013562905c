#!/usr/bin/env bash
# 2026-12-05c run 4 (on whatever card comes; the summary names it): bench step for
# qwen3-8b and muse at 1 / 8 / 32 requests, main before this sitting (bin_old =
# 56b981b's code) against main after it (bin3 = c2da0e0's code), in one machine session.
set -u
RUN=${RUN:-run04}
mkdir -p b_old b_new3
tar xJf .carry/bin_old.tar.xz -C b_old
tar xJf .carry/bin3.tar.xz -C b_new3
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
for preset in qwen3-8b muse; do
  for v in old new3; do
    timeout 150 ./b_$v/sparkdraft bench step --preset $preset --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
      --json $OUT/${RUN}_bench_step_${preset}_$v.json > $L/bench_step_${preset}_$v.log 2>&1
    note "bench step $preset $v rc $? ($(( $(date +%s)-t0 ))s)"; grep -E "^$preset " $L/bench_step_${preset}_$v.log >> $S
  done
done
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
