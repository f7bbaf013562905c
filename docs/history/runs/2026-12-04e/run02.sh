#!/usr/bin/env bash
# 2026-12-04e run 2: attention alone at the published shapes (AttentionSpeed) over warps per row
# tile (SPARKDRAFT_ATTN_WQ: 1 = run 1's whole-tile form, 2, 4) and ring depth at head dim 128
# (SPARKDRAFT_ATTN_STAGES 2 or 3; temporary measurement knobs), and ncu of the whole-tile form
# at qwen3-8b, 32 requests, no split.
set -u
RUN=${RUN:-run02}
tar xJf .carry/bin.tar.xz -C /tmp
T=/tmp/sd_tests
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
for wq in 1 2 4; do
  for st in 2 3; do
    SPARKDRAFT_ATTN_WQ=$wq SPARKDRAFT_ATTN_STAGES=$st timeout 120 $T --gtest_filter='AttentionSpeed.PublishedShapesAtContext4096' > $L/speed_wq${wq}_st$st.log 2>&1
    note "wq $wq stages $st: rc $?"
    grep "attention speed" $L/speed_wq${wq}_st$st.log | grep -E "pick|splits  1 " >> $S
  done
done
note "matrix $(( $(date +%s)-t0 ))s"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu)
for wq in 1 2; do
  SPARKDRAFT_ATTN_WQ=$wq SPARKDRAFT_ATTENTION_PROFILE=qwen3-8b:32:1 timeout 200 $NCU --kernel-name regex:attention_chunk --launch-skip 2 --launch-count 1 \
    --section SpeedOfLight --section Occupancy --section LaunchStats --section SchedulerStats --section WarpStateStats --section InstructionStats \
    $T --gtest_filter='AttentionSpeed.ProfileOne' > $L/ncu_wq$wq.log 2>&1
  note "ncu wq $wq: rc $?"
  grep -E "Duration|DRAM Throughput|Registers Per|Achieved Occupancy|Theoretical Occupancy|Issued Warp Per|No Eligible|Warp Cycles Per Issued|Executed Instructions  |Block Size|Stall" $L/ncu_wq$wq.log | head -30 >> $S
done
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz logs && rm -rf logs
cat $S
