#!/usr/bin/env bash
# 2026-12-04b run 2: the top-k candidate kernel rewritten (per-warp histograms, run-wise
# compaction): its tests, the Markov tests, the scheduled SpecDecoder test on CUDA (the Python
# package of run 1: its kernels are run 1's; the test file is new), and bench markov --topk 16.
set -u
mkdir -p build build-python
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
tar xJf .carry/py.tar.xz -C build-python
T=./build/sparkdraft_cuda_tests
S=$OUT/run02_summary.txt; : > $S
note() { echo "$*" | tee -a $S; }
t0=$(date +%s)
timeout 200 $T --gtest_filter='Markov*:BenchMarkov.*:CudaDraft.Topk*:CudaConfidence.*' > $OUT/gpu_tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/gpu_tests.log | tail -1) $(grep -cE '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log | sort -u | head -20 | tee -a $S
PYTHONPATH=build-python/pkg-cuda-py312 timeout 200 python3 -m pytest -q -rs python/tests/test_spec.py > $OUT/pytest.log 2>&1
note "pytest test_spec rc $? $(tail -1 $OUT/pytest.log)"
for lg in uniform trained; do
  t1=$(date +%s)
  timeout 200 ./build/sparkdraft bench markov --spec --topk 16 --logits $lg --json $OUT/run02_bench_markov_topk16_$lg.json > $OUT/markov_$lg.log 2>&1
  note "bench markov --topk 16 $lg rc $? ($(( $(date +%s)-t1 ))s)"; tail -9 $OUT/markov_$lg.log | tee -a $S
done
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log
