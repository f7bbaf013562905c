#!/usr/bin/env bash
# 2026-12-04d run 15: the merged CPU twin change (the AVX2 kernel reads a block's rows through
# copies of 8 steps; E for all x rows of a step first) on the H200 host's Intel Xeon (AVX-512):
# the CPU kernel tests, bench_mma_gemm --reference (every kernel the same bits), and every GPU
# test but the big presets (the GPU against the CPU twin, which now runs the new AVX2 path here).
set -u
RUN=${RUN:-run15}
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
S=$OUT/${RUN}_summary.txt; : > $S
grep -m1 "model name" /proc/cpuinfo >> $S
/tmp/sd_cpu_tests --gtest_filter='*Mma*:*Gemm*' > $OUT/cpu_tests.log 2>&1
echo "CPU *Mma*:*Gemm*: rc $? $(grep -E '^\[  PASSED  \]' $OUT/cpu_tests.log | tail -1)" >> $S
grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/cpu_tests.log | sort -u >> $S
timeout 200 /tmp/sd_mma --rows 7 --repeats 1 --reference > $OUT/mma.log 2>&1
echo "bench_mma_gemm --reference: rc $? $(grep -i 'same bits\|differ' $OUT/mma.log | tail -2 | tr '\n' ' ')" >> $S
timeout 300 ./build/sparkdraft_cuda_tests --gtest_filter='-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*:*Speed*' > $OUT/gpu_tests.log 2>&1
echo "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/gpu_tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log | sort -u | wc -l) failed" >> $S
grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log | sort -u | head >> $S
cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log
cat $S
