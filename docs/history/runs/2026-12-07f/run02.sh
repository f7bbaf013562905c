#!/usr/bin/env bash
# 2026-12-07f run 2 (sitting 29): Z = 8ffd2e5 (CLI only), W = main 1e00c2a (Z + the 4-entry
# vector slots; sparkdraft and sparkdraft_cuda_tests). On an H200: the refresh owed since
# 2026-12-06h (W's whole GPU suite, check, the step Z W Z W, the peer of both presets, bench
# markov --spec and bench verify with their JSON). On an H100: ncu of W's fused Markov step
# at 8 requests of qwen3-8b. Carry .carry/bin_{Z,W}.tar.xz.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $gpu" > "$OUT/run02_head.txt"
if [[ "$gpu" == *H200* ]]; then
  timeout 470 bash tools/gpu_ab.sh run02 --builds "Z W" --suite W --steps "Z W Z W" \
    --peer "qwen3-8b muse" > /dev/null 2>&1
  echo "gpu_ab rc $?" >> "$OUT/run02_head.txt"
  timeout 45 b_W/sparkdraft bench markov --spec --json "$OUT/run02_markov.json" > "$OUT/run02_markov.txt" 2>&1
  echo "bench markov rc $?" >> "$OUT/run02_head.txt"
  timeout 30 b_W/sparkdraft bench verify --json "$OUT/run02_verify.json" > "$OUT/run02_verify.txt" 2>&1
  echo "bench verify rc $?" >> "$OUT/run02_head.txt"
else
  # Not an H200: only ncu of W's fused_step_kernel at 8 requests of qwen3-8b (where it
  # waits since the 4-entry vector slots), the H200 refresh left for another call.
  mkdir -p b_W && tar xJf .carry/bin_W.tar.xz -C b_W
  L=$OUT/run02_ncu; mkdir -p "$L"
  timeout 150 ncu --clock-control none --kernel-name-base demangled -k "regex:fused_step_kernel" -c 1 \
    --set full --import-source yes -o "$L/k" ./b_W/sparkdraft bench step --preset qwen3-8b \
    --ctx 4096 --rows 8 --repeats 2 --preset-dir /tmp > "$L/ncu.log" 2>&1
  echo "ncu fused_step 8 rows rc $?" >> "$OUT/run02_head.txt"
  ncu -i "$L/k.ncu-rep" --page details > "$L/details.txt" 2>&1
  ncu -i "$L/k.ncu-rep" --page source --csv --print-source sass > "$L/sass.csv" 2>&1
  rm -f "$L/k.ncu-rep"
  python3 tools/ncu_stalls.py "fused_step=$L/sass.csv" > "$L/stalls.txt" 2>&1
  head -40 "$L/stalls.txt" >> "$OUT/run02_head.txt"
fi
(cd "$OUT" && tar cJf run02_all.tar.xz run02_* $(ls -d logs 2>/dev/null); find . -maxdepth 1 ! -name run02_all.tar.xz ! -name . -exec rm -rf {} +)
tar xJOf "$OUT/run02_all.tar.xz" run02_head.txt
tar xJOf "$OUT/run02_all.tar.xz" run02_summary.txt 2>/dev/null | head -60
tar xJOf "$OUT/run02_all.tar.xz" run02_markov.txt 2>/dev/null | tail -8
tar xJOf "$OUT/run02_all.tar.xz" run02_verify.txt 2>/dev/null | tail -9
