#!/usr/bin/env bash
# 2026-12-06e run 3: the sliced wide tile's fold (run 2: at 224 tokens 15 clusters of eight
# resident, so 256 CTAs run in three waves; the fold's loops 27% of o_proj's stall samples, the
# epilogue's barriers 16%). Builds:
#   W2s = main at bb59ee1 (sparkdraft only), the baseline;
#   N3 = main at 53915bd (N2) + the fold's loads all in flight, two floats a load (tests too);
#   N4 = N3 with one warpgroup a CTA and a three-stage ring (about 110 KB: two CTAs an SM, 512
#        CTAs of 64 rows at 224 tokens; `launch_wide<1, 8>` and the budget rule; tests too).
# N4's CudaGemm.* and check first, then N3's whole GPU suite and check, then the step
# W2 N3 N4 W2 N3 N4.
set -u
mkdir -p b_N4 && tar xJf .carry/bin_N4.tar.xz -C b_N4
mkdir -p $OUT/logs
timeout 200 ./b_N4/sparkdraft_cuda_tests --gtest_filter='CudaGemm.*:WgmmaProbe.*' > $OUT/logs/n4_tests.log 2>&1
echo "N4 CudaGemm.* rc $? $(grep -E '^\[  PASSED  \]' $OUT/logs/n4_tests.log)" > $OUT/run03_n4.txt
for style in qwen3 muse; do
  timeout 60 ./b_N4/sparkdraft check --style $style > $OUT/logs/n4_check_$style.log 2>&1
  echo "N4 check $style rc $? $(grep 'check:' $OUT/logs/n4_check_$style.log | cut -c1-90)" >> $OUT/run03_n4.txt
done
bash tools/gpu_ab.sh run03 --builds "W2s N3 N4" --suite N3 --steps "W2s N3 N4 W2s N3 N4" \
  --match "gemm_wg_kernel" "false, true, 2>" "false, false, 8>" "attention_chunk" "fused_step"
cat $OUT/run03_n4.txt
