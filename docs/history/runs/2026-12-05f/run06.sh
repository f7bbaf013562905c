#!/usr/bin/env bash
# 2026-12-05f run 6. E = main at 711b880. H = E + the wide wg tile (wg_n256) as narrow as the
# tokens allow up to 256: round_up(M, 32) tokens from 160 (m64n160k16 / n192 / n224 / n256), so
# at 224 tokens (32 requests) lm_head, gate_up and muse's qkv compute no token column past 224
# (12.5% of their tensor work at 256), with 4 stages instead of 3; the sweep gains M 190 (n192).
# G = main at 487a4ea (the last sitting's tree, for this series' total). (a) H's whole GPU
# suite, check tiny qwen3 / muse; (b) bench step --spec --timeline E / H / G / E / H / G.
set -u
RUN=${RUN:-run06}
for v in E H G; do mkdir -p b_$v && tar xJf .carry/bin_$v.tar.xz -C b_$v; done
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
timeout 260 ./b_H/sparkdraft_cuda_tests > $L/tests.log 2>&1
note "H gpu suite rc $? $(grep -E '^\[  PASSED  \]' $L/tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | head >> $S
grep -E 'gemm variants\] (qkv|gate_up|lm_head|context_kv) +M +224' $L/tests.log | sed 's/([ 0-9]*)//g' | tr -s ' ' | cut -c1-150 >> $S
grep -E 'gemm speed\] .*M +224' $L/tests.log >> $S
for st in qwen3 muse; do
  timeout 60 ./b_H/sparkdraft check --style $st > $L/check_$st.log 2>&1
  note "check tiny $st rc $? $(grep 'check:' $L/check_$st.log | cut -c1-100)"
done
for v in E H G E2 H2 G2; do
  b=${v%2}
  timeout 60 ./b_$b/sparkdraft bench step --spec --timeline --preset-dir /tmp --json $L/step_$v.json > $L/step_$v.log 2>&1
  note "bench step --spec $v rc $? ($(( $(date +%s)-t0 ))s)"; grep -A6 'memory clock' $L/step_$v.log | tail -6 | cut -c1-80 >> $S
done
python3 tools/step_kernels.py $L/step_E.json $L/step_H.json $L/step_G.json $L/step_E2.json $L/step_H2.json $L/step_G2.json --match 'gemm_wg_kernel<4, 1, false, true' 'gemm_wg_kernel<2, 2, false, true' 'gemm_wg_kernel<4, 64, false, true' 'gemm_wg_kernel<2, 128, false, true' 'gemm_wg_kernel<2, 4, false, false' 'gemm_wg_kernel<2, 224, false, false' 'gemm_wg_kernel<2, 256, false, false' >> $S 2>&1
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
