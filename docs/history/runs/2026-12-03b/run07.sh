#!/usr/bin/env bash
# 2026-12-03b run 7: the final tree on the H200.
set -u
mkdir -p build build-python
tar xJf .carry/bin.tar.xz -C /tmp && cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
tar xJf .carry/py.tar.xz -C build-python
S=$OUT/run07_summary.txt; : > $S
note() { echo "$*" | tee -a $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm --format=csv,noheader >> $S
./build/sparkdraft_cuda_tests --gtest_filter='-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*' > $OUT/run07_gpu_tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/run07_gpu_tests.log | tail -1) $(grep -cE '^\[  FAILED  \] [A-Za-z]' $OUT/run07_gpu_tests.log) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/run07_gpu_tests.log | sort -u | head -20 | tee -a $S
grep -E '^\[       OK \] (CudaVerify.EqualsCpuWithPerRowLengths|CudaDraft.RefusesAReducedDraftVocabulary)' $OUT/run07_gpu_tests.log | tee -a $S
PYTHONPATH=build-python/pkg-cuda-py312 python3 -m pytest -q -rs python/tests > $OUT/run07_pytest.log 2>&1
note "pytest rc $? $(tail -1 $OUT/run07_pytest.log)"
{ ./build/sparkdraft check --style qwen3 && ./build/sparkdraft check --style muse; } > $OUT/run07_check.log 2>&1
note "check tiny rc $? $(grep 'check:' $OUT/run07_check.log | tr '\n' ' ')"
./build/sparkdraft make-checkpoint --preset tiny-conf --out /tmp/conf > /dev/null 2>&1
{ ./build/sparkdraft check --checkpoint /tmp/conf && ./build/sparkdraft check --checkpoint /tmp/conf --tp 2 --devices 0; } > $OUT/run07_check_conf.log 2>&1
note "check tiny-conf rc $? $(grep 'check:' $OUT/run07_check_conf.log | cut -c1-90 | tr '\n' ' ')"
CUDA_MODULE_LOADING=EAGER ./build/sparkdraft check --tp 2 --devices 0 --tp-reduce fused > $OUT/run07_check_tp2.log 2>&1
note "check tiny tp2 fused rc $? $(grep 'check:' $OUT/run07_check_tp2.log | cut -c1-90)"
./build/sparkdraft make-checkpoint --preset tiny-d2t --out /tmp/d2t > /dev/null 2>&1
./build/sparkdraft check --checkpoint /tmp/d2t > $OUT/run07_check_d2t.log 2>&1
note "check tiny-d2t on the GPU (expect refusal, 3): rc $? $(tail -1 $OUT/run07_check_d2t.log | cut -c1-160)"
./build/sparkdraft demo --backend cuda > $OUT/run07_demo.log 2>&1
note "demo rc $? $(grep 'mean accepted' $OUT/run07_demo.log)"
./build/sparkdraft bench verify --json $OUT/run07_bench_verify.json > $OUT/run07_bench_verify.log 2>&1
note "bench verify rc $?"; grep -E '^(V |[0-9])' $OUT/run07_bench_verify.log | tee -a $S
note "total $(( $(date +%s)-t0 ))s"
