#!/usr/bin/env bash
# 2026-12-04e run 1: attention's whole-tile form (issue 24, lever 1: a warp per 16-row tile
# over whole chunks, P in registers, 64/128-thread CTAs, three an SM): the attention tests at
# every split, attention alone at the published shapes with a 2- and a 3-stage ring at head dim
# 128, then every GPU test but the big presets, check on the tiny presets, bench step qwen3-8b
# and muse (ctx 4096, rows 1 8 32) with the timeline.
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
timeout 200 $T --gtest_filter='CudaAttention.*' > $L/attn_tests.log 2>&1
rc=$?
note "attention tests rc $rc $(grep -E '^\[  PASSED  \]' $L/attn_tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/attn_tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/attn_tests.log | sort -u | head -20 >> $S
grep -m12 -E 'Failure|Expected|Which is|differ|first' $L/attn_tests.log >> $S
grep "attention split" $L/attn_tests.log >> $S
for st in 2 3; do
  SPARKDRAFT_ATTN_STAGES=$st timeout 200 $T --gtest_filter='AttentionSpeed.PublishedShapesAtContext4096' > $L/attn_speed_$st.log 2>&1
  note "attention speed, ring $st stages at head dim 128: rc $?"
  grep "attention speed" $L/attn_speed_$st.log >> $S
done
if [ $rc -eq 0 ]; then
  timeout 300 $T --gtest_filter='-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*:*Speed*:CudaAttention.*' > $L/gpu_tests.log 2>&1
  note "other gpu tests rc $? $(grep -E '^\[  PASSED  \]' $L/gpu_tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/gpu_tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
  grep -E '^\[  FAILED  \] [A-Za-z]' $L/gpu_tests.log | sort -u | head -20 >> $S
  for preset in tiny tiny-gated tiny-fillin; do
    for st in qwen3 muse; do
      rm -rf /tmp/ck && ./build/sparkdraft make-checkpoint --preset $preset --style $st --out /tmp/ck > /dev/null 2>&1
      ./build/sparkdraft check --checkpoint /tmp/ck > $L/check_${preset}_$st.log 2>&1
      note "check $preset $st rc $? $(grep 'check:' $L/check_${preset}_$st.log | cut -c1-100)"
    done
  done
  for preset in qwen3-8b muse; do
    timeout 300 ./build/sparkdraft bench step --preset $preset --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
      --repeats 20 --timeline --json $OUT/${RUN}_bench_step_$preset.json > $L/step_$preset.log 2>&1
    note "bench step $preset --timeline: rc $?"
    grep -E "  fused |timeline of one" $L/step_$preset.log >> $S
    grep -E "^$preset " $L/step_$preset.log >> $S
  done
fi
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz logs && rm -rf logs
cat $S
