#!/usr/bin/env bash
# 2026-12-04 run 2: run 1's tree with the graph introspection fixed (cudaGraphGetEdges
# with edge data: PDL edges carry some), and bench step --pdl on|off in one binary:
#   1. GPU tests (all but the big presets and the speed prints), check bit for bit (tiny,
#      TP 2 fused boundary);
#   2. bench step qwen3-8b rows 1 8 32 with --pdl on, off, on (same session);
#   3. the step's timeline (bench/python/timeline.py), PDL on.
set -u
mkdir -p build build-python
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
tar xJf .carry/py.tar.xz -C build-python
T=./build/sparkdraft_cuda_tests
S=$OUT/run02_summary.txt; : > $S
note() { echo "$*" | tee -a $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a $S
timeout 300 $T --gtest_filter='-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*:AttentionSpeed.*:GemmSpeed.*:*Speed*' > $OUT/gpu_tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/gpu_tests.log | tail -1) $(grep -cE '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log | sort -u | head -20 | tee -a $S
grep -E "^kernels, 4 rows" $OUT/gpu_tests.log | cut -c1-400 | tee -a $S
{ ./build/sparkdraft check --style qwen3 && ./build/sparkdraft check --style muse; } > $OUT/check.log 2>&1
note "check tiny rc $? $(grep 'check:' $OUT/check.log | tr '\n' ' ')"
CUDA_MODULE_LOADING=EAGER ./build/sparkdraft check --tp 2 --devices 0 --tp-reduce fused > $OUT/check_tp2.log 2>&1
note "check tiny tp2 fused rc $? $(grep 'check:' $OUT/check_tp2.log | cut -c1-90)"
for p in on off on2; do
  t1=$(date +%s)
  timeout 200 ./build/sparkdraft bench step --preset qwen3-8b --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
    --pdl ${p%2} --json $OUT/run02_bench_step_pdl_$p.json > $OUT/bench_step_$p.log 2>&1
  note "bench step --pdl $p rc $? ($(( $(date +%s)-t1 ))s)"; grep -A4 '^preset ' $OUT/bench_step_$p.log | tail -3 | tee -a $S
done
t1=$(date +%s)
PYTHONPATH=build-python/pkg-cuda-py312 timeout 240 python3 bench/python/timeline.py --preset qwen3-8b \
  --preset-dir /tmp --rows 1 8 32 --json $OUT/run02_timeline_qwen3-8b.json \
  --md $OUT/run02_timeline_qwen3-8b.md > $OUT/timeline.log 2>&1
note "timeline rc $? ($(( $(date +%s)-t1 ))s)"; tail -5 $OUT/timeline.log | tee -a $S
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log
