#!/usr/bin/env bash
# 2026-12-05d run 1. Three builds: base = main (b820915), new = + the draw kernel's rows
# read 16 bytes a load (target and cache row together, the next vector in flight) with
# the per-id code in one rolled loop, new2 = new + the lists form's histogram count with
# 8 vectors a thread in flight (was 4). (a) new2's whole GPU suite (the head-dim-13
# attention case has never run), check; (b) bench verify base / new / new2; (c) bench
# step --spec (new2); (d) ncu with source of the verifier's kernels at 32 rows (new2).
# Whatever has finished by 540 s is packed and comes back.
set -u
RUN=${RUN:-run01}
for v in base new new2; do mkdir -p b_$v && tar xJf .carry/bin_$v.tar.xz -C b_$v; done
[ -e /tmp/res ] || ln -s "$PWD" /tmp/res
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
work() {
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
B=./b_new2/sparkdraft
timeout 260 ./b_new2/sparkdraft_cuda_tests > $L/tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $L/tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | head >> $S
for st in qwen3 muse; do
  timeout 60 $B check --style $st > $L/check_$st.log 2>&1
  note "check tiny $st rc $? $(grep 'check:' $L/check_$st.log | cut -c1-100)"
done
for v in base new new2; do
  timeout 100 ./b_$v/sparkdraft bench verify --json $OUT/${RUN}_bench_verify_$v.json > $L/bench_verify_$v.log 2>&1
  note "bench verify $v rc $? ($(( $(date +%s)-t0 ))s)"; grep -A7 '^V ' $L/bench_verify_$v.log >> $S
done
timeout 150 $B bench step --spec --preset-dir /tmp --json $OUT/${RUN}_bench_step_spec.json > $L/bench_step_spec.log 2>&1
note "bench step --spec new2 rc $? ($(( $(date +%s)-t0 ))s)"; grep -A7 '^preset ' $L/bench_step_spec.log >> $S
NCU="ncu --set full --import-source yes --cache-control all --clock-control none"
timeout 80 $NCU -k regex:'first_kernel|sums_kernel|draw_kernel' -c 3 -o $OUT/ncu_verify_r32 $B bench verify \
  --vocab 151936 --rows 32 --repeats 1 > $L/ncu_verify_r32.log 2>&1
note "ncu verify rows 32 rc $? ($(( $(date +%s)-t0 ))s)"
}
work &
wp=$!
( sleep 540; kill $wp 2>/dev/null; sleep 1; pkill -f 'b_(base|new|new2)/sparkdraft' 2>/dev/null ) &
dog=$!
wait $wp 2>/dev/null
kill $dog 2>/dev/null
note "-- export ($(( $(date +%s)-t0 ))s)"
for f in $OUT/ncu_*.ncu-rep; do
  [ -e "$f" ] || continue
  b=$(basename $f .ncu-rep)
  timeout 20 ncu -i $f --page details --csv > $L/${b}_details.csv 2>&1
  timeout 30 ncu -i $f --page source --csv --print-source sass > $L/${b}_source_sass.csv 2>&1
  note "$b: $(grep -E '"Duration"' $L/${b}_details.csv | awk -F'","' '{print $5 ":" $(NF)}' | tr -d '"' | tr '\n' ' ' | cut -c1-400)"
done
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs $(ls ncu_*.ncu-rep 2>/dev/null) && rm -rf logs ncu_*.ncu-rep
cat $S
