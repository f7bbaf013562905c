#!/usr/bin/env bash
# The GPU verification run of docs/history/gpu-log.md, in one command, on a machine with a
# CUDA GPU and binaries already built (`bash tools/build.sh`, or carried as build/):
#   tools/gpu_verify.sh OUT_DIR [tests|check|big|bench-qwen3|bench-muse ...]
# Each stage writes its full log to OUT_DIR and one summary line to OUT_DIR/summary.txt
# (printed at the end). Default stages: tests check big bench-qwen3 bench-muse.
#   tests        every GPU test but the big presets (build/sparkdraft_cuda_tests)
#   check        `sparkdraft check` on the tiny qwen3 and muse checkpoints
#   big          the qwen3-8b and muse presets: CPU == GPU eager == GPU fused (check_draft)
#   bench-qwen3  `sparkdraft bench step --preset qwen3-8b` (ctx 4096, rows 1 8 32, JSON)
#   bench-muse   the same for muse
#   sanitize     compute-sanitizer memcheck (with leak check) over the GEMM graph and SwiGLU
#                tests, attention, the fused fronts and the tiny CPU == eager == fused draft,
#                and racecheck over the GEMM and attention tests (not a default stage: minutes)
#   profile      ncu's time of every kernel of one qwen3-8b propose at 1 and 32 requests, and
#                tools/ncu_step_breakdown.py's table of it (not a default stage: about a minute)
#   gemm         the GEMM sweep (every variant forced, bit for bit against cpu::gemm) and the
#                GemmSpeed tables behind cuda::gemm_pick (not a default stage: about 30 s; the
#                tests stage runs the same tests but keeps no table in the summary)
#   tp           the GPU tensor-parallel tests (CudaTp.*, gemm_f32, the comms, PeerReduce.*, the
#                vocab-parallel loop; the fused boundary on one GPU again under
#                CUDA_MODULE_LOADING=EAGER), then `sparkdraft check --tp N` on the qwen3-8b and
#                muse presets at TP 2, 4 and 8 against TP 1 (ranks on devices 0 .. N-1 where
#                the machine has N GPUs, else sharing device 0; there also --tp-reduce fused
#                at TP 2 and 4 under eager module loading)
#   tp-bench     on 2 GPUs or more: `bench allreduce` (eager, fused and NCCL's) and `bench step
#                --tp N` (N the largest of 2, 4, 8 the machine has) for both presets at ctx
#                4096 and rows 1 8 32, NCCL_NVLS_ENABLE=0 (not a default stage)
#   verify       the verifier: its GPU tests (CudaVerify.*: GPU == CPU bit for bit, every
#                form), then `bench verify` (V 151936 and 202048, N 7, rows 1 8 32, bf16 and fp32
#                target logits, the automatic form and the resident one, JSON), then memcheck
#                and racecheck over two of its tests (not a default stage)
#   verify-sweep `bench verify --form resident` around the launcher's shape: the slice width at
#                one request, threads and requests in flight at 32 (not a default stage)
# SPARKDRAFT_PRESET_DIR (default /tmp) holds the synthetic preset checkpoints.
set -uo pipefail
cd "$(dirname "$0")/.."
out="${1:?usage: tools/gpu_verify.sh OUT_DIR [stages...]}"
shift
stages=("$@")
[[ ${#stages[@]} -eq 0 ]] && stages=(tests check big bench-qwen3 bench-muse)
mkdir -p "$out"
presets="${SPARKDRAFT_PRESET_DIR:-/tmp}"
summary="$out/summary.txt"
: >"$summary"
note() { echo "$*" | tee -a "$summary"; }

for stage in "${stages[@]}"; do
  start=$(date +%s)
  case "$stage" in
    tests)
      ./build/sparkdraft_cuda_tests --gtest_filter='-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*' \
        >"$out/gpu_tests.log" 2>&1
      rc=$?
      note "tests: rc $rc, $(grep -E '^\[  PASSED  \]' "$out/gpu_tests.log" | tail -1)" \
        "$(grep -cE '^\[  FAILED  \] [A-Za-z]' "$out/gpu_tests.log") failed"
      grep -E '^\[  FAILED  \] [A-Za-z]' "$out/gpu_tests.log" | sort -u | tee -a "$summary"
      ;;
    check)
      { ./build/sparkdraft check --style qwen3 && ./build/sparkdraft check --style muse; } \
        >"$out/check_tiny.log" 2>&1
      rc=$?
      note "check tiny: rc $rc; $(grep 'check:' "$out/check_tiny.log" | tr '\n' ' ')"
      ;;
    big)
      SPARKDRAFT_BIG_PRESETS=1 SPARKDRAFT_PRESET_DIR="$presets" ./build/sparkdraft_cuda_tests \
        --gtest_filter='CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*' >"$out/big_presets.log" 2>&1
      rc=$?
      note "big presets: rc $rc; $(grep 'check:' "$out/big_presets.log" | tr '\n' ' ')"
      ;;
    bench-qwen3 | bench-muse)
      preset=qwen3-8b
      [[ "$stage" == bench-muse ]] && preset=muse
      ./build/sparkdraft bench step --preset "$preset" --preset-dir "$presets" --ctx 4096 \
        --rows 1 8 32 --json "$out/bench_step_$preset.json" >"$out/bench_step_$preset.log" 2>&1
      rc=$?
      note "bench step $preset: rc $rc"
      grep -A4 '^preset ' "$out/bench_step_$preset.log" | tee -a "$summary"
      ;;
    sanitize)
      san="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
      mem='CudaGemm.GraphReplayEqualsEagerCall:CudaGemm.SwigluEqualsGemmThenSiluMul:'
      mem+='CudaAttention.MatchesCpuBitForBitAtEverySplit:CudaAttention.InterleavedRequestsMatchCpu:'
      mem+='FusedBackbone.*:CudaDraft.TinyQwen3CpuEqualsEagerEqualsFused'
      "$san" --tool memcheck --leak-check full ./build/sparkdraft_cuda_tests --gtest_filter="$mem" \
        >"$out/memcheck.log" 2>&1
      rc=$?
      "$san" --tool racecheck ./build/sparkdraft_cuda_tests \
        --gtest_filter='CudaGemm.GraphReplayEqualsEagerCall:CudaGemm.SwigluEqualsGemmThenSiluMul:CudaAttention.InterleavedRequestsMatchCpu' \
        >"$out/racecheck.log" 2>&1
      rc2=$?
      note "sanitize: memcheck rc $rc, racecheck rc $rc2;" \
        "$(grep -hE 'ERROR SUMMARY|LEAK SUMMARY|RACECHECK SUMMARY' "$out/memcheck.log" "$out/racecheck.log" | tr '\n' ' ')"
      ;;
    profile)
      rc=0
      for rows in 1 32; do
        ncu --clock-control none --metrics gpu__time_duration.sum --csv ./build/sparkdraft bench \
          step --preset qwen3-8b --preset-dir "$presets" --ctx 4096 --rows "$rows" --repeats 1 \
          >"$out/ncu_step_rows$rows.csv" 2>&1 || rc=$?
        python3 tools/ncu_step_breakdown.py "$out/ncu_step_rows$rows.csv" \
          >"$out/ncu_breakdown_rows$rows.txt" 2>&1 || rc=$?
        note "profile, qwen3-8b, $rows request(s): $(head -1 "$out/ncu_breakdown_rows$rows.txt")"
        sed -n '3,6p' "$out/ncu_breakdown_rows$rows.txt" | tee -a "$summary"
      done
      note "profile: rc $rc"
      ;;
    gemm)
      ./build/sparkdraft_cuda_tests --gtest_filter='CudaGemm.*:GemmSpeed.*' >"$out/gemm.log" 2>&1
      rc=$?
      note "gemm: rc $rc, $(grep -E '^\[gemm\] [0-9]+ problems' "$out/gemm.log")"
      grep -E '^\[gemm (speed|variants|swiglu speed)\]' "$out/gemm.log" | cut -c1-330 | tee -a "$summary"
      ;;
    tp)
      filter='CudaTp.*:CudaGemm.F32*:NcclComm.*:SharedDeviceComm.*:PeerReduce.*:MarkovVocabParallel.*'
      ./build/sparkdraft_cuda_tests --gtest_filter="$filter" >"$out/tp_tests.log" 2>&1
      rc=$?
      note "tp tests: rc $rc, $(grep -E '^\[  PASSED  \]' "$out/tp_tests.log" | tail -1)" \
        "$(grep -cE '^\[  FAILED  \] [A-Za-z]' "$out/tp_tests.log") failed," \
        "$(grep -cE '^\[  SKIPPED \] [A-Za-z]' "$out/tp_tests.log") skipped"
      grep -E '^\[  (FAILED|SKIPPED) \] [A-Za-z]' "$out/tp_tests.log" | sort -u | tee -a "$summary"
      # The fused peer boundary with the ranks sharing one GPU needs eager module loading.
      CUDA_MODULE_LOADING=EAGER ./build/sparkdraft_cuda_tests \
        --gtest_filter='CudaTp.FusedPeerBoundary*' >"$out/tp_fused_shared.log" 2>&1
      note "fused boundary on one GPU (CUDA_MODULE_LOADING=EAGER): rc $?," \
        "$(grep -E '^\[  (PASSED|FAILED|SKIPPED) \]' "$out/tp_fused_shared.log" | tr '\n' ' ')"
      grep -E '^\[tp\]' "$out/tp_fused_shared.log" | tee -a "$summary"
      gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
      for preset in qwen3-8b muse; do
        dir="$presets/sparkdraft-bench-$preset"
        [[ -f "$dir/config.json" ]] ||
          ./build/sparkdraft make-checkpoint --preset "$preset" --out "$dir" >"$out/make_$preset.log" 2>&1
        for tp in 2 4 8; do
          devices=0
          [[ "$gpus" -ge "$tp" ]] && devices=$(seq -s, 0 $((tp - 1)))
          ./build/sparkdraft check --checkpoint "$dir" --tp "$tp" --devices "$devices" \
            >"$out/check_tp${tp}_$preset.log" 2>&1
          note "check --tp $tp --devices $devices $preset: rc $?; $(grep 'check:' "$out/check_tp${tp}_$preset.log")"
          grep -o 'completed by [^;]*' "$out/check_tp${tp}_$preset.log" | head -1 | cut -c1-160 | tee -a "$summary"
          if [[ "$devices" == 0 && "$tp" -le 4 ]]; then
            CUDA_MODULE_LOADING=EAGER ./build/sparkdraft check --checkpoint "$dir" --tp "$tp" \
              --devices 0 --tp-reduce fused >"$out/check_tp${tp}_fused_$preset.log" 2>&1
            note "check --tp $tp --devices 0 --tp-reduce fused $preset: rc $?;" \
              "$(grep -E 'check:|error' "$out/check_tp${tp}_fused_$preset.log" | head -2 | cut -c1-300)"
          fi
        done
      done
      ;;
    tp-bench)
      gpus=$(nvidia-smi -L 2>/dev/null | wc -l)
      if [[ "$gpus" -lt 2 ]]; then
        note "tp-bench: needs 2 GPUs or more, this machine has $gpus: not run"
      else
        tp=2
        [[ "$gpus" -ge 8 ]] && tp=8
        [[ "$gpus" -ge 4 && "$gpus" -lt 8 ]] && tp=4
        NCCL_NVLS_ENABLE=0 ./build/sparkdraft bench allreduce --json "$out/bench_allreduce.json" \
          >"$out/bench_allreduce.log" 2>&1
        note "bench allreduce: rc $?"
        grep -A40 '^NCCL ' "$out/bench_allreduce.log" | tee -a "$summary"
        for preset in qwen3-8b muse; do
          NCCL_NVLS_ENABLE=0 ./build/sparkdraft bench step --tp "$tp" --preset "$preset" \
            --preset-dir "$presets" --ctx 4096 --rows 1 8 32 \
            --json "$out/bench_step_tp${tp}_$preset.json" >"$out/bench_step_tp${tp}_$preset.log" 2>&1
          note "bench step --tp $tp $preset: rc $?"
          grep -A4 '^preset ' "$out/bench_step_tp${tp}_$preset.log" | tee -a "$summary"
        done
      fi
      ;;
    verify)
      ./build/sparkdraft_cuda_tests --gtest_filter='CudaVerify.*' >"$out/verify_tests.log" 2>&1
      rc=$?
      note "verify tests: rc $rc, $(grep -E '^\[  PASSED  \]' "$out/verify_tests.log" | tail -1)" \
        "$(grep -cE '^\[  FAILED  \] [A-Za-z]' "$out/verify_tests.log") failed"
      grep -E '^\[  FAILED  \] [A-Za-z]' "$out/verify_tests.log" | sort -u | tee -a "$summary"
      for dtype in bf16 f32; do
        for form in auto resident; do
          ./build/sparkdraft bench verify --dtype "$dtype" --form "$form" \
            --json "$out/bench_verify_${dtype}_$form.json" >"$out/bench_verify_${dtype}_$form.log" 2>&1
          note "bench verify $dtype, form $form: rc $?"
          grep -A7 '^V ' "$out/bench_verify_${dtype}_$form.log" | tee -a "$summary"
        done
      done
      san="$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)"
      for tool in memcheck racecheck; do
        "$san" --tool "$tool" ./build/sparkdraft_cuda_tests \
          --gtest_filter='CudaVerify.EqualsCpuAtOneDraftToken:CudaVerify.GraphReplayEqualsEager' \
          >"$out/verify_$tool.log" 2>&1
        note "verify $tool: rc $?; $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/verify_$tool.log" | tr '\n' ' ')"
      done
      ;;
    verify-sweep)
      # The resident form's shape around the launcher's pick: the slice at one request
      # (CTAs a request: 264, 132, 66, 33 at V 151936), requests in flight at 32.
      for slice in 576 1152 2304 4608; do
        ./build/sparkdraft bench verify --form resident --vocab 151936 --rows 1 --slice "$slice" \
          --json "$out/sweep_rows1_slice$slice.json" >"$out/sweep_rows1_slice$slice.log" 2>&1
        note "resident, 1 row, slice $slice: rc $?; $(grep -h '  verify ' "$out/sweep_rows1_slice$slice.log")"
      done
      for threads in 256 512; do
        for rr in 2 4 6; do
          ./build/sparkdraft bench verify --form resident --vocab 151936 --rows 32 --threads "$threads" \
            --resident-rows "$rr" --json "$out/sweep_rows32_t${threads}_rr$rr.json" \
            >"$out/sweep_rows32_t${threads}_rr$rr.log" 2>&1
          note "resident, 32 rows, $threads threads, $rr in flight: rc $?; $(grep -h '  verify \|error' "$out/sweep_rows32_t${threads}_rr$rr.log")"
        done
      done
      ;;
    *)
      echo "tools/gpu_verify.sh: unknown stage '$stage'" >&2
      exit 2
      ;;
  esac
  note "  ($stage: $(($(date +%s) - start)) s)"
done
