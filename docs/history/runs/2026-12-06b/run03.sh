#!/usr/bin/env bash
# 2026-12-06b run 3: L = F of run 2 (the exact fast silu and sigmoid; exp_fast in
# common/fast_math.cuh) + qkv past 64 tokens (up to 256) on the one-warpgroup wide tile
# without multicast (run 2's N, written without the multicast code). L's whole GPU suite
# and check, then the step K L K L. K = main 661a268.
set -u
bash tools/gpu_ab.sh run03 --builds "K L" --suite L --steps "K L K L"
