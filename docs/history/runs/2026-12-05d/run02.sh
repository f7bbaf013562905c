#!/usr/bin/env bash
# 2026-12-05d run 2. base = main (b820915); new3 = base + the draw kernel's per-id code
# reordered: the cache's value loaded before p's chain, and past the prune the uniform
# (Philox) and q as two independent chains (select.h race_fold_u takes the uniform).
# (a) new3's verifier GPU tests; (b) bench verify base / new3 on uniform and trained
# logits; (c) ncu with source of attention at 8 and 32 requests (base), for issue 24.
set -u
RUN=${RUN:-run02}
for v in base new3; do mkdir -p b_$v && tar xJf .carry/bin_$v.tar.xz -C b_$v; done
[ -e /tmp/res ] || ln -s "$PWD" /tmp/res
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
work() {
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
timeout 150 ./b_new3/sparkdraft_cuda_tests --gtest_filter='*Verify*' > $L/tests.log 2>&1
note "verify gpu tests rc $? $(grep -E '^\[  PASSED  \]' $L/tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | head >> $S
for lg in uniform trained; do
  for v in base new3 base new3; do
    timeout 100 ./b_$v/sparkdraft bench verify --logits $lg --json $OUT/${RUN}_bench_verify_${lg}_$v.json > $L/bench_verify_${lg}_$v.log 2>&1
    note "bench verify $lg $v rc $? ($(( $(date +%s)-t0 ))s)"; grep -A7 '^V ' $L/bench_verify_${lg}_$v.log | cut -c1-80 >> $S
  done
done
NCU="ncu --set full --import-source yes --cache-control all --clock-control none"
for rows in 32 8; do
  timeout 90 $NCU -k regex:attention -c 2 -o $OUT/ncu_attention_r$rows ./b_base/sparkdraft bench step --preset qwen3-8b \
    --preset-dir /tmp --ctx 4096 --rows $rows --repeats 1 > $L/ncu_attention_r$rows.log 2>&1
  note "ncu attention rows $rows rc $? ($(( $(date +%s)-t0 ))s)"
done
timeout 60 $NCU -k regex:draw_kernel -c 1 -o $OUT/ncu_draw_r32 ./b_new3/sparkdraft bench verify \
  --vocab 151936 --rows 32 --repeats 1 > $L/ncu_draw_r32.log 2>&1
note "ncu draw rows 32 new3 rc $? ($(( $(date +%s)-t0 ))s)"
}
work &
wp=$!
( sleep 540; kill $wp 2>/dev/null; sleep 1; pkill -f 'b_(base|new3)/sparkdraft' 2>/dev/null ) &
dog=$!
wait $wp 2>/dev/null
kill $dog 2>/dev/null
note "-- export ($(( $(date +%s)-t0 ))s)"
for f in $OUT/ncu_*.ncu-rep; do
  [ -e "$f" ] || continue
  b=$(basename $f .ncu-rep)
  timeout 20 ncu -i $f --page details --csv > $L/${b}_details.csv 2>&1
  timeout 40 ncu -i $f --page source --csv --print-source sass > $L/${b}_source_sass.csv 2>&1
  timeout 40 ncu -i $f --page source --csv --print-source cuda > $L/${b}_source_cuda.csv 2>&1
  note "$b: $(grep -E '"Duration"' $L/${b}_details.csv | awk -F'","' '{print $5 ":" $(NF)}' | tr -d '"' | tr '\n' ' ' | cut -c1-400)"
done
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs ncu_*.ncu-rep
cat $S
