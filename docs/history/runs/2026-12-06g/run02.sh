#!/usr/bin/env bash
# 2026-12-06g run 2 (sitting 21). Builds (sparkdraft; X13 also the tests):
#   H   = main at 5a458ab;
#   X3  = H + attention_combine_kernel issuing its tile's first batch of o_c loads before the
#         prefix max of the chunk maxima (the loads do not depend on it);
#   X13 = X3 + qwen3-8b's qkv (N <= 64 x the SMs) from 129 to 256 tokens on one warpgroup's
#         64 rows x 128 tokens a CTA, two CTAs an SM (192 CTAs at 224 tokens) instead of the
#         one-warpgroup 224-token wide tile (96 CTAs, one an SM); its tests with 6bd91a6's
#         mixed-slot shapes in MarkovFused.SlotCutMatchesEagerAndCpu (on main's Markov kernel);
#   X2  = H + every one-warpgroup pick from 129 to 256 tokens on those 128-token tiles (also
#         qwen3-8b's gate_up and muse's qkv, the one-warpgroup form of wg_n256).
# X13's GEMM sweep (automatic at M 190 and 224 runs the 128-token tile), its fp32 form,
# CudaAttention.* and that Markov test, check, then the step
# H X13 X2 X3 H X13 X2 X3 (both presets, 1 / 8 / 32 requests). On an H200 the PyTorch peer
# follows in the same session (the README's H200 table for H).
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader)
echo "$gpu"
peer=()
if grep -q H200 <<<"$gpu"; then peer=(--peer "qwen3-8b muse"); fi
bash tools/gpu_ab.sh run02 --builds "H X13 X2 X3" --suite X13 \
  --filter "CudaGemm.SweepEqualsCpuBitForBit:CudaGemm.F32SubtreeEqualsCpuSlicesBitForBit:CudaAttention.*:MarkovFused.SlotCutMatchesEagerAndCpu" \
  --steps "H X13 X2 X3 H X13 X2 X3" "${peer[@]}" \
  --match "gemm_wg_kernel" "<1, 128, false" "<1, 224, false" "attention_chunk" \
  "attention_combine" "fused_step"
