#!/usr/bin/env bash
# 2026-12-04e run 9: the verifier's three 16-byte row walkers on one split helper (vec_split,
# bf16_lo / bf16_hi; no change to what they compute): the verifier's GPU tests and bench verify.
set -u
RUN=${RUN:-run09}
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
T=./build/sparkdraft_cuda_tests
S=$OUT/${RUN}_summary.txt; : > $S
note() { echo "$*" >> $S; }
t0=$(date +%s)
timeout 250 $T --gtest_filter='*Verif*' > $OUT/verify_tests.log 2>&1
note "verifier tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/verify_tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/verify_tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/verify_tests.log | sort -u | head >> $S
timeout 200 ./build/sparkdraft bench verify --json $OUT/${RUN}_bench_verify.json > $OUT/bench_verify.log 2>&1
note "bench verify: rc $?"; grep -A7 '^V ' $OUT/bench_verify.log >> $S
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log
cat $S
