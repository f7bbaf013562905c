#!/usr/bin/env bash
# 2026-12-05d run 6 (asked for an H200; the warm H100 ran it). new7 = main at ed93456 (this sitting's final
# code). The README's H200 figures: bench step --spec and bench verify (defaults); the
# attention and verifier tests and check first.
set -u
RUN=${RUN:-run06}
mkdir -p b_new7 && tar xJf .carry/bin_new7.tar.xz -C b_new7
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
B=./b_new7/sparkdraft
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
timeout 100 ./b_new7/sparkdraft_cuda_tests --gtest_filter='CudaAttention.*:CudaVerify.*' > $L/tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $L/tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
for st in qwen3 muse; do
  timeout 60 $B check --style $st > $L/check_$st.log 2>&1
  note "check tiny $st rc $? $(grep 'check:' $L/check_$st.log | cut -c1-100)"
done
timeout 120 $B bench step --spec --preset-dir /tmp --json $OUT/${RUN}_bench_step_spec.json > $L/bench_step_spec.log 2>&1
note "bench step --spec rc $? ($(( $(date +%s)-t0 ))s)"; grep -A6 'memory clock' $L/bench_step_spec.log | tail -6 >> $S
timeout 100 $B bench verify --json $OUT/${RUN}_bench_verify.json > $L/bench_verify.log 2>&1
note "bench verify rc $? ($(( $(date +%s)-t0 ))s)"; grep -A7 '^V ' $L/bench_verify.log | cut -c1-110 >> $S
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
