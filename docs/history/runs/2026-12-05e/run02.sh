#!/usr/bin/env bash
# 2026-12-05e run 2. base = main at 118fcb2. Attention's first split folding its own chunks,
# v2 (a separate instantiation for splits > 1, so the one-split kernel no longer carries the
# split path's code): A = the one-split instantiation unchanged in logic, the first split an
# even share; B = the one-split instantiation without the split path (fold_self constant),
# the first split 12/16 of an even share; C = B with 8/16. (a) B's whole GPU suite, check;
# (b) bench step --spec --timeline base / A / B / C / base / B (attention's calls summed).
set -u
RUN=${RUN:-run02}
for v in base A B C; do mkdir -p b_$v && tar xJf .carry/bin_$v.tar.xz -C b_$v; done
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
timeout 260 ./b_B/sparkdraft_cuda_tests > $L/tests.log 2>&1
note "B gpu suite rc $? $(grep -E '^\[  PASSED  \]' $L/tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | head >> $S
for st in qwen3 muse; do
  timeout 60 ./b_B/sparkdraft check --style $st > $L/check_$st.log 2>&1
  note "check tiny $st rc $? $(grep 'check:' $L/check_$st.log | cut -c1-100)"
done
for v in base A B C base2 B2; do
  b=${v%2}
  timeout 100 ./b_$b/sparkdraft bench step --spec --timeline --preset-dir /tmp --json $L/step_$v.json > $L/step_$v.log 2>&1
  note "bench step --spec $v rc $? ($(( $(date +%s)-t0 ))s)"; grep -A6 'memory clock' $L/step_$v.log | tail -6 | cut -c1-80 >> $S
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
