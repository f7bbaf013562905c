#!/usr/bin/env bash
# 2026-12-06i run 1 (sitting 23). Carry .carry/bin_Ms.tar.xz (main 8d9acfd, sparkdraft only),
# .carry/bin_AC.tar.xz and .carry/bin_T.tar.xz (each with the GPU tests).
# AC = main + attention's padding rows in the unmasked form and the scores' k steps without a
#     test at hdp = 16 KS (branch attn-padding-full) + bench step's products, tensor-core peak
#     and roofline floor (branch compute-floor; branch ac merges both): AC's whole GPU suite,
#     check, then the step with the default (PDL off), M AC M AC.
# T = main + the late trigger in the residual boundary and the combine (branch
#     pdl-late-trigger; 2026-12-06h run04.sh): T's boundary / attention / draft / TP tests,
#     check with --step-pdl on, the step under PDL M T M T with the --adds table.
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
bash tools/gpu_ab.sh run01 --builds "Ms AC" --suite AC --steps "Ms AC Ms AC" \
  --match attention_chunk attention_combine gemm_wg fused_step residual_boundary
# ncu (clocks left alone, --set full, source imported) on AC's first attention_chunk_kernel and
# first fused_step_kernel at 32 requests of qwen3-8b: per-instruction counts and stall samples.
S=$OUT/run01ncu_summary.txt; : > "$S"
L=$OUT/logs; mkdir -p "$L"
i=0
for k in "attention_chunk_kernel" "fused_step_kernel"; do
  i=$((i + 1))
  timeout 150 ncu --clock-control none --kernel-name-base demangled -k "regex:$k" -c 1 \
    --set full --import-source yes -o "$L/k$i" ./b_AC/sparkdraft bench step --preset qwen3-8b \
    --ctx 4096 --rows 32 --repeats 2 --preset-dir /tmp > "$L/ncu_k$i.log" 2>&1
  echo "ncu k$i ($k) rc $?" >> "$S"
  ncu -i "$L/k$i.ncu-rep" --page details > "$L/k${i}_details.txt" 2>&1
  ncu -i "$L/k$i.ncu-rep" --page source --csv --print-source sass > "$L/k${i}_sass.csv" 2>&1
  rm -f "$L/k$i.ncu-rep"
  grep -E "Duration|DRAM Throughput|Compute \(SM\)|Issue Slots Busy|Achieved Occupancy|Warp Cycles Per Issued|Executed Instructions  |Registers Per|Grid Size" "$L/k${i}_details.txt" | head -12 >> "$S"
done
(cd "$OUT" && tar cJf run01ncu_logs.tar.xz logs && rm -rf logs)
bash tools/gpu_ab.sh run01pdl --builds "Ms T" --suite T \
  --filter 'CudaResidualBoundary*:CudaAttention.*:CudaDraft.StepPdl*:CudaDraft.Tiny*:CudaTp.*:PeerReduce.*' \
  --steps "Ms T Ms T" --step-args "--spec --step-pdl on"
for style in qwen3 muse; do
  echo "check --step-pdl on tiny $style: $(b_T/sparkdraft check --style $style --step-pdl on 2>&1 | tail -1)" >> "$OUT/run01pdl_summary.txt"
done
mkdir -p /tmp/r1 && tar xJf "$OUT/run01pdl_logs.tar.xz" -C /tmp/r1 &&
  python3 tools/step_kernels.py /tmp/r1/logs/step_Ms.json /tmp/r1/logs/step_T.json --adds --top 8 \
    >> "$OUT/run01pdl_summary.txt"
cat "$OUT/run01_summary.txt" "$OUT/run01pdl_summary.txt" "$S"
