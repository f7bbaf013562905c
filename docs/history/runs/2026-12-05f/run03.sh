#!/usr/bin/env bash
# 2026-12-05f run 3. E = main at 711b880 (run 2's E). F = E + o_proj/down past 64 tokens on 128 weight rows x
# 128 tokens a CTA (two warpgroups on one ring, two slices each in sequence) over the four CTAs
# of a cluster (launch_wg<2, 2, false, false, 4>: the tokens read once a 128-row block, not a 64).
# The M > 64 rule now first, so the sweep's M 65 / 224 / 1024 S 8 cases take it.
# (a) F's whole GPU suite (the sweep's M 224 S 8 cases, Qwen3_8bProjections' o_proj/down at
# 224, GemmSpeed.EveryVariant), check tiny qwen3 / muse; (b) bench step --spec --timeline
# E / F / E / F.
set -u
RUN=${RUN:-run03}
for v in E F; do mkdir -p b_$v && tar xJf .carry/bin_$v.tar.xz -C b_$v; done
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
timeout 260 ./b_F/sparkdraft_cuda_tests > $L/tests.log 2>&1
note "F gpu suite rc $? $(grep -E '^\[  PASSED  \]' $L/tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | head >> $S
grep -E 'gemm variants\] (o_proj|down) +M +224' $L/tests.log | sed 's/([ 0-9]*)//g' | tr -s ' ' | cut -c1-150 >> $S
grep -E 'gemm speed\] (o_proj|down) .*M +(56|224)' $L/tests.log >> $S
for st in qwen3 muse; do
  timeout 60 ./b_F/sparkdraft check --style $st > $L/check_$st.log 2>&1
  note "check tiny $st rc $? $(grep 'check:' $L/check_$st.log | cut -c1-100)"
done
for v in E F E2 F2; do
  b=${v%2}
  timeout 60 ./b_$b/sparkdraft bench step --spec --timeline --preset-dir /tmp --json $L/step_$v.json > $L/step_$v.log 2>&1
  note "bench step --spec $v rc $? ($(( $(date +%s)-t0 ))s)"; grep -A6 'memory clock' $L/step_$v.log | tail -6 | cut -c1-80 >> $S
done
python3 tools/step_kernels.py $L/step_E.json $L/step_F.json $L/step_E2.json $L/step_F2.json --match 'gemm_wg_kernel<4, 1, false, true' 'gemm_wg_kernel<2, 2, false, true' 'gemm_wg_kernel<2, 2, false, false, 4' >> $S 2>&1
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
