#!/usr/bin/env bash
# 2026-12-05f run 7: where attention and the Markov step lose issue slots at 32 requests
# (qwen3-8b, ctx 4096), for the next sitting. main = fd545fb (H of run 6). ncu (clocks left
# alone) on one attention_chunk launch and one fused Markov step launch of
# `bench step --preset qwen3-8b --rows 32`, sections SourceCounters + WarpStateStats +
# InstructionStats, then each report's per-SASS-instruction source page as CSV (executed
# instructions, stall samples, shared-memory wavefronts and excess per instruction).
set -u
RUN=${RUN:-run07}
mkdir -p b_H && tar xJf .carry/bin_H.tar.xz -C b_H
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> $S
for k in attention_chunk fused_step_kernel; do
  timeout 150 ncu --clock-control none --kernel-name-base demangled -k "regex:$k" -c 1 \
    --section SourceCounters --section WarpStateStats --section InstructionStats --section SpeedOfLight \
    -o $L/$k ./b_H/sparkdraft bench step --preset qwen3-8b --rows 32 --repeats 1 --preset-dir /tmp > $L/${k}_run.log 2>&1
  echo "ncu $k rc $? ($(( $(date +%s)-t0 ))s)" >> $S
  ncu -i $L/$k.ncu-rep --page details > $L/${k}_details.txt 2>&1
  ncu -i $L/$k.ncu-rep --page source --print-source sass --csv > $L/${k}_sass.csv 2>&1 || \
    ncu -i $L/$k.ncu-rep --page source --csv > $L/${k}_sass.csv 2>&1
  echo "  source page rc $? $(wc -l < $L/${k}_sass.csv) lines; $(head -c 300 $L/${k}_sass.csv | head -2 | tr '\n' ' ' | cut -c1-250)" >> $S
  grep -E "Duration|Warp Cycles Per Issued|Issue Slots|Executed Instructions  |Excessive|excessive" $L/${k}_details.txt | head -8 >> $S
done
echo "total $(( $(date +%s)-t0 ))s" >> $S
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
