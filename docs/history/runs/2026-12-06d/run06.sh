#!/usr/bin/env bash
# 2026-12-06d run 6 (written in sitting 18, not run: the device time was spent). From run 5's
# profile: the wg tiles' stage loop without divisions (9ff512a, reverted on main by 89447f3:
# the ring's slot, phase and k as counters, the wgmma descriptors by offset; no value changes).
# Builds (docs/CONTRIBUTING.md "Binaries carried to the GPU"):
#   B = main (sparkdraft only);
#   W = main + `git revert 89447f3` (sparkdraft and sparkdraft_cuda_tests).
# W's whole GPU suite (the GEMM sweep: every wg variant against cpu::gemm; WgmmaProbe; the draft's
# parts) and check, then the step B W B W: the timeline's gemm_wg_kernel at 1, 8 and 32 requests
# (H100 before: qwen3-8b 752 / 1206 / 1715 us a step, muse 2510 / 3212 / 4690).
set -u
bash tools/gpu_ab.sh run06 --builds "B W" --suite W --steps "B W B W"
