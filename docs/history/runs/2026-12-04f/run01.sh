#!/usr/bin/env bash
# 2026-12-04f run 1: the CPU backend's GEMMs on packed weights (cpu/mma_gemm.h MmaPacked). The CPU
# side only changed, so: every GPU test but the big presets (their CPU references run packed), check
# on every tiny preset in both styles (CPU against GPU bit for bit), the CPU twin's tests on this
# host's Xeon (AVX-512: the packed form through every kernel) and its GEMM bench.
set -u
RUN=${RUN:-run01}
mkdir -p build /tmp/sdlib
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests && cp /tmp/libcupti.so.13 /tmp/sdlib/
export LD_LIBRARY_PATH=/tmp/sdlib:${LD_LIBRARY_PATH:-}
T=./build/sparkdraft_cuda_tests
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
timeout 400 $T --gtest_filter='-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*:*Speed*' > $L/gpu_tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $L/gpu_tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/gpu_tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/gpu_tests.log | sort -u | head -20 >> $S
for preset in tiny tiny-conf tiny-d2t tiny-topk tiny-topk-union tiny-gated tiny-rnn tiny-fillin; do
  for st in qwen3 muse; do
    rm -rf /tmp/ck && ./build/sparkdraft make-checkpoint --preset $preset --style $st --out /tmp/ck > /dev/null 2>&1
    ./build/sparkdraft check --checkpoint /tmp/ck > $L/check_${preset}_$st.log 2>&1
    note "check $preset $st rc $? $(grep 'check:' $L/check_${preset}_$st.log | cut -c1-100)"
  done
done
grep -m1 "model name" /proc/cpuinfo >> $S
timeout 300 /tmp/sd_cpu_tests --gtest_filter='CpuMmaGemm*:TpLayers*:*FillIn*' > $L/cpu_tests.log 2>&1
note "cpu twin tests rc $? $(grep -E '^\[  PASSED  \]' $L/cpu_tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/cpu_tests.log | sort -u | wc -l) failed"
timeout 200 /tmp/sd_bench_mma --rows 7 --repeats 3 --json $OUT/${RUN}_bench_mma_gemm_xeon.json > $L/bench_mma.log 2>&1
note "bench mma_gemm rc $?"
cat $L/bench_mma.log >> $S
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz logs && rm -rf logs
cat $S
