#!/usr/bin/env bash
# 2026-12-06d run 3 (sitting 18): this sitting's tree beside its PyTorch peer, and one more
# attention piece rule. Builds (docs/CONTRIBUTING.md "Binaries carried to the GPU"), both with
# sparkdraft_cuda_tests:
#   F = main at 35d3b4b (the 128-token wg tiles on m64n128k16; attention pieces halved where
#       the context would split and half a piece keeps two row tiles: muse at 1 and 8 requests);
#   G = F + 2056aeb (reverted on main by 679b38b): pieces halved wherever half a piece keeps two
#       row tiles, split or not (muse at 32 requests: 1024 CTAs of 32 rows instead of 512 of 56).
# F's whole GPU suite (run03a), G's suite and check, the step F G F G, then the peer
# (bench/peer/peer_step.py: eager, CUDA graph, torch.compile + graph) of both presets.
set -u
bash tools/gpu_ab.sh run03a --builds "F" --suite F
bash tools/gpu_ab.sh run03 --builds "F G" --suite G --steps "F G F G" --peer "qwen3-8b muse"
