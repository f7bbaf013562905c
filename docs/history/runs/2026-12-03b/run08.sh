#!/usr/bin/env bash
# 2026-12-03b run 8: reduced draft vocabularies on the GPU (the eager Markov loop at TP 1).
set -u
mkdir -p build build-python
tar xJf .carry/bin.tar.xz -C /tmp && cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
tar xJf .carry/py.tar.xz -C build-python
S=$OUT/run08_summary.txt; : > $S
note() { echo "$*" | tee -a $S; }
t0=$(date +%s)
./build/sparkdraft_cuda_tests --gtest_filter='-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*' > $OUT/run08_gpu_tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/run08_gpu_tests.log | tail -1) $(grep -cE '^\[  FAILED  \] [A-Za-z]' $OUT/run08_gpu_tests.log) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/run08_gpu_tests.log | sort -u | head -20 | tee -a $S
grep -E '^\[       OK \] .*Reduced' $OUT/run08_gpu_tests.log | tee -a $S
grep -A3 'tiny-d2t/' $OUT/run08_gpu_tests.log | grep 'check:' | tee -a $S
PYTHONPATH=build-python/pkg-cuda-py312 python3 -m pytest -q -rs python/tests > $OUT/run08_pytest.log 2>&1
note "pytest rc $? $(tail -1 $OUT/run08_pytest.log)"
./build/sparkdraft make-checkpoint --preset tiny-d2t --out /tmp/d2t > /dev/null 2>&1
./build/sparkdraft make-checkpoint --preset tiny-d2t --style muse --out /tmp/d2tm > /dev/null 2>&1
{ ./build/sparkdraft check --checkpoint /tmp/d2t && ./build/sparkdraft check --checkpoint /tmp/d2tm && ./build/sparkdraft plan --checkpoint /tmp/d2t; } > $OUT/run08_check_d2t.log 2>&1
note "check tiny-d2t qwen3/muse rc $? $(grep 'check:' $OUT/run08_check_d2t.log | tr '\n' ' ')"
grep -i "markov" $OUT/run08_check_d2t.log | tail -2 | tee -a $S
./build/sparkdraft check --checkpoint /tmp/d2t --tp 2 --devices 0 > $OUT/run08_check_d2t_tp2.log 2>&1
note "check tiny-d2t --tp 2 (expect refusal 3): rc $? $(tail -1 $OUT/run08_check_d2t_tp2.log | cut -c1-200)"
{ ./build/sparkdraft check --style qwen3 && ./build/sparkdraft check --style muse; } > $OUT/run08_check.log 2>&1
note "check tiny rc $? $(grep 'check:' $OUT/run08_check.log | tr '\n' ' ')"
note "total $(( $(date +%s)-t0 ))s"
tar cJf $OUT/run08_logs.tar.xz -C $OUT run08_gpu_tests.log run08_pytest.log run08_check_d2t.log run08_check_d2t_tp2.log run08_check.log
