#!/usr/bin/env bash
# 2026-12-04 run 1 (one machine session): the tree with (a) the plan's kernel list,
# (b) the attention's page prefetch, (c) programmatic dependent launch on every kernel of
# the step, against the same tree without (b) and (c) (sd_cli0 / sd_tests0):
#   1. GPU tests of the new tree (all but the big presets), check bit for bit (tiny);
#   2. attention alone, A/B (AttentionSpeed.PublishedShapesAtContext4096);
#   3. bench step qwen3-8b rows 1 8 32, A/B, in the same session;
#   4. the step's timeline (bench/python/timeline.py: CUPTI via torch.profiler);
#   5. ncu of the attention chunk kernel alone (qwen3-8b 32 rows / 1 row, muse 32 rows).
set -u
mkdir -p build build-python
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
tar xJf .carry/py.tar.xz -C build-python
T=./build/sparkdraft_cuda_tests
S=$OUT/run01_summary.txt; : > $S
note() { echo "$*" | tee -a $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a $S
timeout 420 $T --gtest_filter='-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*:AttentionSpeed.*:GemmSpeed.*' > $OUT/gpu_tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/gpu_tests.log | tail -1) $(grep -cE '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log | sort -u | head -20 | tee -a $S
grep -E "kernels, 4 rows" $OUT/gpu_tests.log | cut -c1-300 | tee -a $S
{ ./build/sparkdraft check --style qwen3 && ./build/sparkdraft check --style muse; } > $OUT/check.log 2>&1
note "check tiny rc $? $(grep 'check:' $OUT/check.log | tr '\n' ' ')"
CUDA_MODULE_LOADING=EAGER ./build/sparkdraft check --tp 2 --devices 0 --tp-reduce fused > $OUT/check_tp2.log 2>&1
note "check tiny tp2 fused rc $? $(grep 'check:' $OUT/check_tp2.log | cut -c1-90)"
for b in sd_tests0 sd_tests; do
  timeout 120 /tmp/$b --gtest_filter='AttentionSpeed.PublishedShapesAtContext4096' > $OUT/attn_speed_$b.log 2>&1
  note "attention speed $b rc $?"; grep -E "\(pick\)" $OUT/attn_speed_$b.log | tee -a $S
done
for b in sd_cli0 sd_cli; do
  t1=$(date +%s)
  timeout 240 /tmp/$b bench step --preset qwen3-8b --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
    --json $OUT/run01_bench_step_$b.json > $OUT/bench_step_$b.log 2>&1
  note "bench step $b rc $? ($(( $(date +%s)-t1 ))s)"; grep -A4 '^preset ' $OUT/bench_step_$b.log | tee -a $S
done
t1=$(date +%s)
PYTHONPATH=build-python/pkg-cuda-py312 timeout 240 python3 bench/python/timeline.py --preset qwen3-8b \
  --preset-dir /tmp --rows 1 8 32 --json $OUT/run01_timeline_qwen3-8b.json \
  --md $OUT/run01_timeline_qwen3-8b.md > $OUT/timeline.log 2>&1
note "timeline rc $? ($(( $(date +%s)-t1 ))s)"; tail -5 $OUT/timeline.log | tee -a $S
for cfg in qwen3-8b:32:1 qwen3-8b:1:0 muse:32:1; do
  tag=${cfg//:/_}
  t1=$(date +%s)
  SPARKDRAFT_ATTENTION_PROFILE=$cfg timeout 150 ncu --clock-control none --set full --import-source yes \
    -k regex:attention_chunk --launch-skip 2 --launch-count 1 -o $OUT/prof_$tag -f \
    $T --gtest_filter=AttentionSpeed.ProfileOne > $OUT/ncu_$tag.log 2>&1
  note "ncu $cfg rc $? ($(( $(date +%s)-t1 ))s)"
  ncu --import $OUT/prof_$tag.ncu-rep --page details --csv > $OUT/details_$tag.csv 2>/dev/null
  ncu --import $OUT/prof_$tag.ncu-rep --page source --csv --print-source sass > $OUT/sass_$tag.csv 2>/dev/null
  python3 - $OUT/details_$tag.csv <<'PY' | tee -a $S
import csv, sys
want = ["Duration", "DRAM Throughput", "Compute (SM) Throughput", "Registers Per Thread",
        "Achieved Occupancy", "Theoretical Occupancy", "Issue Slots Busy", "No Eligible",
        "Eligible Warps Per Scheduler", "Warp Cycles Per Issued Instruction", "Grid Size",
        "Dynamic Shared Memory Per Block"]
for row in csv.DictReader(open(sys.argv[1])):
    if row.get("Metric Name") in want:
        print(f'  {row["Metric Name"]:36s} {row["Metric Value"]:>12s} {row["Metric Unit"]}')
PY
done
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz *.log *.csv prof_*.ncu-rep 2>/dev/null && rm -f *.log *.csv prof_*.ncu-rep
