#!/usr/bin/env bash
# 2026-12-07e run 7 (sitting 28): Z = main (4dd0927's kernels, CLI only); P = Z + the vector path
# and the base-logit prefetch for 4-entry slots (kEpl 4, rows 4-15: one 8-byte load of base and
# one 8-byte store of cache a slot, the base requested before phase A, as 8-entry slots already
# did; branch s28-pre). P's Markov tests, check; bench markov --spec Z P Z P. Carry
# .carry/bin_{Zc,P}.tar.xz.
set -u
mkdir -p b_Z b_P && tar xJf .carry/bin_Zc.tar.xz -C b_Z && tar xJf .carry/bin_P.tar.xz -C b_P
R=$OUT/run07; mkdir -p $R
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" > $R/head.txt
timeout 100 b_P/sparkdraft_cuda_tests --gtest_filter='Markov*:CudaDraft.*' > $R/tests_P.log 2>&1
echo "P tests rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/tests_P.log | tr '\n' ' ')" >> $R/head.txt
grep -E '^\[  FAILED' $R/tests_P.log | head -20 >> $R/head.txt
for style in qwen3 muse; do
  timeout 60 b_P/sparkdraft check --style $style > $R/check_P_$style.log 2>&1
  echo "check P $style rc $? $(grep 'check:' $R/check_P_$style.log | cut -c1-90)" >> $R/head.txt
done
n=0
for b in Z P Z P; do
  n=$((n + 1))
  timeout 40 b_$b/sparkdraft bench markov --spec --repeats 30 > $R/markov_${b}_$n.txt 2>&1
  echo "markov --spec $b $n: $(grep -E '^(151936|202048)' $R/markov_${b}_$n.txt | awk '{print $7 "(" $9 ")"}' | tr '\n' ' ')" >> $R/head.txt
done
cat $R/head.txt
cd $OUT && tar cJf run07_all.tar.xz run07 && rm -rf run07
