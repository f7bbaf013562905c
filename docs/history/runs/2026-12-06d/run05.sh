#!/usr/bin/env bash
# 2026-12-06d run 5: where the 224-token K-sliced GEMM waits (issue 24, for the next sitting).
# ncu (clocks left alone, --set full, source imported) on the first launch of o_proj / down's
# tile at 32 requests of qwen3-8b (gemm_wg_kernel<2, 128, false, true, 2>: 128 tokens, two slice
# groups of two slices, the halves on a cluster's two CTAs; ctx 64: the GEMMs do not depend on
# it) and of the wide tile (gemm_wg_kernel<1, 224, ...>: qkv and gate_up), with F (main's code
# at 35d3b4b). Out: the reports and their per-SASS source pages (stall samples per instruction).
set -u
RUN=${RUN:-run05}
mkdir -p b_F && tar xJf .carry/bin_F.tar.xz -C b_F
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> $S
i=0
# ncu's demangled names spell the arguments (int)2, (bool)0, ...
for k in "gemm_wg_kernel<.int.2, .int.128, .bool.0, .bool.1, .int.2>" \
  "gemm_wg_kernel<.int.1, .int.224, .bool.0, .bool.0, .int.1>"; do
  i=$((i + 1))
  timeout 150 ncu --clock-control none --kernel-name-base demangled -k "regex:$k" -c 1 \
    --set full --import-source yes -o $L/k$i ./b_F/sparkdraft bench step --preset qwen3-8b --ctx 64 \
    --rows 32 --repeats 2 --preset-dir /tmp > $L/ncu_k$i.log 2>&1
  echo "ncu k$i ($k) rc $? ($(( $(date +%s)-t0 ))s)" >> $S
  ncu -i $L/k$i.ncu-rep --page details > $L/k${i}_details.txt 2>&1
  ncu -i $L/k$i.ncu-rep --page source --csv --print-source sass > $L/k${i}_sass.csv 2>&1
  grep -E "Duration|DRAM Throughput|L2 Cache Throughput|Compute \(SM\)|Issue Slots Busy|Achieved Occupancy|Warp Cycles Per Issued|Executed Instructions  |Registers Per|Grid Size|Waves Per SM" $L/k${i}_details.txt | head -14 >> $S
done
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
