#!/usr/bin/env bash
# 2026-12-05c run 5 (run 4, an H200 run of both presets, got no machine). new3 = main at c2da0e0, new4 = new3 + the first stages' block-table
# entries and Q requested together before the K/V loads. new4's attention and draft GPU
# tests, check on tiny qwen3, bench step qwen3-8b new3 / new4 at 1 / 8 / 32 requests.
set -u
RUN=${RUN:-run05}
for v in new3 new4; do mkdir -p b_$v; tar xJf .carry/bin${v#new}.tar.xz -C b_$v; done
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
timeout 60 ./b_new4/sparkdraft_cuda_tests --gtest_filter='CudaAttention.*:CudaDraft.*-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*' > $L/tests.log 2>&1
note "tests rc $? $(grep -E '^\[  PASSED  \]' $L/tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | head >> $S
timeout 30 ./b_new4/sparkdraft check --style qwen3 > $L/check_qwen3.log 2>&1
note "check tiny qwen3 rc $? $(grep 'check:' $L/check_qwen3.log | cut -c1-100)"
for v in new3 new4 new3 new4; do
  timeout 60 ./b_$v/sparkdraft bench step --preset qwen3-8b --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
    --json $OUT/${RUN}_bench_step_$v.json > $L/bench_step_$v.log 2>&1
  note "bench step $v rc $? ($(( $(date +%s)-t0 ))s)"; grep -E "^qwen3-8b " $L/bench_step_$v.log >> $S
done
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
