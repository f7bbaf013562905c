#!/usr/bin/env bash
# 2026-12-05d run 4. new5 = main (ac2aa74) + the automatic pick takes the resident form for
# one request of standard verification only (block verification stays staged; the bench
# passes its method to the pick); new6 = new5 + attention's first split folds its own
# chunks (its rows' state to the workspace, the combine continues from it: 1 / splits
# less o_c traffic). (a) new6's whole GPU suite and check; (b) bench step --spec, new5
# then new6 then new5 again; (c) bench verify (defaults) and block at one row (new6).
set -u
RUN=${RUN:-run04}
for v in new5 new6; do mkdir -p b_$v && tar xJf .carry/bin_$v.tar.xz -C b_$v; done
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
B=./b_new6/sparkdraft
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
timeout 260 ./b_new6/sparkdraft_cuda_tests > $L/tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $L/tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | head >> $S
for st in qwen3 muse; do
  timeout 60 $B check --style $st > $L/check_$st.log 2>&1
  note "check tiny $st rc $? $(grep 'check:' $L/check_$st.log | cut -c1-100)"
done
for v in new5 new6 new5b new6b; do
  b=${v%b}
  timeout 120 ./b_$b/sparkdraft bench step --spec --timeline --preset-dir /tmp --json $L/bench_step_$v.json > $L/bench_step_$v.log 2>&1
  note "bench step --spec $v rc $? ($(( $(date +%s)-t0 ))s)"; grep -A6 'memory clock' $L/bench_step_$v.log | tail -6 >> $S
  python3 - $L/bench_step_$v.json >> $S <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    t = r.get("fused_timeline", {}).get("timeline", [])
    def tot(key):
        b = [k["duration_us"] for k in t if key in k["name"]]
        return f"{len(b)} x {key} {sum(b):.1f}"
    print(f"  {r.get('preset')} rows {r.get('rows')}: " + "; ".join(tot(k) for k in ("attention_chunk", "attention_combine")))
PY
done
cp $L/bench_step_new6.json $OUT/${RUN}_bench_step_spec.json  # committed as run04_bench_step_spec_new6.json
timeout 100 $B bench verify --json $OUT/${RUN}_bench_verify.json > $L/bench_verify.log 2>&1
note "bench verify rc $? ($(( $(date +%s)-t0 ))s)"; grep -A7 '^V ' $L/bench_verify.log | cut -c1-110 >> $S
timeout 60 $B bench verify --method block --rows 1 > $L/bench_verify_block.log 2>&1
note "bench verify block rc $?"; grep -A3 '^V ' $L/bench_verify_block.log | cut -c1-80 >> $S
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
