#!/usr/bin/env bash
# 2026-12-04c run 9: the GPU Markov tests after their device rows moved into one helper
# (tests/cuda/device_markov_rows.h): the same assertions.
set -u
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_tests build/sparkdraft_cuda_tests
timeout 200 ./build/sparkdraft_cuda_tests --gtest_filter='Markov*:*Head*' > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/gpu_tests.log | tail -1) $(grep -cE '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log) failed" | tee $OUT/run09_summary.txt
grep -E '^\[       OK \]|^\[  FAILED' $OUT/gpu_tests.log | tee -a $OUT/run09_summary.txt
