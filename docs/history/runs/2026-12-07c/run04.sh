#!/usr/bin/env bash
# 2026-12-07c run 4 (sitting 26): T = main (run 2's T, landed) and E = T + exp_fast_try's far
# tail (below -104, -inf included: +0, exp_f32's value, on the fast path) + attention's rare path
# per entry (exp_f32 only for the entries some lane does not trust, not for all eight). E's
# attention, fast-math, draft and bench-step GPU tests (the exhaustive exp test now also counts
# the far tail's slow calls), check, then the step T E T E. Carry .carry/bin_{T,E}.tar.xz.
set -u
bash tools/gpu_ab.sh run04 --builds "T E" --suite E \
  --filter 'CudaAttention.*:CudaFastMath.*:CudaDraft.*:BenchStep.*:CudaSiluMul.*:CudaONormGate.*' \
  --steps "T E T E" --match attention_chunk attention_combine fused_step gemm_wg > /dev/null 2>&1
(cd "$OUT" && tar xJf run04_logs.tar.xz logs/tests.log && grep -E "^\[fast|FAILED|PASSED" logs/tests.log | head -12 && rm -rf logs)
cat "$OUT/run04_summary.txt"
