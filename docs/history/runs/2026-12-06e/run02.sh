#!/usr/bin/env bash
# 2026-12-06e run 2: where the sliced wide tile waits (N2 of run 1: o_proj and down at 224 tokens
# of qwen3-8b, gemm_wg_kernel<2, 224, false, false, 8>: one K slice a CTA of a cluster of eight).
# ncu (clocks left alone, --set full, source imported) on the step's first launch (o_proj) and its
# second (down); ctx 64 (the GEMMs do not depend on it). Out: details pages, the SASS source pages
# (CSV) and tools/ncu_stalls.py's table of their stall samples.
set -u
RUN=${RUN:-run02}
mkdir -p b_N2 && tar xJf .carry/bin_N2.tar.xz -C b_N2
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> $S
k="gemm_wg_kernel<.int.2, .int.224, .bool.0, .bool.0, .int.8>"
for i in 1 2; do
  timeout 200 ncu --clock-control none --kernel-name-base demangled -k "regex:$k" \
    --launch-skip $((i - 1)) -c 1 --set full --import-source yes -o $L/k$i \
    ./b_N2/sparkdraft bench step --preset qwen3-8b --ctx 64 --rows 32 --repeats 2 --preset-dir /tmp \
    > $L/ncu_k$i.log 2>&1
  echo "ncu k$i (launch $i of $k) rc $? ($(( $(date +%s)-t0 ))s)" >> $S
  ncu -i $L/k$i.ncu-rep --page details > $L/k${i}_details.txt 2>&1
  ncu -i $L/k$i.ncu-rep --page source --csv --print-source sass > $L/k${i}_sass.csv 2>&1
  grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Issue Slots Busy|Achieved Occupancy|Warp Cycles Per Issued|Executed Instructions  |Registers Per|Grid Size|Waves Per SM|luster" $L/k${i}_details.txt | head -24 >> $S
  rm -f $L/k$i.ncu-rep
done
python3 tools/ncu_stalls.py "k1 o_proj=$L/k1_sass.csv" "k2 down=$L/k2_sass.csv" >> $S 2>&1
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
