#!/usr/bin/env bash
# 2026-12-04c run 4: the merged tree (per-request lengths, the verifier's cheaper passes, the CPU
# twin's AVX2 fp32 form), on the H200 and its host CPU:
#   1. every GPU test but the big presets and the speed prints; check on every tiny preset;
#   2. pytest on the CUDA package (py312; built before the CPU-twin merge);
#   3. bench step qwen3-8b ctx 4096 rows 1 8 32 (no regression);
#   4. the host CPU: the Mma/Gemm CPU tests (the AVX-512 and AVX2 kernels where the host has
#      both) and sparkdraft_bench_mma_gemm --rows 7 (each kernel's time, same bits).
set -u
mkdir -p build build-python
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
cp /tmp/sd_cpu_tests build/sparkdraft_tests && cp /tmp/sd_mma build/sparkdraft_bench_mma_gemm
tar xJf .carry/py.tar.xz -C build-python
T=./build/sparkdraft_cuda_tests
S=$OUT/run04_summary.txt; : > $S
note() { echo "$*" | tee -a $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a $S
lscpu | grep -E "Model name|Flags" | sed 's/Flags:.*\(avx512f\).*/Flags: ... avx512f .../' | cut -c1-120 | tee -a $S
timeout 300 $T --gtest_filter='-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*:*Speed*' > $OUT/gpu_tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/gpu_tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $OUT/gpu_tests.log | sort -u | head -20 | tee -a $S
for preset in tiny tiny-conf tiny-d2t tiny-topk tiny-topk-union tiny-gated tiny-rnn tiny-fillin; do
  for st in qwen3 muse; do
    rm -rf /tmp/ck && ./build/sparkdraft make-checkpoint --preset $preset --style $st --out /tmp/ck > /dev/null 2>&1
    ./build/sparkdraft check --checkpoint /tmp/ck > $OUT/check_${preset}_$st.log 2>&1
    note "check $preset $st rc $? $(grep 'check:' $OUT/check_${preset}_$st.log | cut -c1-90)"
  done
done
PYTHONPATH=build-python/pkg-cuda-py312 timeout 300 python3 -m pytest -q -rs python/tests > $OUT/pytest.log 2>&1
note "pytest rc $? $(tail -1 $OUT/pytest.log)"
grep -E "^FAILED|^ERROR|^SKIPPED" $OUT/pytest.log | head -8 | tee -a $S
t1=$(date +%s)
timeout 240 ./build/sparkdraft bench step --preset qwen3-8b --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
  --json $OUT/run04_bench_step_qwen3-8b.json > $OUT/bench_step.log 2>&1
note "bench step rc $? ($(( $(date +%s)-t1 ))s)"; tail -5 $OUT/bench_step.log | tee -a $S
timeout 120 ./build/sparkdraft_tests --gtest_filter='*Mma*:*Gemm*' > $OUT/cpu_mma_tests.log 2>&1
note "host cpu Mma/Gemm tests rc $? $(grep -E '^\[  PASSED  \]' $OUT/cpu_mma_tests.log | tail -1)"
timeout 240 ./build/sparkdraft_bench_mma_gemm --rows 7 --repeats 2 --json $OUT/run04_bench_mma_gemm_host.json > $OUT/bench_mma.log 2>&1
note "bench mma_gemm rc $?"; tail -12 $OUT/bench_mma.log | tee -a $S
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log
