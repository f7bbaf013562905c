#!/usr/bin/env bash
# 2026-12-06a run 2: L = K (run 1) with the P.V n-tile test against hdp kept in the
# kFirstFolds (split) instantiation, where run 1 found K's attention slower than J's at 8
# requests of qwen3-8b. L's attention tests (every instantiation, CPU == GPU), check, then
# the step K L K L (tools/gpu_ab.sh).
set -u
bash tools/gpu_ab.sh run02 --builds "K L" --suite L --filter "*Attention*" --steps "K L K L" \
  --match attention_chunk attention_combine gemm_wg fused_step
