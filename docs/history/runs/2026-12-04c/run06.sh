#!/usr/bin/env bash
# 2026-12-04c run 6: the top-k loop's cache rows -inf in one wide kernel before the loop (run 5:
# the step kernel, one CTA a row, spent its 38 us mostly at barriers behind its own 304 KB -inf
# fill), on the H200: the Markov and draft GPU tests, check on the top-k, union and d2t presets,
# then bench markov --spec --topk 16 (uniform and trained logits) against 2026-12-04b run 5.
set -u
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
S=$OUT/run06_summary.txt; : > $S
note() { echo "$*" | tee -a $S; }
timeout 200 ./build/sparkdraft_cuda_tests --gtest_filter='Markov*:CudaDraft.*:BenchMarkov.*:-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*' > $OUT/gpu_tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/gpu_tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log | sort -u | wc -l) failed"
grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log | sort -u | head -10 | tee -a $S
for preset in tiny-topk tiny-topk-union tiny-d2t; do
  for st in qwen3 muse; do
    rm -rf /tmp/ck && ./build/sparkdraft make-checkpoint --preset $preset --style $st --out /tmp/ck > /dev/null 2>&1
    ./build/sparkdraft check --checkpoint /tmp/ck > $OUT/check_${preset}_$st.log 2>&1
    note "check $preset $st rc $? $(grep 'check:' $OUT/check_${preset}_$st.log | cut -c1-90)"
  done
done
for lg in uniform trained; do
  timeout 200 ./build/sparkdraft bench markov --spec --topk 16 --logits $lg --json $OUT/run06_bench_markov_topk16_$lg.json > $OUT/markov_$lg.log 2>&1
  note "bench markov --topk 16 $lg rc $?"; tail -12 $OUT/markov_$lg.log | grep -v wrote | tee -a $S
done
cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log
