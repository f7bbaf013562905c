#!/usr/bin/env bash
# 2026-12-05f run 2. M = main at 5a17202 (the cluster split of o_proj/down's K slices where
# twice the CTAs fit one wave). E = M + o_proj/down past 64 tokens on 128-token tiles of two
# slice groups (two slices each) over the two CTAs of a cluster (launch_wg<2, 2, false, true,
# 2>: 256 CTAs for qwen3-8b at 224 tokens, the weights read twice instead of four times).
# (a) E's whole GPU suite (the sweep's M 224 S 8 cases, Qwen3_8bProjections' o_proj/down at
# 224, GemmSpeed.EveryVariant), check tiny qwen3 / muse; (b) bench step --spec --timeline
# M / E / M / E.
set -u
RUN=${RUN:-run02}
for v in M E; do mkdir -p b_$v && tar xJf .carry/bin_$v.tar.xz -C b_$v; done
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
timeout 260 ./b_E/sparkdraft_cuda_tests > $L/tests.log 2>&1
note "E gpu suite rc $? $(grep -E '^\[  PASSED  \]' $L/tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | head >> $S
grep -E 'gemm variants\] (o_proj|down) +M +224' $L/tests.log | sed 's/([ 0-9]*)//g' | tr -s ' ' | cut -c1-150 >> $S
grep -E 'gemm speed\] (o_proj|down) .*M +(56|224)' $L/tests.log >> $S
for st in qwen3 muse; do
  timeout 60 ./b_E/sparkdraft check --style $st > $L/check_$st.log 2>&1
  note "check tiny $st rc $? $(grep 'check:' $L/check_$st.log | cut -c1-100)"
done
for v in M E M2 E2; do
  b=${v%2}
  timeout 60 ./b_$b/sparkdraft bench step --spec --timeline --preset-dir /tmp --json $L/step_$v.json > $L/step_$v.log 2>&1
  note "bench step --spec $v rc $? ($(( $(date +%s)-t0 ))s)"; grep -A6 'memory clock' $L/step_$v.log | tail -6 | cut -c1-80 >> $S
done
python3 tools/step_kernels.py $L/step_M.json $L/step_E.json $L/step_M2.json $L/step_E2.json --match 'gemm_wg_kernel<4, 1, false, true' 'gemm_wg_kernel<2, 2, false, true' >> $S 2>&1
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
