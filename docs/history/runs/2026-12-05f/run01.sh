#!/usr/bin/env bash
# 2026-12-05f run 1. G = main at 487a4ea. B = G + f243538 (o_proj/down's eight K slices over
# the two CTAs of a cluster where row blocks x token tiles < SMs) + a new forced variant
# wg_n256x64 (256 tokens x 64 weight rows, one warpgroup: twice wg_n256's CTAs), gemm_pick
# unchanged; C = B with gemm_pick giving wg_n256x64 past 64 tokens where N < 8192 (qkv at 224).
# (a) B's whole GPU suite (CudaGemm.* checks both new paths bit for bit; GemmSpeed.EveryVariant),
# check tiny qwen3 / muse; (b) bench step --spec --timeline G / B / C / G / B / C.
set -u
RUN=${RUN:-run01}
for v in G B C; do mkdir -p b_$v && tar xJf .carry/bin_$v.tar.xz -C b_$v; done
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
timeout 260 ./b_B/sparkdraft_cuda_tests > $L/tests.log 2>&1
note "B gpu suite rc $? $(grep -E '^\[  PASSED  \]' $L/tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | head >> $S
grep -E 'gemm variants\] (qkv|o_proj|down|fc|context_kv) .*M  ( 56| 224)' $L/tests.log | sed 's/([ 0-9]*)//g' | tr -s ' ' | cut -c1-150 >> $S
for st in qwen3 muse; do
  timeout 60 ./b_B/sparkdraft check --style $st > $L/check_$st.log 2>&1
  note "check tiny $st rc $? $(grep 'check:' $L/check_$st.log | cut -c1-100)"
done
for v in G B C G2 B2 C2; do
  b=${v%2}
  timeout 60 ./b_$b/sparkdraft bench step --spec --timeline --preset-dir /tmp --json $L/step_$v.json > $L/step_$v.log 2>&1
  note "bench step --spec $v rc $? ($(( $(date +%s)-t0 ))s)"; grep -A6 'memory clock' $L/step_$v.log | tail -6 | cut -c1-80 >> $S
done
python3 tools/step_kernels.py $L/step_G.json $L/step_B.json $L/step_C.json $L/step_G2.json $L/step_B2.json $L/step_C2.json --match 'gemm_wg_kernel<4, 1, false, true' 'gemm_wg_kernel<1, 1,' 'gemm_wg_kernel<1, 4,' gemm_ring >> $S 2>&1
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
