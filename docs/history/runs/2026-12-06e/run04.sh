#!/usr/bin/env bash
# 2026-12-06e run 4: the sliced wide tile's fold, its loads in flight in an order that spreads
# them over the cluster (run 3: N3's loads rank by rank, all CTAs reading CTA 0 first, lost to
# N2's two pairs at a time). Builds:
#   W2s = main at bb59ee1 (sparkdraft only), the baseline;
#   N2s = 53915bd (run 1's N2: the fold two outputs at a time, one float a load; sparkdraft only);
#   N5  = N3 with the fold's loads pair by pair, each pair's from all eight CTAs (tests too).
# N5's whole GPU suite and check, then the step W2s N2s N5 W2s N2s N5.
set -u
bash tools/gpu_ab.sh run04 --builds "W2s N2s N5" --suite N5 --steps "W2s N2s N5 W2s N2s N5" \
  --match "gemm_wg_kernel" "false, true, 2>" "false, false, 8>" "attention_chunk" "fused_step"
