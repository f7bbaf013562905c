#!/usr/bin/env bash
# 2026-12-05c run 2. new2 = main at 31582e1 (run 1's new2); new3 = new2 + attention's
# prologue with its index math once a row (ranges, Q offsets, workspace bases, the
# chunk span by warp reductions), the first K/V loads before Q is staged, and the
# pieces as the slowest grid dimension. (a) new3's whole GPU suite, check; (b) bench
# step --timeline new2 / new3; (c) ncu with source of attention at 1 and 8 requests, and of
# the verifier's kernels at V 1024 (its fixed cost).
set -u
RUN=${RUN:-run02}
mkdir -p b_new2 b_new3
tar xJf .carry/bin2.tar.xz -C b_new2
tar xJf .carry/bin3.tar.xz -C b_new3
[ -e /tmp/res ] || ln -s "$PWD" /tmp/res
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
B=./b_new3/sparkdraft
timeout 200 ./b_new3/sparkdraft_cuda_tests > $L/tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $L/tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | head >> $S
for st in qwen3 muse; do
  timeout 60 $B check --style $st > $L/check_$st.log 2>&1
  note "check tiny $st rc $? $(grep 'check:' $L/check_$st.log | cut -c1-100)"
done
for v in new2 new3; do
  timeout 120 ./b_$v/sparkdraft bench step --preset qwen3-8b --preset-dir /tmp --ctx 4096 --rows 1 8 32 --timeline \
    --json $OUT/${RUN}_bench_step_$v.json > $L/bench_step_$v.log 2>&1
  note "bench step $v rc $? ($(( $(date +%s)-t0 ))s)"; grep -E '^qwen3-8b ' $L/bench_step_$v.log >> $S
  python3 - $OUT/${RUN}_bench_step_$v.json >> $S <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    t = r.get("fused_timeline", {}).get("timeline", [])
    def tot(key):
        b = [k["duration_us"] for k in t if key in k["name"]]
        return f"{len(b)} x {key} {sum(b):.1f} us"
    print(f"  rows {r.get('rows')}: " + "; ".join(tot(k) for k in ("residual_boundary", "attention_chunk", "attention_combine")))
PY
done
NCU="ncu --set full --import-source yes --cache-control all --clock-control none"
for rows in 1 8; do
  timeout 90 $NCU -k regex:attention_chunk -c 1 -o $OUT/ncu_attention_r${rows}_new3 $B bench step --preset qwen3-8b \
    --preset-dir /tmp --ctx 4096 --rows $rows --repeats 1 > $L/ncu_attention_r${rows}_new3.log 2>&1
  note "ncu attention rows $rows new3 rc $? ($(( $(date +%s)-t0 ))s)"
done
# The verifier's fixed cost (issue 22): its kernels at V 1024, one request.
timeout 60 $NCU -k regex:'first_kernel|sums_kernel|draw_kernel' -c 3 -o $OUT/ncu_verify_v1024_r1 $B bench verify \
  --form auto --vocab 1024 --rows 1 --repeats 1 > $L/ncu_verify_v1024_r1.log 2>&1
note "ncu verify V 1024 rows 1 rc $? ($(( $(date +%s)-t0 ))s)"
for f in $OUT/ncu_*.ncu-rep; do
  [ -e "$f" ] || continue
  b=$(basename $f .ncu-rep)
  timeout 20 ncu -i $f --page details --csv > $L/${b}_details.csv 2>&1
  timeout 20 ncu -i $f --page source --csv --print-source sass > $L/${b}_source_sass.csv 2>&1
  note "$b: $(grep -E '"Duration"' $L/${b}_details.csv | awk -F'","' '{print $5 ":" $(NF)}' | tr -d '"' | tr '\n' ' ' | cut -c1-400)"
done
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs $(ls ncu_*.ncu-rep 2>/dev/null) && rm -rf logs ncu_*.ncu-rep
cat $S
