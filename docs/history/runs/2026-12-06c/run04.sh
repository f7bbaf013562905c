#!/usr/bin/env bash
# 2026-12-06c run 4: profile of main (R = 26116ce, run 3's R) at 32 requests of muse, ctx 64:
# ncu (clocks left alone) on the step's first 2 o_norm_gate launches and first 2
# residual_boundary launches (+ SourceCounters). The question: why a kernel that moves 11 MB
# (o_norm_gate at 224 tokens: 16.8 us a call on an H100 after run 3) or 22 MB (muse's
# boundary: 16.7 us) sits at 3-7x its bytes - issue, latency, occupancy or stalls, and where.
set -u
RUN=${RUN:-run04}
mkdir -p b_R && tar xJf .carry/bin_R.tar.xz -C b_R
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> $S
SEC="--section SpeedOfLight --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section InstructionStats --section LaunchStats --section SchedulerStats --section SourceCounters"
for k in o_norm_gate residual_boundary; do
  timeout 200 ncu --clock-control none --kernel-name-base demangled -k "regex:${k}_kernel" -c 2 $SEC \
    ./b_R/sparkdraft bench step --preset muse --ctx 64 --rows 32 --repeats 2 --preset-dir /tmp > $L/ncu_$k.log 2>&1
  echo "ncu $k rc $? ($(( $(date +%s)-t0 ))s)" >> $S
done
for f in $L/ncu_o_norm_gate.log $L/ncu_residual_boundary.log; do python3 - $f >> $S <<'PY'
import re, sys
txt = open(sys.argv[1]).read()
keys = ("Duration", "Memory Throughput", "DRAM Throughput", "L1/TEX Cache Throughput", "L2 Cache Throughput",
        "Compute (SM) Throughput", "Executed Ipc Active", "Issue Slots Busy", "Registers Per Thread",
        "Achieved Occupancy", "Theoretical Occupancy", "Block Limit", "Warp Cycles Per Issued Instruction",
        "Executed Instructions", "Stall", "Grid Size", "Block Size", "Waves Per SM", "One or More Eligible",
        "Active Warps Per Scheduler", "Eligible Warps Per Scheduler")
for block in re.split(r"\n(?=  \S.*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\))", txt)[1:]:
    head = block.splitlines()[0].strip()
    print(head[:150])
    for line in block.splitlines():
        s = line.strip()
        if any(s.startswith(k) for k in keys):
            print("   ", re.sub(r"\s{2,}", "  ", s)[:110])
PY
done
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
