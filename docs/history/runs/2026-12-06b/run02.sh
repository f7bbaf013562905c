#!/usr/bin/env bash
# 2026-12-06b run 2. (a) Run 1's multicast (Q) was slower: is it the release at cluster
# scope of the consumers' remote arrivals? Q2 = Q with the remote arrivals at the default
# semantics (release at CTA scope, CUTLASS's ClusterBarrier::arrive form); N = Q2 without
# multicast (kWideMcast = kNarrowMcast = 1: the two-warpgroup wide tile as in K, qkv past
# 64 tokens on the one-warpgroup wide tile without multicast). (b) F = K + common/
# fast_math.cuh: exp_fast moved there from attention.cu, and silu_fast / sigmoid_fast
# (silu_f32's and sigmoid_f32's bits by a shorter double route: exp_taylor, rcp.approx and
# Newton steps, the function itself near float rounding boundaries) in silu_mul, the GEMM
# SwiGLU epilogues and o_norm_gate; exhaustive CudaFastMath.* tests. F's whole GPU suite
# and check, then the step K Q2 N F K F (tools/gpu_ab.sh).
set -u
bash tools/gpu_ab.sh run02 --builds "K Q2 N F" --suite F --steps "K Q2 N F K F"
