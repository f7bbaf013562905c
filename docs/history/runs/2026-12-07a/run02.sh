#!/usr/bin/env bash
# 2026-12-07a run 2 (written in sitting 24, not run: no machine started). Carry
# .carry/bin_M24s.tar.xz (main at 6fe3596, sparkdraft), .carry/bin_Ps.tar.xz (branch
# attn-pipe-p = 4cf33ec, sparkdraft: the attention chunk loop pipelined by one chunk, chunk
# c + 1's scores issued after chunk c's CTA barrier, which also takes the tile's sum exchange:
# two barriers a chunk instead of three; head dim 256 on three stages) and .carry/bin_P2.tar.xz
# (branch attn-pipe-p2 = b909d32, with the GPU tests: P + the chunk's eight exps written step
# by step across them, exp_fast_try_n; branch attn-pipe is the same code formatted). P2's whole
# GPU suite and check, check with P; the step M24 P P2 M24 P P2 (attention per call in the
# timeline); on an H200 the PyTorch peer too. (Rebuild the binaries from the branches if
# .carry/ did not survive: docs/CONTRIBUTING.md.)
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "$gpu"
peer=""
[[ "$gpu" == *H200* ]] && peer="qwen3-8b muse"
bash tools/gpu_ab.sh run02 --builds "M24s Ps P2" --suite P2 --steps "M24s Ps P2 M24s Ps P2" \
  --match attention_chunk attention_combine gemm_wg fused_step residual_boundary \
  ${peer:+--peer "$peer"} >/dev/null
for b in Ps; do
  for style in qwen3 muse; do
    echo "check $b tiny $style: $(./b_$b/sparkdraft check --style $style 2>&1 | tail -1)"
  done
done
tar xJOf "$OUT/run02_logs.tar.xz" logs/tests.log | grep -E '^\[attention speed\].*pick|^\[fast'
cat "$OUT/run02_summary.txt"
