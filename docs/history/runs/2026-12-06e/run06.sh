#!/usr/bin/env bash
# 2026-12-06e run 6: the sliced wide tile's fold by remote stores (run 2: the fold's remote loads
# and the exit barrier a quarter of o_proj's stall samples). Builds (sparkdraft and tests each):
#   F2 = main at the test change after 97e2860 (the landed kernel; CudaGemm's fp32 test now
#        with N 264, the sliced test without its fp32 copy);
#   P  = F2 + the fold by remote stores: CTA z sends each CTA its share (st.shared::cluster,
#        two floats a store) once the cluster is past its main loops, then every CTA folds from
#        its own shared memory and leaves without a third barrier.
# CudaGemm.* of both and P's check, then the step F2 P F2 P.
set -u
mkdir -p $OUT/logs
for b in F2 P; do
  mkdir -p b_$b && tar xJf .carry/bin_$b.tar.xz -C b_$b
  timeout 120 ./b_$b/sparkdraft_cuda_tests --gtest_filter='CudaGemm.*' > $OUT/logs/${b}_gemm_tests.log 2>&1
  echo "$b CudaGemm.* rc $? $(grep -E '^\[  PASSED  \]' $OUT/logs/${b}_gemm_tests.log) $(grep -c '^\[  FAILED  \] [A-Za-z]' $OUT/logs/${b}_gemm_tests.log) failed" >> $OUT/run06_tests.txt
done
bash tools/gpu_ab.sh run06 --builds "P" --suite P --filter "WgmmaProbe.*" --steps "F2 P F2 P" \
  --match "gemm_wg_kernel" "false, false, 8>" "attention_chunk" "fused_step"
cat $OUT/run06_tests.txt
