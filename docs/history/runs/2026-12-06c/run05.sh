#!/usr/bin/env bash
# 2026-12-06c run 5 (written, not run: the sitting's device time was spent). Two changes written
# from run 4's profiles, each committed and reverted on main:
#   c3e76f6 (reverted by 2bca41d): the plain residual boundary at 4097 to 8192 values a row on
#     256 threads of four chunks (two blocks an SM instead of one of 512) with the largest
#     shared-memory carve-out; its test at hidden 8192;
#   71e2a19 (reverted by 1032e12): o_norm_gate with several heads a warp, each on the
#     power-of-two lanes that cover its 8-element chunks (a head of 64: 8 lanes, four heads a
#     warp); its tests at head dims 8 and 300.
# Builds (here, docs/CONTRIBUTING.md "Binaries carried to the GPU"): B = main (sparkdraft only);
# ST = main + `git revert 2bca41d 1032e12` (sparkdraft and sparkdraft_cuda_tests). ST's whole
# GPU suite (CudaResidualBoundary.*, CudaONormGate.*, PeerReduce.*, CudaTp.*) and check, then
# the step B ST B ST: the timeline separates the two kernels (muse at 32 requests on an H100
# before: the boundary's ten calls 167 us, o_norm_gate's five 84 us).
set -u
bash tools/gpu_ab.sh run05 --builds "B ST" --suite ST --steps "B ST B ST"
