#!/usr/bin/env bash
# 2026-12-06h run 1: the GEMMs' first weights before their wait (issue 24 lever 2, "a GEMM that
# streams its weights before it waits"). L = main at 6403320 (sparkdraft only); W = L + the ring,
# bulk and wg kernels requesting their first stages' weight rows before pdl_enter() and their
# tokens after it, with the PDL tests. The step with --step-pdl off (W must equal L: the wait is
# a no-op) and on (each kernel may start while the one before it runs), alternated.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
bash tools/gpu_ab.sh run01 --builds "L W" --suite W \
  --filter 'CudaGemm.UnderPdl*:CudaGemm.SweepEqualsCpuBitForBit:CudaGemm.SlicedWideTileEqualsCpu:CudaGemm.SwigluEqualsGemmThenSiluMul:CudaDraft.StepPdl*:CudaDraft.Tiny*' \
  --steps "L W"
for style in qwen3 muse; do
  echo "check --step-pdl on tiny $style: $(b_W/sparkdraft check --style $style --step-pdl on 2>&1 | tail -1)" >> "$OUT/run01_summary.txt"
done
bash tools/gpu_ab.sh run01p --builds "L W" --steps "L W L W" --step-args "--spec --step-pdl on"
cat "$OUT/run01_summary.txt"
