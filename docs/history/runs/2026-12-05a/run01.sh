#!/usr/bin/env bash
# 2026-12-05a run 1: the verifier's resident form (6618eab, `git revert aef2714`) checked on the
# H200: every GPU test but the big presets and the speed tables (the staged kernels' PTX changed
# with it), `check` on the tiny presets, `bench verify` (auto and resident, bf16 and fp32), the
# resident form's shape sweep, then memcheck and racecheck over the resident tests.
set -u
RUN=${RUN:-run01}
mkdir -p build
tar xJf .carry/bin.tar.xz -C build
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
timeout 420 ./build/sparkdraft_cuda_tests --gtest_filter='-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*:*Speed*' > $L/gpu_tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $L/gpu_tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/gpu_tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/gpu_tests.log | sort -u | head -20 >> $S
grep -E '^\[resident|pick' $L/gpu_tests.log | head -8 >> $S
for st in qwen3 muse; do
  timeout 60 ./build/sparkdraft check --style $st > $L/check_$st.log 2>&1
  note "check tiny $st rc $? $(grep 'check:' $L/check_$st.log | cut -c1-100)"
done
for dtype in bf16 f32; do
  for form in auto resident; do
    timeout 120 ./build/sparkdraft bench verify --dtype $dtype --form $form \
      --json $OUT/${RUN}_bench_verify_${dtype}_$form.json > $L/bench_verify_${dtype}_$form.log 2>&1
    note "bench verify $dtype $form rc $?"; grep -A7 '^V ' $L/bench_verify_${dtype}_$form.log >> $S
  done
done
note "-- sweep ($(( $(date +%s)-t0 ))s)"
for slice in 576 1152 2304 4608; do
  timeout 60 ./build/sparkdraft bench verify --form resident --vocab 151936 --rows 1 --slice $slice > $L/sweep_r1_s$slice.log 2>&1
  note "resident 1 row slice $slice rc $?; $(grep -h '  verify \|error' $L/sweep_r1_s$slice.log | head -2)"
done
for threads in 256 512; do for rr in 2 4 6 8; do
  timeout 60 ./build/sparkdraft bench verify --form resident --vocab 151936 --rows 32 --threads $threads --resident-rows $rr > $L/sweep_r32_t${threads}_rr$rr.log 2>&1
  note "resident 32 rows $threads thr $rr in flight rc $?; $(grep -h '  verify \|error' $L/sweep_r32_t${threads}_rr$rr.log | head -2)"
done; done
for rr in 1 2 4 8; do
  timeout 60 ./build/sparkdraft bench verify --form resident --vocab 151936 --rows 8 --resident-rows $rr > $L/sweep_r8_rr$rr.log 2>&1
  note "resident 8 rows $rr in flight rc $?; $(grep -h '  verify \|error' $L/sweep_r8_rr$rr.log | head -2)"
done
note "-- step and its small kernels ($(( $(date +%s)-t0 ))s)"
timeout 200 ./build/sparkdraft bench step --preset qwen3-8b --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
  --json $OUT/${RUN}_bench_step_qwen3-8b.json > $L/bench_step.log 2>&1
note "bench step qwen3-8b rc $?"; grep -A4 '^preset ' $L/bench_step.log >> $S
for rows in 1 8; do
  timeout 150 ncu --set full -k regex:'residual_boundary|attention_combine' -c 2 ./build/sparkdraft bench step \
    --preset qwen3-8b --preset-dir /tmp --ctx 4096 --rows $rows --repeats 1 > $L/ncu_small_rows$rows.txt 2>&1
  note "ncu small kernels rows $rows rc $?; $(grep -E '^  [a-z_]+kernel|Duration|Registers Per|Achieved Occupancy' $L/ncu_small_rows$rows.txt | tr -s ' ' | tr '\n' ';' | cut -c1-600)"
done
note "-- sanitizers ($(( $(date +%s)-t0 ))s)"
san=/usr/local/cuda/bin/compute-sanitizer
for tool in memcheck racecheck; do
  timeout 200 $san --tool $tool ./build/sparkdraft_cuda_tests \
    --gtest_filter='CudaVerify.ResidentFormEqualsCpuAtFullVocabularies:CudaVerify.EqualsCpuAtOneDraftToken:CudaVerify.GraphReplayEqualsEager' \
    > $L/verify_$tool.log 2>&1
  note "verify $tool rc $?; $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY|PASSED|FAILED  \]' $L/verify_$tool.log | tr '\n' ' ' | cut -c1-300)"
done
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
