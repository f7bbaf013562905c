#!/usr/bin/env bash
# 2026-12-07d run 6 (sitting 27; not run: no device time was left): V = main (U of run 2) with
# step_transform_n calling tanh_f32 only for the entries tanh_fast does not trust (U called it for
# all of the slot's entries when one was not trusted: run 5's ncu put U's extra time at the
# barrier, 16% of the samples), and tanh_fast by one route (tanh = -m / (2 + m), m = exp(-2a) - 1,
# the 2^16-ulp test; tanh_v2_host_check.cpp), the same bits if CudaFastMath.Tanh* passes. Build V
# from branch tanh-entry. M = 32b24f4's code. V's Markov, draft and fast-math GPU tests and check, then
# bench markov --transform (rank 512, V 202048) M V M V and --spec M V. Carry
# .carry/bin_{M,V}.tar.xz (M the CLI only). Everything tarred into run06_all.tar.xz.
set -u
for b in M V; do mkdir -p b_$b && tar xJf .carry/bin_$b.tar.xz -C b_$b; done
R=$OUT/run06; mkdir -p $R
timeout 150 b_V/sparkdraft_cuda_tests --gtest_filter='Markov*:CudaDraft.*:CudaFastMath.Tanh*' > $R/tests.log 2>&1
echo "V tests rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/tests.log | tr '\n' ' ')" > $R/head.txt
for style in qwen3 muse; do
  timeout 60 b_V/sparkdraft check --style $style > $R/check_$style.log 2>&1
  echo "check $style rc $? $(grep 'check:' $R/check_$style.log | cut -c1-90)" >> $R/head.txt
done
n=0
for b in M V M V; do
  n=$((n + 1))
  timeout 40 b_$b/sparkdraft bench markov --vocab 202048 --rank 512 --rows 1 8 32 --transform \
    --repeats 30 > $R/markovx_${b}_$n.txt 2>&1
  echo "markovx $b $n: $(grep -E '^202048' $R/markovx_${b}_$n.txt | awk '{print $7 "(" $9 ")"}' | tr '\n' ' ')" >> $R/head.txt
done
for b in M V; do
  n=$((n + 1))
  timeout 40 b_$b/sparkdraft bench markov --spec --repeats 30 > $R/markov_${b}_$n.txt 2>&1
  echo "markov --spec $b $n: $(grep -E '^(151936|202048)' $R/markov_${b}_$n.txt | awk '{print $7 "(" $9 ")"}' | tr '\n' ' ')" >> $R/head.txt
done
cat $R/head.txt
cd $OUT && tar cJf run06_all.tar.xz run06 && rm -rf run06
