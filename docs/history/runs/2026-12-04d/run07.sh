#!/usr/bin/env bash
# 2026-12-04d run 7: the verifier as committed: run 6 without programmatic dependent launch on the
# verify kernels (run 6's rows form was 262.8 us at 32 rows against run 1's 250.6 with PDL the
# only difference). CudaVerify.*, bench verify (auto, rows; bf16; f32; T 0.7; block).
RUN=${RUN:-run07}
set -u
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
T=./build/sparkdraft_cuda_tests
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
$T --gtest_filter='CudaVerify.*' > $L/verify_tests.log 2>&1
note "CudaVerify.*: rc $? $(grep -E '^\[  PASSED  \]' $L/verify_tests.log | tail -1)"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/verify_tests.log | sort -u >> $S
for form in auto rows; do
  ./build/sparkdraft bench verify --form $form --json $OUT/${RUN}_bench_verify_bf16_$form.json > $L/bench_$form.log 2>&1
  note "bench verify bf16 --form $form: rc $?"; grep -A7 '^V ' $L/bench_$form.log >> $S
done
./build/sparkdraft bench verify --dtype f32 --json $OUT/${RUN}_bench_verify_f32.json > $L/bench_f32.log 2>&1
note "bench verify f32 auto: rc $?"; grep -A7 '^V ' $L/bench_f32.log >> $S
./build/sparkdraft bench verify --temperature 0.7 --vocab 151936 > $L/bench_t07.log 2>&1
note "bench verify bf16 T 0.7 auto: rc $?"; grep -A4 '^V ' $L/bench_t07.log >> $S
./build/sparkdraft bench verify --method block --vocab 151936 > $L/bench_block.log 2>&1
note "bench verify bf16 block auto: rc $?"; grep -A4 '^V ' $L/bench_block.log >> $S
cd $OUT && tar cJf logs.tar.xz logs && rm -rf logs
cat $S
