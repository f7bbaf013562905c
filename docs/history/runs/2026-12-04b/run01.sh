#!/usr/bin/env bash
# 2026-12-04b run 1: the union form of the top-k Markov loop, bench markov --topk, the
# confidence calibration (STS), the scheduled SpecDecoder, on the H200:
#   1. every GPU test but the big presets and the speed prints; check bit for bit (tiny qwen3
#      and muse, tiny-topk-union qwen3 and muse); pytest on the CUDA package;
#   2. bench markov --spec --topk 16 (uniform and trained logits) and --topk 256 (uniform).
set -u
mkdir -p build build-python
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
tar xJf .carry/py.tar.xz -C build-python
T=./build/sparkdraft_cuda_tests
S=$OUT/run01_summary.txt; : > $S
note() { echo "$*" | tee -a $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a $S
timeout 300 $T --gtest_filter='-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*:*Speed*' > $OUT/gpu_tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/gpu_tests.log | tail -1) $(grep -cE '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log | sort -u | head -20 | tee -a $S
grep -E '^\[       OK \] (MarkovEager.Topk|CudaDraft.Topk|BenchMarkov|CudaConfidence)' $OUT/gpu_tests.log | tee -a $S
{ ./build/sparkdraft check --style qwen3 && ./build/sparkdraft check --style muse; } > $OUT/check.log 2>&1
note "check tiny rc $? $(grep 'check:' $OUT/check.log | tr '\n' ' ' | cut -c1-200)"
for st in qwen3 muse; do
  ./build/sparkdraft make-checkpoint --preset tiny-topk-union --style $st --out /tmp/union-$st > /dev/null 2>&1
  ./build/sparkdraft check --checkpoint /tmp/union-$st > $OUT/check_union_$st.log 2>&1
  note "check tiny-topk-union $st rc $? $(grep 'check:' $OUT/check_union_$st.log | cut -c1-120)"
done
PYTHONPATH=build-python/pkg-cuda-py312 timeout 300 python3 -m pytest -q -rs python/tests > $OUT/pytest.log 2>&1
note "pytest rc $? $(tail -1 $OUT/pytest.log)"
grep -E "^FAILED|Error" $OUT/pytest.log | head -8 | tee -a $S
for lg in uniform trained; do
  t1=$(date +%s)
  timeout 240 ./build/sparkdraft bench markov --spec --topk 16 --logits $lg --json $OUT/run01_bench_markov_topk16_$lg.json > $OUT/markov_$lg.log 2>&1
  note "bench markov --topk 16 $lg rc $? ($(( $(date +%s)-t1 ))s)"; tail -9 $OUT/markov_$lg.log | tee -a $S
done
t1=$(date +%s)
timeout 240 ./build/sparkdraft bench markov --spec --topk 256 --json $OUT/run01_bench_markov_topk256_uniform.json > $OUT/markov_256.log 2>&1
note "bench markov --topk 256 uniform rc $? ($(( $(date +%s)-t1 ))s)"; tail -9 $OUT/markov_256.log | tee -a $S
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log
