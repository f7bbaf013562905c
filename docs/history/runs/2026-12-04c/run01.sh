#!/usr/bin/env bash
# 2026-12-04c run 1 (and run 2: the same script on a clean rebuild): per-request lengths in propose
# (contract.md 9.5), commit c1b105c, on the H200:
#   every GPU test but the big presets and the speed prints (CudaDraft.Lengths*,
#   CudaDraft.DeviceLengths* among them); check bit for bit on every tiny preset (qwen3 and
#   muse styles; check's odd rounds now draw per-request lengths).
set -u
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
T=./build/sparkdraft_cuda_tests
S=$OUT/${RUN:-run01}_summary.txt; : > $S
note() { echo "$*" | tee -a $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a $S
timeout 300 $T --gtest_filter='-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*:*Speed*' > $OUT/gpu_tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/gpu_tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log | sort -u | head -20 | tee -a $S
grep -E '^\[       OK \] CudaDraft\.(Lengths|DeviceLengths|DeviceApi|Callers)' $OUT/gpu_tests.log | tee -a $S
for preset in tiny tiny-conf tiny-d2t tiny-topk tiny-topk-union tiny-gated tiny-rnn tiny-fillin; do
  for st in qwen3 muse; do
    rm -rf /tmp/ck && ./build/sparkdraft make-checkpoint --preset $preset --style $st --out /tmp/ck > /dev/null 2>&1
    ./build/sparkdraft check --checkpoint /tmp/ck > $OUT/check_${preset}_$st.log 2>&1
    note "check $preset $st rc $? $(grep 'check:' $OUT/check_${preset}_$st.log | cut -c1-110)"
  done
done
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log
