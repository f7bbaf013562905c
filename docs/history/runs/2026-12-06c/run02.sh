#!/usr/bin/env bash
# 2026-12-06c run 2: Ms = main 65f6ba5 (sparkdraft only); P = Ms + wg_n256 past 64 tokens on
# one warpgroup where that grid fills its waves of SMs by more than 0.1 over the two-warpgroup
# grid (gemm.cu kWaveGain: qwen3-8b's gate_up and muse's qkv, not muse's gate_up nor lm_head)
# + the sweep's N 65544 cases (sparkdraft only); Q = P + the fused gate_up + SwiGLU from 65 to
# 256 tokens on the wide tile's gate and up warpgroups (cuda_ops.h kMlpFusedUpTo 256). Q's
# whole GPU suite (which holds P's GEMM code) and check, then the step Ms P Q Ms P Q.
# (Build names that gpu_ab.sh's repeat suffix cannot collide with: run 1's N2 did.)
set -u
bash tools/gpu_ab.sh run02 --builds "Ms P Q" --suite Q --steps "Ms P Q Ms P Q"
