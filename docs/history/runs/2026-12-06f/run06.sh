#!/usr/bin/env bash
# 2026-12-06f run 6: the landed tree's whole GPU suite and check (T3 = main at ba80a42's kernels +
# the three-warpgroup sliced tile, the kernels of main at f8a7bcf; sparkdraft and tests).
mkdir -p b && tar xJf .carry/bin_T3.tar.xz -C b && (timeout 300 ./b/sparkdraft_cuda_tests > $OUT/suite.log 2>&1; echo "suite rc $?"); grep -E "^\[  PASSED  \]|^\[  FAILED  \]|tests ran" $OUT/suite.log | tail -5; for s in qwen3 muse; do ./b/sparkdraft check --style $s 2>&1 | grep "check:"; done
