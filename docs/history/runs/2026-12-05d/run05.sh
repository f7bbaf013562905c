#!/usr/bin/env bash
# 2026-12-05d run 5. new5 = main (f98eaf5's code); new7 = main + attention's combine with
# one column a thread for head dims up to 128 and 32 chunks' o_c loads in flight (was two
# columns and 16). (a) new7's attention and draft tests, check; (b) bench step --spec
# --timeline, new5 / new7 / new5 / new7 (the combine's calls summed).
set -u
RUN=${RUN:-run05}
for v in new5 new7; do mkdir -p b_$v && tar xJf .carry/bin_$v.tar.xz -C b_$v; done
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
B=./b_new7/sparkdraft
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
timeout 200 ./b_new7/sparkdraft_cuda_tests --gtest_filter='CudaAttention.*:CudaDraft.*:CudaTp.*-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*' > $L/tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $L/tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | head >> $S
for st in qwen3 muse; do
  timeout 60 $B check --style $st > $L/check_$st.log 2>&1
  note "check tiny $st rc $? $(grep 'check:' $L/check_$st.log | cut -c1-100)"
done
for v in new5 new7 new5b new7b; do
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
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
