#!/usr/bin/env bash
# 2026-12-04d run 11: the sitting's tree (commit 7788e90: the verifier's lists form, bench step
# --timeline, SwiGLU eight outputs a thread from 2^17 groups): every GPU test but the big presets,
# check bit for bit on every tiny preset in both styles, bench verify, bench step qwen3-8b ctx 4096
# rows 1 8 32 with the timeline.
set -u
RUN=${RUN:-run11}
mkdir -p build /tmp/sdlib
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests && cp /tmp/libcupti.so.13 /tmp/sdlib/
export LD_LIBRARY_PATH=/tmp/sdlib:${LD_LIBRARY_PATH:-}
T=./build/sparkdraft_cuda_tests
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
timeout 300 $T --gtest_filter='-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*:*Speed*' > $L/gpu_tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $L/gpu_tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/gpu_tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/gpu_tests.log | sort -u | head -20 >> $S
for preset in tiny tiny-conf tiny-d2t tiny-topk tiny-topk-union tiny-gated tiny-rnn tiny-fillin; do
  for st in qwen3 muse; do
    rm -rf /tmp/ck && ./build/sparkdraft make-checkpoint --preset $preset --style $st --out /tmp/ck > /dev/null 2>&1
    ./build/sparkdraft check --checkpoint /tmp/ck > $L/check_${preset}_$st.log 2>&1
    note "check $preset $st rc $? $(grep 'check:' $L/check_${preset}_$st.log | cut -c1-100)"
  done
done
./build/sparkdraft bench verify --json $OUT/${RUN}_bench_verify_bf16.json > $L/bench_verify.log 2>&1
note "bench verify bf16: rc $?"; grep -A7 '^V ' $L/bench_verify.log >> $S
timeout 400 ./build/sparkdraft bench step --preset qwen3-8b --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
  --repeats 20 --timeline --json $OUT/${RUN}_bench_step_qwen3-8b.json > $L/step.log 2>&1
note "bench step qwen3-8b --timeline: rc $?"
grep -E "  fused |timeline of one" $L/step.log >> $S
grep -E "^qwen3-8b " $L/step.log >> $S
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz logs && rm -rf logs
cat $S
