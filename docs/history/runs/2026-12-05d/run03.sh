#!/usr/bin/env bash
# 2026-12-05d run 3. new3 = main (ac2aa74); new4 = new3 + the automatic pick takes the
# resident form (one cooperative kernel) for one request. (a) new4's CudaVerify.*; (b)
# bench verify at 1 / 2 / 4 rows: new3 auto (staged) against new4 auto (resident at one
# row) and new4 --form resident at 2 and 4 rows (is the threshold right?), V 151936 and
# 202048, uniform and trained logits, then fp32 targets, T 0.7 and block verification at
# one row.
set -u
RUN=${RUN:-run03}
for v in new3 new4; do mkdir -p b_$v && tar xJf .carry/bin_$v.tar.xz -C b_$v; done
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
timeout 150 ./b_new4/sparkdraft_cuda_tests --gtest_filter='*Verify*' > $L/tests.log 2>&1
note "verify gpu tests rc $? $(grep -E '^\[  PASSED  \]' $L/tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | head >> $S
bv() {  # name binary args...
  local name=$1 b=$2; shift 2
  timeout 100 ./b_$b/sparkdraft bench verify --json $L/$name.json "$@" > $L/$name.log 2>&1
  note "$name rc $? ($(( $(date +%s)-t0 ))s)"; grep -A12 '^V ' $L/$name.log | cut -c1-80 >> $S
}
for rep in 1 2; do
  for lg in uniform trained; do
    bv ${lg}_new3_auto_$rep new3 --logits $lg --rows 1 2 4
    bv ${lg}_new4_auto_$rep new4 --logits $lg --rows 1 2 4
  done
done
bv uniform_new4_resident new4 --form resident --rows 2 4
bv f32_new3 new3 --dtype f32 --rows 1
bv f32_new4 new4 --dtype f32 --rows 1
bv t07_new3 new3 --temperature 0.7 --rows 1
bv t07_new4 new4 --temperature 0.7 --rows 1
bv block_new3 new3 --method block --rows 1
bv block_new4 new4 --method block --rows 1
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
