#!/usr/bin/env bash
# 2026-12-04b run 5: the merged tree (the gated and RNN Markov heads, the fill-in layout and
# speculators configs, the top-k union form, the top-k candidates over slices, STS), on the H200:
#   1. every GPU test but the big presets and the speed prints; check bit for bit on every tiny
#      preset (qwen3 and muse styles); pytest on the CUDA package;
#   2. bench markov --spec --topk 16 (uniform and trained logits);
#   3. bench step qwen3-8b rows 1 8 32 (no regression of the default path).
set -u
mkdir -p build build-python
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
tar xJf .carry/py.tar.xz -C build-python
T=./build/sparkdraft_cuda_tests
S=$OUT/run05_summary.txt; : > $S
note() { echo "$*" | tee -a $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a $S
timeout 300 $T --gtest_filter='-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*:*Speed*' > $OUT/gpu_tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/gpu_tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log | sort -u | head -20 | tee -a $S
grep -E '^\[       OK \] (MarkovEager|CudaDraft\.(Topk|Markov|Fill|Refuses)|BenchMarkov|CudaConfidence|.*Fill)' $OUT/gpu_tests.log | tee -a $S
for preset in tiny tiny-conf tiny-topk tiny-topk-union tiny-gated tiny-rnn tiny-fillin; do
  for st in qwen3 muse; do
    rm -rf /tmp/ck && ./build/sparkdraft make-checkpoint --preset $preset --style $st --out /tmp/ck > /dev/null 2>&1
    ./build/sparkdraft check --checkpoint /tmp/ck > $OUT/check_${preset}_$st.log 2>&1
    note "check $preset $st rc $? $(grep 'check:' $OUT/check_${preset}_$st.log | cut -c1-110)"
  done
done
PYTHONPATH=build-python/pkg-cuda-py312 timeout 300 python3 -m pytest -q -rs python/tests > $OUT/pytest.log 2>&1
note "pytest rc $? $(tail -1 $OUT/pytest.log)"
grep -E "^FAILED|^ERROR" $OUT/pytest.log | head -8 | tee -a $S
for lg in uniform trained; do
  t1=$(date +%s)
  timeout 200 ./build/sparkdraft bench markov --spec --topk 16 --logits $lg --json $OUT/run05_bench_markov_topk16_$lg.json > $OUT/markov_$lg.log 2>&1
  note "bench markov --topk 16 $lg rc $? ($(( $(date +%s)-t1 ))s)"; tail -18 $OUT/markov_$lg.log | grep -v wrote | tee -a $S
done
t1=$(date +%s)
timeout 240 ./build/sparkdraft bench step --preset qwen3-8b --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
  --json $OUT/run05_bench_step_qwen3-8b.json > $OUT/bench_step.log 2>&1
note "bench step rc $? ($(( $(date +%s)-t1 ))s)"; tail -5 $OUT/bench_step.log | tee -a $S
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log
