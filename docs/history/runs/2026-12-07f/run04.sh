#!/usr/bin/env bash
# 2026-12-07f run 4 (sitting 29): W = main 1e00c2a; V = W + the staged draw's row cut (the
# decision leaves the score of the target's first id in the residual race, one float below
# it; the draw skips ids whose bound is below it before q and the log). V's CudaVerify.*
# tests; bench verify W V W V.
# On an H200 also part of the refresh owed since 2026-12-06h (as much as the session's
# device time allows): bench markov --spec and bench verify (W and V) with JSON.
# Carry .carry/bin_{W,V}.tar.xz.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
H=$OUT/run04_head.txt
echo "gpu: $gpu" > "$H"
mkdir -p b_W b_V && tar xJf .carry/bin_W.tar.xz -C b_W && tar xJf .carry/bin_V.tar.xz -C b_V
timeout 150 b_V/sparkdraft_cuda_tests --gtest_filter='CudaVerify*' > "$OUT/run04_tests_V.log" 2>&1
echo "V tests rc $? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/run04_tests_V.log" | tr '\n' ' ')" >> "$H"
grep -E '^\[  FAILED' "$OUT/run04_tests_V.log" | head -20 >> "$H"
n=0
for b in W V W V; do
  n=$((n + 1))
  timeout 60 b_$b/sparkdraft bench verify --repeats 30 > "$OUT/run04_verify_${b}_$n.txt" 2>&1
  echo "verify $b $n rc $?: $(grep -E '^  verify ' "$OUT/run04_verify_${b}_$n.txt" | awk '{print $2}' | tr '\n' ' ')" >> "$H"
done
if [[ "$gpu" == *H200* ]]; then
  timeout 45 b_W/sparkdraft bench markov --spec --json "$OUT/run04_markov.json" > "$OUT/run04_markov.txt" 2>&1
  echo "bench markov rc $?" >> "$H"
  for b in W V; do
    timeout 30 b_$b/sparkdraft bench verify --json "$OUT/run04_verify_$b.json" > "$OUT/run04_verify_json_$b.txt" 2>&1
    echo "bench verify json $b rc $?" >> "$H"
  done
fi
(cd "$OUT" && tar cJf run04_all.tar.xz run04_* $(ls -d logs 2>/dev/null); find . -maxdepth 1 ! -name run04_all.tar.xz ! -name . -exec rm -rf {} +)
tar xJOf "$OUT/run04_all.tar.xz" run04_summary.txt 2>/dev/null | head -30
tar xJOf "$OUT/run04_all.tar.xz" run04_markov.txt 2>/dev/null | tail -8
cat "$H" 2>/dev/null || tar xJOf "$OUT/run04_all.tar.xz" run04_head.txt
