#!/usr/bin/env bash
# 2026-12-03b run 10: the reduced-vocabulary loop test with distinct cache slots, then run 9 for muse.
set -u
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp && cp /tmp/sd_tests build/sparkdraft_cuda_tests
./build/sparkdraft_cuda_tests --gtest_filter='MarkovEager.*:*Reduced*' > $OUT/run10_gpu_tests.log 2>&1
echo "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/run10_gpu_tests.log | tail -1) $(grep -cE '^\[  FAILED  \] [A-Za-z]' $OUT/run10_gpu_tests.log) failed" | tee $OUT/run10_summary.txt
bash .carry/run9.sh muse
