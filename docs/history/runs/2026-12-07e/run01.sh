#!/usr/bin/env bash
# 2026-12-07e run 1 (sitting 28), on whatever GPU comes. Builds (carry .carry/bin_{M,W,X}.tar.xz):
#   M = 32b24f4's code (CLI only), the reference of 2026-12-07d's transform regression;
#   W = main (4c8aa3f) + tanh-entry.patch (step_transform_n calls tanh_f32 only for the entries
#       tanh_fast does not trust; tanh_fast by one route, the 2^16-ulp test) + fast_or_slow_n (one
#       helper for the tries-then-slow form of silu_mul8, step_transform_n, o_norm_gate) and
#       near_float_boundary's tolerance argument (branch s28, 345058d);
#   X = W + the warp-local epilogue of the fused Markov step (kEpl 8, rows a multiple of 8 whose
#       phase-A items split evenly over the warps: the CTA barrier between the phases becomes a
#       warp's), with the Markov tests' new shapes (branch s28-wl).
# W's whole GPU suite on an H200, elsewhere its Markov, draft, TP, fast-math, SiLU and gate tests;
# X's Markov tests; check with W and X; bench markov --transform (rank 512, V 202048) M W X M W X;
# --spec W X W X; the step M W X; last, ncu of W's fused_step_kernel at 8 requests of qwen3-8b.
set -u
for b in M W X; do mkdir -p b_$b && tar xJf .carry/bin_$b.tar.xz -C b_$b; done
R=$OUT/run01; mkdir -p $R
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $gpu" > $R/head.txt
filter='Markov*:CudaDraft.*:CudaTp.*:CudaFastMath.*:CudaSiluMul.*:CudaONormGate.*'
[[ "$gpu" == *H200* ]] && filter='*'
timeout 200 b_W/sparkdraft_cuda_tests --gtest_filter="$filter" > $R/tests_W.log 2>&1
echo "W tests ($filter) rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/tests_W.log | tr '\n' ' ')" >> $R/head.txt
grep -E '^\[  FAILED' $R/tests_W.log | head -20 >> $R/head.txt
timeout 100 b_X/sparkdraft_cuda_tests --gtest_filter='Markov*:CudaDraft.*' > $R/tests_X.log 2>&1
echo "X tests rc $? $(grep -E '^\[  (PASSED|FAILED)' $R/tests_X.log | tr '\n' ' ')" >> $R/head.txt
grep -E '^\[  FAILED' $R/tests_X.log | head -20 >> $R/head.txt
for b in W X; do
  for style in qwen3 muse; do
    timeout 60 b_$b/sparkdraft check --style $style > $R/check_${b}_$style.log 2>&1
    echo "check $b $style rc $? $(grep 'check:' $R/check_${b}_$style.log | cut -c1-90)" >> $R/head.txt
  done
done
n=0
for b in M W X M W X; do
  n=$((n + 1))
  timeout 40 b_$b/sparkdraft bench markov --vocab 202048 --rank 512 --rows 1 8 32 --transform \
    --repeats 30 > $R/markovx_${b}_$n.txt 2>&1
  echo "markovx $b $n: $(grep -E '^202048' $R/markovx_${b}_$n.txt | awk '{print $7 "(" $9 ")"}' | tr '\n' ' ')" >> $R/head.txt
done
for b in W X W X; do
  n=$((n + 1))
  timeout 40 b_$b/sparkdraft bench markov --spec --repeats 30 > $R/markov_${b}_$n.txt 2>&1
  echo "markov --spec $b $n: $(grep -E '^(151936|202048)' $R/markov_${b}_$n.txt | awk '{print $7 "(" $9 ")"}' | tr '\n' ' ')" >> $R/head.txt
done
timeout 150 bash tools/gpu_ab.sh run01s --builds "M W X" --steps "M W X" --match fused_step o_norm_gate silu_mul gemm_wg attention > /dev/null 2>&1
echo "steps rc $?" >> $R/head.txt
mv $OUT/run01s_* $R/ 2>/dev/null
cat $R/head.txt
tail -32 $R/run01s_summary.txt 2>/dev/null
(cd $OUT && tar cJf run01_all.tar.xz run01)
L=$R/ncu; mkdir -p $L
timeout 120 ncu --clock-control none --kernel-name-base demangled -k "regex:fused_step_kernel" -c 1 \
  --set full --import-source yes -o "$L/k" ./b_W/sparkdraft bench step --preset qwen3-8b \
  --ctx 4096 --rows 8 --repeats 2 --preset-dir /tmp > "$L/ncu.log" 2>&1
echo "ncu fused_step 8 rows rc $?" >> $R/head.txt
ncu -i "$L/k.ncu-rep" --page details > "$L/details.txt" 2>&1
ncu -i "$L/k.ncu-rep" --page source --csv --print-source sass > "$L/sass.csv" 2>&1
rm -f "$L/k.ncu-rep"
python3 tools/ncu_stalls.py "fused_step=$L/sass.csv" > "$L/stalls.txt" 2>&1
grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|Executed Instructions  |Registers Per|Achieved Occupancy|Theoretical Occupancy|DRAM Throughput|Memory Throughput" $L/details.txt | head -12
head -30 $L/stalls.txt
cd $OUT && tar cJf run01_all.tar.xz run01 && rm -rf run01
