#!/usr/bin/env bash
# 2026-12-04e run 3: the 256-token wg tile on one wgmma.m64n256k16 per k16 step (was four
# m64n64k16: A read once per 256 tokens instead of four times), and a pipelined form of the
# one-chain wg tiles (a producer warp, one wgmma group in flight). The probes and the start-up
# self-test of both wgmma forms, the GEMM tests in every form, GemmSpeed and bench step
# qwen3-8b and muse with the new n256 form ("wide", the default), the old one
# (SPARKDRAFT_WG_NARROW=1) and the pipelined one (SPARKDRAFT_WG_PIPE=1; temporary measurement
# knobs), every other GPU test but the big presets, check on the tiny presets.
set -u
RUN=${RUN:-run03}
mkdir -p build /tmp/sdlib
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests && cp /tmp/libcupti.so.13 /tmp/sdlib/
export LD_LIBRARY_PATH=/tmp/sdlib:${LD_LIBRARY_PATH:-}
T=./build/sparkdraft_cuda_tests
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
rc=0
for form in wide narrow pipe; do
  unset SPARKDRAFT_WG_NARROW SPARKDRAFT_WG_PIPE
  [ $form = narrow ] && export SPARKDRAFT_WG_NARROW=1
  [ $form = pipe ] && export SPARKDRAFT_WG_PIPE=1
  timeout 200 $T --gtest_filter='Wgmma*:MmaDevice.*:CudaGemm.*' > $L/gemm_tests_$form.log 2>&1
  r=$?; [ $r -ne 0 ] && rc=$r
  note "wgmma + gemm tests ($form) rc $r $(grep -E '^\[  PASSED  \]' $L/gemm_tests_$form.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/gemm_tests_$form.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
  grep -E '^\[  FAILED  \] [A-Za-z]' $L/gemm_tests_$form.log | sort -u | head -20 >> $S
  grep -m8 -E 'Failure|differs|first' $L/gemm_tests_$form.log >> $S
done
unset SPARKDRAFT_WG_NARROW SPARKDRAFT_WG_PIPE
for form in wide narrow pipe; do
  unset SPARKDRAFT_WG_NARROW SPARKDRAFT_WG_PIPE
  [ $form = narrow ] && export SPARKDRAFT_WG_NARROW=1
  [ $form = pipe ] && export SPARKDRAFT_WG_PIPE=1
  timeout 200 $T --gtest_filter='GemmSpeed.Qwen3_8bProjections:GemmSpeed.EveryVariant' > $L/gemm_speed_$form.log 2>&1
  note "GemmSpeed ($form): rc $?"
  grep -E "^\[gemm" $L/gemm_speed_$form.log | head -60 >> $S
done
unset SPARKDRAFT_WG_NARROW SPARKDRAFT_WG_PIPE
if [ $rc -eq 0 ]; then
  timeout 300 $T --gtest_filter='-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*:*Speed*:Wgmma*:MmaDevice.*:CudaGemm.*' > $L/gpu_tests.log 2>&1
  note "other gpu tests rc $? $(grep -E '^\[  PASSED  \]' $L/gpu_tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/gpu_tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
  grep -E '^\[  FAILED  \] [A-Za-z]' $L/gpu_tests.log | sort -u | head -20 >> $S
  for preset in tiny tiny-conf tiny-d2t tiny-topk tiny-topk-union tiny-gated tiny-rnn tiny-fillin; do
    for st in qwen3 muse; do
      rm -rf /tmp/ck && ./build/sparkdraft make-checkpoint --preset $preset --style $st --out /tmp/ck > /dev/null 2>&1
      ./build/sparkdraft check --checkpoint /tmp/ck > $L/check_${preset}_$st.log 2>&1
      note "check $preset $st rc $? $(grep 'check:' $L/check_${preset}_$st.log | cut -c1-100)"
    done
  done
  for form in wide narrow pipe; do
    unset SPARKDRAFT_WG_NARROW SPARKDRAFT_WG_PIPE
    [ $form = narrow ] && export SPARKDRAFT_WG_NARROW=1
    [ $form = pipe ] && export SPARKDRAFT_WG_PIPE=1
    for preset in qwen3-8b muse; do
      timeout 300 ./build/sparkdraft bench step --preset $preset --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
        --repeats 20 --timeline --json $OUT/${RUN}_bench_step_${preset}_$form.json > $L/step_${preset}_$form.log 2>&1
      note "bench step $preset ($form): rc $?"
      grep -E "^$preset " $L/step_${preset}_$form.log >> $S
    done
  done
fi
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz logs && rm -rf logs
cat $S
