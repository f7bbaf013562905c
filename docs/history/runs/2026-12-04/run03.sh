#!/usr/bin/env bash
# 2026-12-04 run 3: the step's L2 hints (ops/prefetch.h: attention prefetches o_proj's
# weights, each residual boundary the next GEMM's) A/B in one session, with the tests:
#   1. GPU tests (all but the big presets and the speed prints), check bit for bit;
#   2. bench step qwen3-8b rows 1 8 32 with --l2-prefetch on, off, on;
#   3. the step's timeline with the defaults (PDL in the Markov loop only).
set -u
mkdir -p build build-python
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
tar xJf .carry/py.tar.xz -C build-python
T=./build/sparkdraft_cuda_tests
S=$OUT/run03_summary.txt; : > $S
note() { echo "$*" | tee -a $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a $S
timeout 300 $T --gtest_filter='-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*:*Speed*' > $OUT/gpu_tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/gpu_tests.log | tail -1) $(grep -cE '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log | sort -u | head -20 | tee -a $S
{ ./build/sparkdraft check --style qwen3 && ./build/sparkdraft check --style muse; } > $OUT/check.log 2>&1
note "check tiny rc $? $(grep 'check:' $OUT/check.log | tr '\n' ' ')"
CUDA_MODULE_LOADING=EAGER ./build/sparkdraft check --tp 2 --devices 0 --tp-reduce fused > $OUT/check_tp2.log 2>&1
note "check tiny tp2 fused rc $? $(grep 'check:' $OUT/check_tp2.log | cut -c1-90)"
if [ -f .carry/extra.sh ]; then bash .carry/extra.sh; fi
for p in on off on2; do
  t1=$(date +%s)
  timeout 200 ./build/sparkdraft bench step --preset qwen3-8b --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
    --l2-prefetch ${p%2} --json $OUT/run03_bench_step_l2_$p.json > $OUT/bench_step_$p.log 2>&1
  note "bench step --l2-prefetch $p rc $? ($(( $(date +%s)-t1 ))s)"; grep -A4 '^preset ' $OUT/bench_step_$p.log | tail -3 | tee -a $S
done
t1=$(date +%s)
PYTHONPATH=build-python/pkg-cuda-py312 timeout 240 python3 bench/python/timeline.py --preset qwen3-8b \
  --preset-dir /tmp --rows 1 8 32 --json $OUT/run03_timeline_qwen3-8b.json \
  --md $OUT/run03_timeline_qwen3-8b.md > $OUT/timeline.log 2>&1
note "timeline rc $? ($(( $(date +%s)-t1 ))s)"; tail -5 $OUT/timeline.log | tee -a $S
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log
