#!/usr/bin/env bash
# 2026-12-04e run 7: the shared-memory budget of the smaller one-chain wg tiles (wg_n64, wg_n128,
# the SwiGLU tiles; SPARKDRAFT_WG_SMALL_KB, a temporary measurement knob): 110 KB (the tree:
# two CTAs an SM), 72 KB (wg_n64 4 stages and SwiGLU 3: three an SM), 56 KB (wg_n64 3 stages:
# four an SM). The GEMM tests at 56 KB (the fewest stages), GemmSpeed and bench step qwen3-8b.
set -u
RUN=${RUN:-run07}
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
T=./build/sparkdraft_cuda_tests
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
SPARKDRAFT_WG_SMALL_KB=56 timeout 200 $T --gtest_filter='CudaGemm.*' > $L/gemm_tests_56.log 2>&1
note "gemm tests at 56 KB rc $? $(grep -E '^\[  PASSED  \]' $L/gemm_tests_56.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/gemm_tests_56.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
for kb in 110 72 56; do
  export SPARKDRAFT_WG_SMALL_KB=$kb
  timeout 200 $T --gtest_filter='GemmSpeed.Qwen3_8bProjections:GemmSpeed.GateUpSwigluFusedVsTwoPasses' > $L/gemm_speed_$kb.log 2>&1
  note "GemmSpeed at $kb KB: rc $?"
  grep -E "^\[gemm (swiglu )?speed\] [a-zM]" $L/gemm_speed_$kb.log | grep -v "S 8" >> $S
  timeout 300 ./build/sparkdraft bench step --preset qwen3-8b --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
    --repeats 20 --json $OUT/${RUN}_bench_step_$kb.json > $L/step_$kb.log 2>&1
  note "bench step qwen3-8b at $kb KB: rc $?"
  grep -E "^qwen3-8b " $L/step_$kb.log >> $S
done
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz logs && rm -rf logs
cat $S
