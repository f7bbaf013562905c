#!/usr/bin/env bash
# 2026-12-04e run 10: the review clean-up of the wg tiles (one consumer path for the one-chain
# and slice-group tiles, the grid's token blocks computed once): the GEMM, wgmma and mma
# device tests, the draft tests, check on tiny in both styles, bench step qwen3-8b.
set -u
RUN=${RUN:-run10}
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
T=./build/sparkdraft_cuda_tests
S=$OUT/${RUN}_summary.txt; : > $S
note() { echo "$*" >> $S; }
t0=$(date +%s)
timeout 250 $T --gtest_filter='CudaGemm.*:Wgmma*:MmaDevice.*:CudaDraft.*:-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*' > $OUT/tests.log 2>&1
note "gemm + wgmma + draft tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/tests.log | sort -u | head >> $S
for st in qwen3 muse; do
  rm -rf /tmp/ck && ./build/sparkdraft make-checkpoint --preset tiny --style $st --out /tmp/ck > /dev/null 2>&1
  ./build/sparkdraft check --checkpoint /tmp/ck > $OUT/check_$st.log 2>&1
  note "check tiny $st rc $? $(grep 'check:' $OUT/check_$st.log | cut -c1-100)"
done
timeout 200 ./build/sparkdraft bench step --preset qwen3-8b --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
  --repeats 20 --json $OUT/${RUN}_bench_step_qwen3-8b.json > $OUT/step.log 2>&1
note "bench step qwen3-8b: rc $?"; grep -E "^qwen3-8b " $OUT/step.log >> $S
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log
cat $S
