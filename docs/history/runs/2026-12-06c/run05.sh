#!/usr/bin/env bash
# 2026-12-06c run 5 (written in sitting 17, run in sitting 18 on an H100). Four changes written
# from the profiles (run 4's; 2026-12-06a run 1's for attention), each committed on main and
# reverted at once:
#   c3e76f6: the plain residual boundary at 4097 to 8192 values a row on 256 threads of four
#     chunks (two blocks an SM instead of one of 512) with the largest shared-memory carve-out;
#     its test at hidden 8192;
#   12394e0: o_norm_gate with several heads a warp, each on the power-of-two lanes that cover its
#     8-element chunks (a head of 64: 8 lanes, four heads a warp); its tests at head dims 8, 300;
#   9fab1a7: attention's chunk max by fmaxf (the definition's up to the sign of a zero maximum,
#     which reaches no output; contract.md's attention section) and the quad's shuffle levels
#     without the selects that kept the lower slot first;
#   2c8af60: attention's pb (the P.V operand) by the hardware bf16 conversion without to_bf16's
#     NaN test (a NaN operand's payload reaches no output). Static SASS of
#     attention_chunk_kernel<8, 4, 0>: 5424 -> 5240 -> 5208 instructions.
# Builds (here, docs/CONTRIBUTING.md "Binaries carried to the GPU"): B = main (sparkdraft only);
# X = main + `git cherry-pick c3e76f6 12394e0 9fab1a7 2c8af60` (sparkdraft and
# sparkdraft_cuda_tests; both were built and packed at 3ea2c6b as .carry/bin_B.tar.xz and
# .carry/bin_X.tar.xz, where this checkout's .carry/ survives). X's whole GPU suite
# (CudaResidualBoundary.*, CudaONormGate.*, CudaAttention.* at every split, PeerReduce.*,
# CudaTp.*) and check, then the step B X B X: the timeline separates the kernels (on an H100
# before: muse at 32 requests the boundary's ten calls 167 us, o_norm_gate's five 84 us;
# attention at 32 requests 1388 us qwen3-8b, 1870 muse).
set -u
bash tools/gpu_ab.sh run05 --builds "B X" --suite X --steps "B X B X"
