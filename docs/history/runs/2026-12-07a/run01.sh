#!/usr/bin/env bash
# 2026-12-07a run 1 (sitting 24). Carry .carry/bin_M24.tar.xz: main at 6fe3596 (sparkdraft and
# the GPU tests). Its whole GPU suite (with sitting 23's attention scores change and the
# test_gemm spin helper, neither run with their own binary yet) and check, then the step
# (--spec, with the roofline floor) and the PyTorch peer in the same session.
set -u
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader
bash tools/gpu_ab.sh run01 --builds "M24" --suite M24 --steps "M24" --peer "qwen3-8b muse"
