#!/usr/bin/env bash
# 2026-12-06e run 1 (sitting 19): o_proj and down past 64 tokens (k_slices 8) on the wide tile,
# one K slice a CTA of a cluster of eight, the outputs folded across the cluster's shared memory
# (wg_tile.cuh kCtas): the weights read once for all the tokens, the tokens once a row block.
# Builds (docs/CONTRIBUTING.md "Binaries carried to the GPU"):
#   W2 = main at bb59ee1 (= 2026-12-06d run 6's W2: sparkdraft and sparkdraft_cuda_tests);
#   N2 = W2 + the new tile with two warpgroups (128 rows a CTA; sparkdraft and tests);
#   N1 = N2 with one warpgroup (64 rows a CTA; `launch_wide<1, 8>`; sparkdraft only).
# N2's whole GPU suite (CudaGemm.SlicedWideTileEqualsCpu: every wide token count, whole and
# partial row blocks, bf16 and fp32 outputs; the sweep; the draft's parts) and check, then the
# step W2 N2 N1 W2 N2 N1: o_proj + down at 32 requests (run 6, W2: qwen3-8b 37.3 + 81.7 us a
# layer, muse 120.0 + 206.0).
set -u
bash tools/gpu_ab.sh run01 --builds "W2 N2 N1" --suite N2 --steps "W2 N2 N1 W2 N2 N1" \
  --match "gemm_wg_kernel" "false, true, 2>" "false, false, 8>" "attention_chunk" "fused_step"
