#!/usr/bin/env bash
# 2026-12-04b run 6: MarkovEager.HeadLoopMatchesCpuLoop again (run 5's failure was the test's
# duplicate cache slots at 4 rows), then where the top-k loop's time goes: ncu durations of
# its kernels (bench markov --rows 1 --topk 16, the correctness run's launches; caches
# flushed, clocks not locked).
set -u
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
S=$OUT/run06_summary.txt; : > $S
note() { echo "$*" | tee -a $S; }
t0=$(date +%s)
timeout 120 ./build/sparkdraft_cuda_tests --gtest_filter='MarkovEager.Head*:CudaDraft.MarkovHeads*' > $OUT/gpu_tests.log 2>&1
note "head tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/gpu_tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log | sort -u | wc -l) failed"
for rows in 1 32; do
  timeout 200 ncu --clock-control none --kernel-name regex:"topk|embed_kernel" --launch-skip 7 --launch-count 30 \
    --metrics gpu__time_duration.sum,launch__grid_size ./build/sparkdraft bench markov --rows $rows --topk 16 --repeats 3 > $OUT/ncu_rows$rows.log 2>&1
  note "ncu rows $rows rc $?"
  grep -E "^  [a-z_]+kernel|gpu__time_duration|launch__grid_size" $OUT/ncu_rows$rows.log | paste - - - | awk '{print $1, $(NF-4), $(NF-3), $NF}' | head -30 | tee -a $S
done
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log
