#!/usr/bin/env bash
# 2026-12-05f run 5 (run 4 caught the context fill's GEMMs, not the step's): profile of main (711b880 = run 2's E) at 32 requests of qwen3-8b, ctx 4096:
# ncu (clocks left alone) on the first 16 wg GEMM launches of `bench step --preset qwen3-8b
# --rows 32 --ctx 64` (the context fill's, then the step's: qkv, o_proj, gate_up, down at 224
# tokens) and the first 2 attention launches at ctx 4096 (+ SourceCounters), sections SpeedOfLight, ComputeWorkloadAnalysis, MemoryWorkloadAnalysis, Occupancy,
# WarpStateStats, InstructionStats, LaunchStats. The question: what bounds the 224-token
# GEMMs (tensor pipe, L2, shared memory, latency) and attention (issue, which stalls).
set -u
RUN=${RUN:-run05}
mkdir -p b_E && tar xJf .carry/bin_E.tar.xz -C b_E
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> $S
SEC="--section SpeedOfLight --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis --section Occupancy --section WarpStateStats --section InstructionStats --section LaunchStats"
# GEMMs: ctx 64 (the context fill then has few launches), the first 16 wg GEMMs.
timeout 300 ncu --clock-control none --kernel-name-base demangled -k 'regex:gemm_wg_kernel' -c 16 $SEC \
  ./b_E/sparkdraft bench step --preset qwen3-8b --ctx 64 --rows 32 --repeats 2 --preset-dir /tmp > $L/ncu_gemm.log 2>&1
echo "ncu gemm rc $? ($(( $(date +%s)-t0 ))s)" >> $S
# Attention at ctx 4096: its first 2 launches.
timeout 200 ncu --clock-control none --kernel-name-base demangled -k 'regex:attention_chunk' -c 2 $SEC --section SourceCounters \
  ./b_E/sparkdraft bench step --preset qwen3-8b --rows 32 --repeats 2 --preset-dir /tmp > $L/ncu_attn.log 2>&1
echo "ncu attention rc $? ($(( $(date +%s)-t0 ))s)" >> $S
for f in $L/ncu_gemm.log $L/ncu_attn.log; do python3 - $f >> $S <<'PY'
import re, sys
txt = open(sys.argv[1]).read()
keys = ("Duration", "Memory Throughput", "DRAM Throughput", "L1/TEX Cache Throughput", "L2 Cache Throughput",
        "Compute (SM) Throughput", "Executed Ipc Active", "Issue Slots Busy", "Registers Per Thread",
        "Achieved Occupancy", "Warp Cycles Per Issued Instruction", "Executed Instructions",
        "Stall Long Scoreboard", "Stall Barrier", "Stall Wait", "Stall Math Pipe Throttle")
for block in re.split(r"\n(?=  \S.*\(\d+, \d+, \d+\)x\(\d+, \d+, \d+\))", txt)[1:]:
    head = block.splitlines()[0].strip()
    print(head[:150])
    for line in block.splitlines():
        s = line.strip()
        if any(s.startswith(k) for k in keys):
            print("   ", re.sub(r"\s{2,}", "  ", s)[:100])
PY
done
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
