#!/usr/bin/env bash
# 2026-12-05c run 1. Three builds: old = main (56b981b's code), new = + the residual
# boundary's 16-byte shared-memory walk (daf8971), new2 = new + attention's Q staged
# 16 bytes a load with every load before the first store, and the split path's o_c
# stored 8 bytes at a time. (a) new2's GPU tests (boundary, TP, norm, attention, draft),
# check; (b) bench step --timeline for old / new / new2 (boundary and attention time
# summed); (c) the profiles issues 22 and 24 need: ncu with source of attention at one
# request (new2 and old), of the verifier's resident kernel at one request and the staged
# kernels at 1 and 32 requests; bench verify at small vocabularies.
# Whatever has finished by 540 s is packed and comes back.
set -u
RUN=${RUN:-run01}
mkdir -p b_old b_new b_new2
tar xJf .carry/bin_old.tar.xz -C b_old
tar xJf .carry/bin.tar.xz -C b_new
tar xJf .carry/bin2.tar.xz -C b_new2
# The device code's line info names /tmp/res/src/...: point it at this tree.
[ -e /tmp/res ] || ln -s "$PWD" /tmp/res
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
work() {
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
B=./b_new2/sparkdraft
timeout 200 ./b_new2/sparkdraft_cuda_tests --gtest_filter='CudaResidualBoundary.*:PeerReduce.*:CudaTp.*:CudaRmsNorm*:CudaAttention.*:CudaDraft.*-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*' > $L/tests.log 2>&1
note "tests rc $? $(grep -E '^\[  PASSED  \]' $L/tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | head >> $S
for st in qwen3 muse; do
  timeout 60 $B check --style $st > $L/check_$st.log 2>&1
  note "check tiny $st rc $? $(grep 'check:' $L/check_$st.log | cut -c1-100)"
done
for v in old new new2; do
  timeout 150 ./b_$v/sparkdraft bench step --preset qwen3-8b --preset-dir /tmp --ctx 4096 --rows 1 8 32 --timeline \
    --json $OUT/${RUN}_bench_step_$v.json > $L/bench_step_$v.log 2>&1
  note "bench step $v rc $? ($(( $(date +%s)-t0 ))s)"; grep -A4 '^preset ' $L/bench_step_$v.log >> $S
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
note "-- ncu ($(( $(date +%s)-t0 ))s)"
NCU="ncu --set full --import-source yes --cache-control all --clock-control none"
for v in new2 old; do
  timeout 90 $NCU -k regex:attention_chunk -c 1 -o $OUT/ncu_attention_r1_$v ./b_$v/sparkdraft bench step --preset qwen3-8b \
    --preset-dir /tmp --ctx 4096 --rows 1 --repeats 1 > $L/ncu_attention_r1_$v.log 2>&1
  note "ncu attention rows 1 $v rc $? ($(( $(date +%s)-t0 ))s)"
done
timeout 80 $NCU -k regex:resident -c 1 -o $OUT/ncu_resident_r1 $B bench verify --form resident \
  --vocab 151936 --rows 1 --repeats 1 > $L/ncu_resident_r1.log 2>&1
note "ncu resident rows 1 rc $? ($(( $(date +%s)-t0 ))s)"
for rows in 1 32; do
  timeout 80 $NCU -k regex:'first_kernel|sums_kernel|draw_kernel' -c 6 -o $OUT/ncu_auto_r$rows $B bench verify \
    --form auto --vocab 151936 --rows $rows --repeats 1 > $L/ncu_auto_r$rows.log 2>&1
  note "ncu auto rows $rows rc $? ($(( $(date +%s)-t0 ))s)"
done
for form in auto resident; do
  timeout 40 $B bench verify --form $form --vocab 1024 16384 151936 --rows 1 8 32 > $L/bench_small_$form.log 2>&1
  note "bench verify $form small V rc $?"; grep -A10 '^V ' $L/bench_small_$form.log >> $S
done
}
work &
wp=$!
( sleep 540; kill $wp 2>/dev/null; sleep 1; pkill -f 'b_(old|new|new2)/sparkdraft' 2>/dev/null ) &
dog=$!
wait $wp 2>/dev/null
kill $dog 2>/dev/null
note "-- export ($(( $(date +%s)-t0 ))s)"
for f in $OUT/ncu_*.ncu-rep; do
  [ -e "$f" ] || continue
  b=$(basename $f .ncu-rep)
  timeout 20 ncu -i $f --page details --csv > $L/${b}_details.csv 2>&1
  timeout 20 ncu -i $f --page source --csv --print-source cuda > $L/${b}_source_cuda.csv 2>&1
  timeout 20 ncu -i $f --page source --csv --print-source sass > $L/${b}_source_sass.csv 2>&1
  note "$b: $(grep -E '"Duration"' $L/${b}_details.csv | awk -F'","' '{print $5 ":" $(NF)}' | tr -d '"' | tr '\n' ' ' | cut -c1-400)"
done
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs $(ls ncu_*.ncu-rep 2>/dev/null) && rm -rf logs ncu_*.ncu-rep
cat $S
