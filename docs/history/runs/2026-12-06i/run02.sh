#!/usr/bin/env bash
# 2026-12-06i run 2 (sitting 23). Carry .carry/bin_{A1,A2,C}.tar.xz (sparkdraft only).
# Run 1 (H100) measured AC's attention slower on qwen3-8b (+1.6 / +2.1% the step at 8 / 32
# requests). Which half: A1 = main + the padding rows in the unmasked form alone (branch
# attn-a1), A2 = main + the scores without the per-step test alone (branch attn-a2).
# C = main + bench step's products, tensor-core peak and roofline floor (branch
# compute-floor; its tests passed in run 1 as part of AC): the step on this GPU with both
# floors printed, and the baseline (its kernels are main's, 8d9acfd's).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
bash tools/gpu_ab.sh run02 --builds "A1 A2 C" --steps "C A1 A2 C A1 A2" \
  --match attention_chunk attention_combine gemm_wg fused_step
grep -h -E "memory clock|products|tensor-core peak|fused .* us" "$OUT"/run02_summary.txt | head -5
mkdir -p /tmp/r2 && tar xJf "$OUT/run02_logs.tar.xz" -C /tmp/r2 &&
  grep -E "products|tensor-core peak|^  fused" /tmp/r2/logs/step_C.log > "$OUT/run02_roofline.txt"
cat "$OUT/run02_roofline.txt"
