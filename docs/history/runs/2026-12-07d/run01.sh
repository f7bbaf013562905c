#!/usr/bin/env bash
# 2026-12-07d run 1 (sitting 27): main (M = 32b24f4's code, the Markov trims in). Carry
# .carry/bin_M.tar.xz. First ncu of the fused Markov step at 32 requests of qwen3-8b
# (fused_step_kernel<256, 8>, --set full with source: its stall samples, which sitting 26's
# run lost to the 8-file limit), then on an H200 only the refresh owed since 2026-12-06h
# (the whole GPU suite, check, the step twice, the peer, bench markov and verify). Every
# output tarred into run01_all.tar.xz; the short tables printed last.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
mkdir -p b_M && tar xJf .carry/bin_M.tar.xz -C b_M
L=$OUT/run01_ncu; mkdir -p "$L"
timeout 200 ncu --clock-control none --kernel-name-base demangled -k "regex:fused_step_kernel" -c 1 \
  --set full --import-source yes -o "$L/k" ./b_M/sparkdraft bench step --preset qwen3-8b \
  --ctx 4096 --rows 32 --repeats 2 --preset-dir /tmp > "$L/ncu.log" 2>&1
echo "ncu fused_step rc $?" > "$OUT/run01_head.txt"
ncu -i "$L/k.ncu-rep" --page details > "$L/details.txt" 2>&1
ncu -i "$L/k.ncu-rep" --page source --csv --print-source sass > "$L/sass.csv" 2>&1
rm -f "$L/k.ncu-rep"
python3 tools/ncu_stalls.py "fused_step=$L/sass.csv" > "$L/stalls.txt" 2>&1
echo "gpu: $gpu" >> "$OUT/run01_head.txt"
if [[ "$gpu" == *H200* ]]; then
  timeout 420 bash tools/gpu_ab.sh run01 --builds "M" --suite M --steps "M M" --peer "qwen3-8b muse" > /dev/null 2>&1
  echo "gpu_ab rc $?" >> "$OUT/run01_head.txt"
  timeout 60 b_M/sparkdraft bench markov --spec --json "$OUT/run01_markov.json" > "$OUT/run01_markov.txt" 2>&1
  echo "bench markov rc $?" >> "$OUT/run01_head.txt"
  timeout 40 b_M/sparkdraft bench verify --json "$OUT/run01_verify.json" > "$OUT/run01_verify.txt" 2>&1
  echo "bench verify rc $?" >> "$OUT/run01_head.txt"
fi
(cd "$OUT" && tar cJf run01_all.tar.xz run01_* && find . -maxdepth 1 -name 'run01_*' ! -name run01_all.tar.xz -exec rm -rf {} +)
tar xJOf "$OUT/run01_all.tar.xz" run01_head.txt
tar xJOf "$OUT/run01_all.tar.xz" run01_ncu/details.txt | grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|Executed Instructions  |Registers Per|Achieved Occupancy|Theoretical Occupancy" | head -10
tar xJOf "$OUT/run01_all.tar.xz" run01_ncu/stalls.txt | head -60
tar xJOf "$OUT/run01_all.tar.xz" run01_summary.txt 2>/dev/null | tail -30
tar xJOf "$OUT/run01_all.tar.xz" run01_markov.txt 2>/dev/null | tail -8
tar xJOf "$OUT/run01_all.tar.xz" run01_verify.txt 2>/dev/null | tail -9
