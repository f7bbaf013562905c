#!/usr/bin/env bash
# 2026-12-06a run 1: (a) build J = main (H) + the narrower wgmma shapes (m64n160/192/224k16)
# in WgmmaProbe's fourteen families and in the start-up wgmma_self_test + attention's chunks
# inside every row's range without masks (a second, unmasked form of the score-to-p section);
# K = J + attention's P.V n-tiles without a branch between them (WQ divides 2 KS): K's whole
# GPU suite and check, then the step H J K H J K (tools/gpu_ab.sh); (b) 2026-12-05f run 7
# (not run then), on K: ncu's per-SASS source page of one attention_chunk launch (the fused
# Markov step and the 8-row launch left out) of `bench step --preset qwen3-8b --rows 32`.
set -u
bash tools/gpu_ab.sh run01 --builds "H J K" --suite K --steps "H J K H J K"
S=$OUT/run01b_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
for spec in "attention_chunk 32"; do
  set -- $spec; k=$1; r=$2
  timeout 150 ncu --clock-control none --kernel-name-base demangled -k "regex:$k" -c 1 \
    --section SourceCounters --section WarpStateStats --section InstructionStats \
    --section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy \
    -o $L/${k}_$r ./b_K/sparkdraft bench step --preset qwen3-8b --rows $r --repeats 1 \
    --preset-dir /tmp > $L/${k}_${r}_run.log 2>&1
  echo "ncu $k rows $r rc $? ($(( $(date +%s)-t0 ))s)" >> $S
  ncu -i $L/${k}_$r.ncu-rep --page details > $L/${k}_${r}_details.txt 2>&1
  ncu -i $L/${k}_$r.ncu-rep --page source --print-source sass --csv > $L/${k}_${r}_sass.csv 2>&1
  echo "  source page rc $? $(wc -l < $L/${k}_${r}_sass.csv) lines" >> $S
  grep -E "^    Duration|Warp Cycles Per Issued|Issue Slots Busy|Executed Instructions  |Registers Per|Achieved Occupancy|Memory Throughput|DRAM Throughput" $L/${k}_${r}_details.txt | head -10 >> $S
done
echo "total $(( $(date +%s)-t0 ))s" >> $S
cd $OUT && tar cJf run01b_logs.tar.xz logs && rm -rf logs
cat $OUT/run01_summary.txt $S
