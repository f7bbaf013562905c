#!/usr/bin/env bash
# 2026-12-07e run 4 (sitting 28): W = main (345058d's kernels); Y = W + the grid-wide bound of
# each row loaded one epilogue ahead of its merge (branch s28-known: thread r's ld_volatile of
# p.known[r] issued right after the merge instead of just before phase A, so warp 0 no longer
# waits for that hot address while the block waits for warp 0 at the barrier after phase A;
# run 1's ncu at 8 rows). Y's Markov, draft and TP tests, check; bench markov --spec W Y W Y,
# --transform W Y; the step W Y; ncu of Y's fused_step_kernel at 8 requests of qwen3-8b.
# Carry .carry/bin_{W,Y}.tar.xz.
set -u
for b in W Y; do mkdir -p b_$b && tar xJf .carry/bin_$b.tar.xz -C b_$b; done
R=$OUT/run04; mkdir -p $R
echo "gpu: $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)" > $R/head.txt
timeout 120 b_Y/sparkdraft_cuda_tests --gtest_filter='Markov*:CudaDraft.*:CudaTp.*' > $R/tests_Y.log 2>&1
echo "Y tests rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/tests_Y.log | tr '\n' ' ')" >> $R/head.txt
grep -E '^\[  FAILED' $R/tests_Y.log | head -20 >> $R/head.txt
for style in qwen3 muse; do
  timeout 60 b_Y/sparkdraft check --style $style > $R/check_Y_$style.log 2>&1
  echo "check Y $style rc $? $(grep 'check:' $R/check_Y_$style.log | cut -c1-90)" >> $R/head.txt
done
n=0
for b in W Y W Y; do
  n=$((n + 1))
  timeout 40 b_$b/sparkdraft bench markov --spec --repeats 30 > $R/markov_${b}_$n.txt 2>&1
  echo "markov --spec $b $n: $(grep -E '^(151936|202048)' $R/markov_${b}_$n.txt | awk '{print $7 "(" $9 ")"}' | tr '\n' ' ')" >> $R/head.txt
done
for b in W Y; do
  n=$((n + 1))
  timeout 40 b_$b/sparkdraft bench markov --vocab 202048 --rank 512 --rows 1 8 32 --transform \
    --repeats 30 > $R/markovx_${b}_$n.txt 2>&1
  echo "markovx $b $n: $(grep -E '^202048' $R/markovx_${b}_$n.txt | awk '{print $7 "(" $9 ")"}' | tr '\n' ' ')" >> $R/head.txt
done
timeout 110 bash tools/gpu_ab.sh run04s --builds "W Y" --steps "W Y" --match fused_step gemm_wg attention > /dev/null 2>&1
echo "steps rc $?" >> $R/head.txt
mv $OUT/run04s_* $R/ 2>/dev/null
cat $R/head.txt
tail -32 $R/run04s_summary.txt 2>/dev/null
(cd $OUT && tar cJf run04_all.tar.xz run04)
L=$R/ncu; mkdir -p $L
timeout 100 ncu --clock-control none --kernel-name-base demangled -k "regex:fused_step_kernel" -c 1 \
  --set full --import-source yes -o "$L/k" ./b_Y/sparkdraft bench step --preset qwen3-8b \
  --ctx 4096 --rows 8 --repeats 2 --preset-dir /tmp > "$L/ncu.log" 2>&1
echo "ncu fused_step 8 rows rc $?" >> $R/head.txt
ncu -i "$L/k.ncu-rep" --page details > "$L/details.txt" 2>&1
ncu -i "$L/k.ncu-rep" --page source --csv --print-source sass > "$L/sass.csv" 2>&1
rm -f "$L/k.ncu-rep"
python3 tools/ncu_stalls.py "fused_step=$L/sass.csv" > "$L/stalls.txt" 2>&1
grep -E "Duration|Issue Slots Busy|Executed Instructions  |DRAM Throughput" $L/details.txt | head -6
head -24 $L/stalls.txt
cd $OUT && tar cJf run04_all.tar.xz run04 && rm -rf run04
