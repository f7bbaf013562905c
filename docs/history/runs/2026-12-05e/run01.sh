#!/usr/bin/env bash
# 2026-12-05e run 1. main = c1680f8 (bin_new7's code); both = main + d22724c (the verifier's folds
# out of line) + 7426dd3 (attention's K/V loads from three bases when the head dim is 16 KS), the
# two changes written last sitting and not run. (a) both's attention and verifier tests, check;
# (b) bench verify main / both / main / both (auto form), and --form resident at 1 and 8 rows;
# (c) bench step --spec --timeline main / both / main / both (attention's calls summed).
set -u
RUN=${RUN:-run01}
for v in new7 both; do mkdir -p b_$v && tar xJf .carry/bin_$v.tar.xz -C b_$v; done
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
B=./b_both/sparkdraft
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
timeout 150 ./b_both/sparkdraft_cuda_tests --gtest_filter='CudaAttention.*:CudaVerify.*' > $L/tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $L/tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | head >> $S
for st in qwen3 muse; do
  timeout 60 $B check --style $st > $L/check_$st.log 2>&1
  note "check tiny $st rc $? $(grep 'check:' $L/check_$st.log | cut -c1-100)"
done
for v in new7 both new7b bothb; do
  b=${v%b}; [ "$v" = both ] && b=both; [ "$v" = bothb ] && b=both
  timeout 100 ./b_$b/sparkdraft bench verify --json $OUT/${RUN}_verify_$v.json > $L/verify_$v.log 2>&1
  note "bench verify $v rc $? ($(( $(date +%s)-t0 ))s)"; grep -A7 '^V ' $L/verify_$v.log | tail -6 | cut -c1-100 >> $S
done
for v in new7 both; do
  timeout 60 ./b_$v/sparkdraft bench verify --form resident --rows 1 --rows 8 > $L/verify_res_$v.log 2>&1
  note "bench verify --form resident $v rc $?"; grep -A5 '^V ' $L/verify_res_$v.log | tail -4 | cut -c1-100 >> $S
done
for v in new7 both new7b bothb; do
  b=${v%b}; [ "$v" = both ] && b=both; [ "$v" = bothb ] && b=both
  timeout 100 ./b_$b/sparkdraft bench step --spec --timeline --preset-dir /tmp --json $L/step_$v.json > $L/step_$v.log 2>&1
  note "bench step --spec $v rc $? ($(( $(date +%s)-t0 ))s)"; grep -A6 'memory clock' $L/step_$v.log | tail -6 >> $S
  python3 - $L/step_$v.json >> $S <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    t = r.get("fused_timeline", {}).get("timeline", [])
    def tot(key):
        b = [k["duration_us"] for k in t if key in k["name"]]
        return f"{len(b)} x {key} {sum(b):.1f}"
    print(f"  {r.get('preset')} rows {r.get('rows')}: " + "; ".join(tot(k) for k in ("attention_chunk", "attention_combine")))
PY
done
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
