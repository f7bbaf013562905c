#!/usr/bin/env bash
# 2026-12-04e run 8: the tree to commit (run 5 plus the 72 KB ring for the smaller wg tiles on grids of more than two CTAs an SM): every
# GPU test but the big presets, check on every tiny preset in both styles, GemmSpeed, bench step qwen3-8b and
# muse (ctx 4096, rows 1 8 32) with the timeline.
set -u
RUN=${RUN:-run08}
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
./build/sparkdraft plan --checkpoint /tmp/ck --backend cuda 2>&1 | grep -i wgmma | head -2 >> $S
timeout 200 $T --gtest_filter='GemmSpeed.Qwen3_8bProjections:GemmSpeed.EveryVariant' > $L/gemm_speed.log 2>&1
note "GemmSpeed: rc $?"
grep -E "^\[gemm (speed|variants)\] " $L/gemm_speed.log >> $S
for preset in qwen3-8b muse; do
  timeout 300 ./build/sparkdraft bench step --preset $preset --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
    --repeats 20 --timeline --json $OUT/${RUN}_bench_step_$preset.json > $L/step_$preset.log 2>&1
  note "bench step $preset: rc $?"
  grep -E "  fused |timeline of one" $L/step_$preset.log >> $S
  grep -E "^$preset " $L/step_$preset.log >> $S
done
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz logs && rm -rf logs
cat $S
