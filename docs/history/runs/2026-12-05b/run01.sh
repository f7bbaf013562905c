#!/usr/bin/env bash
# 2026-12-05b run 1. (a) The residual boundary's sum of squares read 16 bytes at a time, loads
# ahead of the chain (bin.tar.xz, /tmp/res at c6ce934 + that change) against main's binaries
# (bin_old.tar.xz, 56b981b): its GPU tests, check, bench step with the timeline. (b) Where the
# verifier's time goes (issue 22): ncu with source-level stall sampling of the resident kernel
# at one request and of the staged kernels at 1 / 8 / 32 requests; bench verify at small
# vocabularies (the fixed cost a call). (c) ncu with source of attention_chunk_kernel at one
# request (issue 24: where its instructions go when each CTA has two chunks).
set -u
RUN=${RUN:-run01}
mkdir -p build old
tar xJf .carry/bin.tar.xz -C build
tar xJf .carry/bin_old.tar.xz -C old
# The device code's line info names /tmp/res/src/...: point it at this tree.
[ -e /tmp/res ] || ln -s "$PWD" /tmp/res
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
B=./build/sparkdraft
timeout 150 ./build/sparkdraft_cuda_tests --gtest_filter='CudaResidualBoundary.*:PeerReduce.*:CudaTp.*:CudaRmsNorm*:CudaDraft.*-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*' > $L/tests.log 2>&1
note "tests rc $? $(grep -E '^\[  PASSED  \]' $L/tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | head >> $S
for st in qwen3 muse; do
  timeout 60 $B check --style $st > $L/check_$st.log 2>&1
  note "check tiny $st rc $? $(grep 'check:' $L/check_$st.log | cut -c1-100)"
done
for v in new old; do
  bin=$B; [ $v = old ] && bin=./old/sparkdraft
  timeout 200 $bin bench step --preset qwen3-8b --preset-dir /tmp --ctx 4096 --rows 1 8 32 --timeline \
    --json $OUT/${RUN}_bench_step_$v.json > $L/bench_step_$v.log 2>&1
  note "bench step $v rc $? ($(( $(date +%s)-t0 ))s)"; grep -A4 '^preset ' $L/bench_step_$v.log >> $S
  python3 - $OUT/${RUN}_bench_step_$v.json >> $S <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    t = r.get("fused_timeline", {}).get("timeline", [])
    b = [k["duration_us"] for k in t if "residual_boundary" in k["name"]]
    print(f"  rows {r.get('rows')}: {len(b)} boundaries {sum(b):.1f} us (each {min(b or [0]):.1f}-{max(b or [0]):.1f})")
PY
done
for form in auto resident; do
  timeout 60 $B bench verify --form $form --vocab 1024 16384 151936 --rows 1 8 32 > $L/bench_small_$form.log 2>&1
  note "bench verify $form small V rc $?"; grep -A10 '^V ' $L/bench_small_$form.log >> $S
done
note "-- ncu ($(( $(date +%s)-t0 ))s)"
NCU="ncu --set full --import-source yes --cache-control all --clock-control none"
timeout 100 $NCU -k regex:resident -c 1 -o $OUT/ncu_resident_r1 $B bench verify --form resident \
  --vocab 151936 --rows 1 --repeats 1 > $L/ncu_resident_r1.log 2>&1
note "ncu resident rows 1 rc $?"
for rows in 1 32; do
  timeout 100 $NCU -k regex:'first_kernel|sums_kernel|draw_kernel' -c 6 -o $OUT/ncu_auto_r$rows $B bench verify \
    --form auto --vocab 151936 --rows $rows --repeats 1 > $L/ncu_auto_r$rows.log 2>&1
  note "ncu auto rows $rows rc $?"
done
timeout 120 $NCU -k regex:attention_chunk -c 1 -o $OUT/ncu_attention_r1 $B bench step --preset qwen3-8b \
  --preset-dir /tmp --ctx 4096 --rows 1 --repeats 1 > $L/ncu_attention_r1.log 2>&1
note "ncu attention rows 1 rc $?"
for f in $OUT/ncu_*.ncu-rep; do
  b=$(basename $f .ncu-rep)
  ncu -i $f --page details --csv > $L/${b}_details.csv 2>&1
  ncu -i $f --page source --csv --print-source cuda > $L/${b}_source_cuda.csv 2>&1
  ncu -i $f --page source --csv --print-source sass > $L/${b}_source_sass.csv 2>&1
  note "$b: $(grep -E '"Duration"' $L/${b}_details.csv | awk -F'","' '{print $5 ":" $(NF)}' | tr -d '"' | tr '\n' ' ' | cut -c1-400)"
done
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs ncu_*.ncu-rep && rm -rf logs ncu_*.ncu-rep
cat $S
