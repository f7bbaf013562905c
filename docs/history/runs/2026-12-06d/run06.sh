#!/usr/bin/env bash
# 2026-12-06d run 6 (written in sitting 18, not run: the device time was spent). From run 5's
# profile of the 224-token tiles (their consumers wait for a stage's bytes, and with one
# warpgroup on the stage loop's index math):
#   9ff512a (reverted on main by 89447f3): the stage loop without divisions (the ring's slot,
#     phase and k as counters, the wgmma descriptors by offset; no value changes);
#   cbafe97 (reverted by 9f64b33): the wide tiles' and the slice groups' ring in all the shared
#     memory a CTA may opt in to (227 KB instead of about 200: the 224-token tiles one stage more).
# Builds (docs/CONTRIBUTING.md "Binaries carried to the GPU"; packed at 9f64b33 in .carry/ where
# this checkout keeps it):
#   B  = main (sparkdraft only);
#   W  = main + `git revert 89447f3` (sparkdraft only);
#   W2 = W + `git revert 9f64b33` (sparkdraft and sparkdraft_cuda_tests).
# W2's whole GPU suite (the GEMM sweep: every wg variant against cpu::gemm; WgmmaProbe; the draft's
# parts) and check, then the step B W W2 B W W2: the timeline's gemm_wg_kernel at 1, 8 and 32
# requests (H100, run 4: qwen3-8b 752 / 1206 / 1715 us a step, muse 2510 / 3212 / 4690).
set -u
bash tools/gpu_ab.sh run06 --builds "B W W2" --suite W2 --steps "B W W2 B W W2"
