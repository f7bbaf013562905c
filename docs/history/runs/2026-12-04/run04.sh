#!/usr/bin/env bash
# 2026-12-04 run 4: the merged tree (the fused Markov loop's exact slot cut; the top-k Markov
# loop on the GPU eager path; the plan's kernel list), on the H200:
#   1. every GPU test but the big presets and the speed prints; check bit for bit (tiny
#      qwen3 and muse, TP 2 fused boundary, tiny-topk qwen3 and muse); pytest;
#   2. bench markov --spec, uniform logits, this tree and the tree before the slot cut
#      (run 1's sd_cli0), then the trained-logits profile at T 1 and 0.5;
#   3. bench step qwen3-8b rows 1 8 32 (the README's figures).
set -u
mkdir -p build build-python
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
tar xJf .carry/py.tar.xz -C build-python
T=./build/sparkdraft_cuda_tests
S=$OUT/run04_summary.txt; : > $S
note() { echo "$*" | tee -a $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a $S
timeout 300 $T --gtest_filter='-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*:*Speed*' > $OUT/gpu_tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/gpu_tests.log | tail -1) $(grep -cE '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log | sort -u | head -20 | tee -a $S
grep -E '^\[       OK \] (MarkovFused.SlotCut|MarkovEager.Topk|CudaDraft.Topk|CudaDraft.PlanNames)' $OUT/gpu_tests.log | tee -a $S
{ ./build/sparkdraft check --style qwen3 && ./build/sparkdraft check --style muse; } > $OUT/check.log 2>&1
note "check tiny rc $? $(grep 'check:' $OUT/check.log | tr '\n' ' ')"
CUDA_MODULE_LOADING=EAGER ./build/sparkdraft check --tp 2 --devices 0 --tp-reduce fused > $OUT/check_tp2.log 2>&1
note "check tiny tp2 fused rc $? $(grep 'check:' $OUT/check_tp2.log | cut -c1-90)"
for st in qwen3 muse; do
  ./build/sparkdraft make-checkpoint --preset tiny-topk --style $st --out /tmp/topk-$st > /dev/null 2>&1
  ./build/sparkdraft check --checkpoint /tmp/topk-$st > $OUT/check_topk_$st.log 2>&1
  note "check tiny-topk $st rc $? $(grep 'check:' $OUT/check_topk_$st.log | cut -c1-120)"
done
PYTHONPATH=build-python/pkg-cuda-py312 timeout 240 python3 -m pytest -q -rs python/tests > $OUT/pytest.log 2>&1
note "pytest rc $? $(tail -1 $OUT/pytest.log)"
grep -E "FAILED|Error" $OUT/pytest.log | head -5 | tee -a $S
t1=$(date +%s)
timeout 200 /tmp/sd_cli0 bench markov --spec --json $OUT/run04_bench_markov_uniform_before.json > $OUT/markov_before.log 2>&1
note "bench markov uniform, before the cut rc $? ($(( $(date +%s)-t1 ))s)"; tail -8 $OUT/markov_before.log | tee -a $S
for lg in uniform trained; do
  t1=$(date +%s)
  timeout 200 ./build/sparkdraft bench markov --spec --logits $lg --json $OUT/run04_bench_markov_$lg.json > $OUT/markov_$lg.log 2>&1
  note "bench markov $lg rc $? ($(( $(date +%s)-t1 ))s)"; tail -8 $OUT/markov_$lg.log | tee -a $S
done
t1=$(date +%s)
timeout 200 ./build/sparkdraft bench step --preset qwen3-8b --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
  --json $OUT/run04_bench_step_qwen3-8b.json > $OUT/bench_step.log 2>&1
note "bench step rc $? ($(( $(date +%s)-t1 ))s)"; tail -5 $OUT/bench_step.log | tee -a $S
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log
