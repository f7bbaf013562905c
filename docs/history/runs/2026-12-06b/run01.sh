#!/usr/bin/env bash
# 2026-12-06b run 1: the tokens multicast over a cluster's CTAs in the wg GEMM's wide tiles.
# K = main 661a268 (the code of 3f10289); Q = K + TMA multicast of each stage's tokens over
# a cluster of 2 row blocks for the two-warpgroup wide tile (lm_head, gate_up; muse's qkv)
# and, past 64 tokens, qkv (N < 8192) on a one-warpgroup wide tile (64 rows x all tokens)
# with the tokens multicast over 4 row blocks (the K of wg_n64 before: 64 x 64 tiles);
# R = Q with the two-warpgroup tile's cluster of 4. Q's whole GPU suite and check, then
# the step K Q R K Q R (tools/gpu_ab.sh).
set -u
bash tools/gpu_ab.sh run01 --builds "K Q R" --suite Q --steps "K Q R K Q R"
