#!/usr/bin/env bash
# 2026-12-04b run 4: the top-k candidates over slices of 4096 ids (four kernels: two histograms, counts,
# compaction in id order): its tests, the Markov tests, bench markov --topk 16.
set -u
mkdir -p build build-python
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
tar xJf .carry/py.tar.xz -C build-python
T=./build/sparkdraft_cuda_tests
S=$OUT/run04_summary.txt; : > $S
note() { echo "$*" | tee -a $S; }
t0=$(date +%s)
timeout 200 $T --gtest_filter='Markov*:BenchMarkov.*:CudaDraft.Topk*:CudaConfidence.*' > $OUT/gpu_tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/gpu_tests.log | tail -1) $(grep -cE '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log | sort -u | head -20 | tee -a $S
for lg in uniform trained; do
  t1=$(date +%s)
  timeout 200 ./build/sparkdraft bench markov --spec --topk 16 --logits $lg --json $OUT/run04_bench_markov_topk16_$lg.json > $OUT/markov_$lg.log 2>&1
  note "bench markov --topk 16 $lg rc $? ($(( $(date +%s)-t1 ))s)"; tail -9 $OUT/markov_$lg.log | tee -a $S
done
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log
