#!/usr/bin/env bash
# 2026-12-06c run 1: M = main 65f6ba5 (sparkdraft only: Ms); N = M + wg_n256 past 64 tokens
# on one warpgroup's rows against all the tokens below N 65536 (gate_up, muse's qkv; the
# vocabulary keeps two warpgroups) + the GEMM sweep's N 65544 cases (the two-warpgroup wide
# tile); N2 = N with one warpgroup at every N (lm_head too; sparkdraft only). N's whole GPU
# suite (GemmSpeed.EveryVariant: wg_n64 = one warpgroup, wg_n256 = two on lm_head at 224
# tokens) and check, then the step Ms N N2 Ms N N2.
set -u
bash tools/gpu_ab.sh run01 --builds "Ms N N2" --suite N --steps "Ms N N2 Ms N N2"
