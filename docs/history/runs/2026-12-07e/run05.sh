#!/usr/bin/env bash
# 2026-12-07e run 5 (sitting 28): W = main's kernels, Y = run 4's (each row's grid-wide bound
# loaded one epilogue ahead of its merge: faster at 8 rows, about 1% slower at 32), Z = W with
# that load issued at the first iteration of each epilogue's group of tiles (at 32 rows of rank
# 256, one tile a group, the same as W; branch s28-known2). Z's Markov and draft tests, check;
# bench markov --spec W Y Z W Y Z; --transform Y Z. Carry .carry/bin_{Wc,Yc,Z}.tar.xz (Wc, Yc:
# the CLI of W and Y).
set -u
mkdir -p b_W b_Y b_Z && tar xJf .carry/bin_Wc.tar.xz -C b_W && tar xJf .carry/bin_Yc.tar.xz -C b_Y && tar xJf .carry/bin_Z.tar.xz -C b_Z
R=$OUT/run05; mkdir -p $R
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" > $R/head.txt
timeout 100 b_Z/sparkdraft_cuda_tests --gtest_filter='Markov*:CudaDraft.*' > $R/tests_Z.log 2>&1
echo "Z tests rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/tests_Z.log | tr '\n' ' ')" >> $R/head.txt
grep -E '^\[  FAILED' $R/tests_Z.log | head -20 >> $R/head.txt
for style in qwen3 muse; do
  timeout 60 b_Z/sparkdraft check --style $style > $R/check_Z_$style.log 2>&1
  echo "check Z $style rc $? $(grep 'check:' $R/check_Z_$style.log | cut -c1-90)" >> $R/head.txt
done
n=0
for b in W Y Z W Y Z; do
  n=$((n + 1))
  timeout 40 b_$b/sparkdraft bench markov --spec --repeats 30 > $R/markov_${b}_$n.txt 2>&1
  echo "markov --spec $b $n: $(grep -E '^(151936|202048)' $R/markov_${b}_$n.txt | awk '{print $7 "(" $9 ")"}' | tr '\n' ' ')" >> $R/head.txt
done
for b in Y Z; do
  n=$((n + 1))
  timeout 40 b_$b/sparkdraft bench markov --vocab 202048 --rank 512 --rows 1 8 32 --transform \
    --repeats 30 > $R/markovx_${b}_$n.txt 2>&1
  echo "markovx $b $n: $(grep -E '^202048' $R/markovx_${b}_$n.txt | awk '{print $7 "(" $9 ")"}' | tr '\n' ' ')" >> $R/head.txt
done
cat $R/head.txt
cd $OUT && tar cJf run05_all.tar.xz run05 && rm -rf run05
