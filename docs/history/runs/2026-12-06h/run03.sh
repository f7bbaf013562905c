#!/usr/bin/env bash
# 2026-12-06h run 3: W4 = the tree to land: run 2's W3 with CudaDraftOptions::step_pdl off by
# default again (run 2: on the H200 between 2.1% faster and 1.0% slower) and the PDL test's
# kernels launched once before its window probe (run 2's probe ran on their first launch, which
# loads the module, and saw no window). Its PDL and draft tests, and check with --step-pdl on.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
bash tools/gpu_ab.sh run03 --builds "W4" --suite W4 \
  --filter 'CudaGemm.UnderPdl*:CudaGemm.GraphReplayEqualsEagerCall:CudaDraft.StepPdl*:CudaDraft.Tiny*:CudaDraft.PlanNames*'
for style in qwen3 muse; do
  echo "check --step-pdl on tiny $style: $(b_W4/sparkdraft check --style $style --step-pdl on 2>&1 | tail -1)" >> "$OUT/run03_summary.txt"
done
cat "$OUT/run03_summary.txt"
