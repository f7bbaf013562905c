#!/usr/bin/env bash
# 2026-12-04d run 13: block verification's mass pass with 16-byte loads of the target and cache
# pairs and no division at T 1 (run 7: block 554.1 us at 32 rows against standard's 218.9).
# CudaVerify.* (block verification at every block size and split), then bench verify --method block
# at T 1 and 0.7.
set -u
RUN=${RUN:-run13}
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
S=$OUT/${RUN}_summary.txt; : > $S
./build/sparkdraft_cuda_tests --gtest_filter='CudaVerify.*' > $OUT/tests.log 2>&1
echo "CudaVerify.*: rc $? $(grep -E '^\[  PASSED  \]' $OUT/tests.log | tail -1)" >> $S
grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/tests.log | sort -u >> $S
./build/sparkdraft bench verify --method block --json $OUT/${RUN}_bench_verify_block.json > $OUT/block.log 2>&1
echo "bench verify --method block: rc $?" >> $S; grep -A7 '^V ' $OUT/block.log >> $S
./build/sparkdraft bench verify --method block --temperature 0.7 --vocab 151936 > $OUT/block_t07.log 2>&1
echo "bench verify --method block T 0.7: rc $?" >> $S; grep -A4 '^V ' $OUT/block_t07.log >> $S
cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log
cat $S
