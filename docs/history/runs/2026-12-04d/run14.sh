#!/usr/bin/env bash
# 2026-12-04d run 14: the draw's pairs 16 bytes a load (where both laws are non-degenerate and the
# target bf16), p and q by fdiv(law_exp(s, M), Z) directly, no division at T 1, the candidate's
# fold one call. CudaVerify.*, bench verify (uniform and trained logits, block).
set -u
RUN=${RUN:-run14}
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
S=$OUT/${RUN}_summary.txt; : > $S
./build/sparkdraft_cuda_tests --gtest_filter='CudaVerify.*' > $OUT/tests.log 2>&1
echo "CudaVerify.*: rc $? $(grep -E '^\[  PASSED  \]' $OUT/tests.log | tail -1)" >> $S
grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/tests.log | sort -u >> $S
./build/sparkdraft bench verify --json $OUT/${RUN}_bench_verify_bf16.json > $OUT/uniform.log 2>&1
echo "bench verify: rc $?" >> $S; grep -A7 '^V ' $OUT/uniform.log >> $S
./build/sparkdraft bench verify --logits trained --json $OUT/${RUN}_bench_verify_trained.json > $OUT/trained.log 2>&1
echo "bench verify --logits trained: rc $?" >> $S; grep -A7 '^V ' $OUT/trained.log >> $S
./build/sparkdraft bench verify --method block --vocab 151936 > $OUT/block.log 2>&1
echo "bench verify --method block: rc $?" >> $S; grep -A4 '^V ' $OUT/block.log >> $S
./build/sparkdraft bench verify --temperature 0.7 --vocab 151936 > $OUT/t07.log 2>&1
echo "bench verify T 0.7: rc $?" >> $S; grep -A4 '^V ' $OUT/t07.log >> $S
timeout 120 ncu --kernel-name regex:draw_kernel --launch-count 1 --metrics gpu__time_duration.sum,smsp__inst_executed.sum,sm__throughput.avg.pct_of_peak_sustained_elapsed --csv \
  ./build/sparkdraft bench verify --vocab 151936 --rows 32 --repeats 2 > $OUT/ncu_draw.csv 2>/dev/null
echo "ncu draw at 32 rows: $(grep -E 'duration|inst_executed|throughput' $OUT/ncu_draw.csv | awk -F'","' '{print $(NF-2) "=" $NF}' | tr -d '"' | tr '\n' ' ')" >> $S
cd $OUT && tar cJf logs.tar.xz *.log *.csv && rm -f *.log *.csv
cat $S
