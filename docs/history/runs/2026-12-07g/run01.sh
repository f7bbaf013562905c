#!/usr/bin/env bash
# 2026-12-07g run 1 (sitting 30): 2026-12-07f run 4 as written (never run: no machine), with
# the trained-profile logits added. W = main 1e00c2a (048ee16's Markov kernel has the same
# SASS); V = W + the staged draw's row cut (branch s29-cut). V's CudaVerify* tests; bench
# verify W V W V on uniform logits, then W V W V on --logits trained. On an H200 also bench
# markov --spec and bench verify (W and V) with JSON. Carry .carry/bin_{W,V}.tar.xz.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
H=$OUT/run01_head.txt
echo "gpu: $gpu" > "$H"
mkdir -p b_W b_V && tar xJf .carry/bin_W.tar.xz -C b_W && tar xJf .carry/bin_V.tar.xz -C b_V
timeout 150 b_V/sparkdraft_cuda_tests --gtest_filter='CudaVerify*' > "$OUT/run01_tests_V.log" 2>&1
echo "V tests rc $? $(grep -E '^\[  (PASSED|FAILED)' "$OUT/run01_tests_V.log" | tr '\n' ' ')" >> "$H"
grep -E '^\[  FAILED' "$OUT/run01_tests_V.log" | head -20 >> "$H"
for logits in uniform trained; do
  # A short lease (the session's last device seconds): the trained set only if time is left.
  if [[ $logits == trained && $SECONDS -gt 150 ]]; then echo "trained set skipped at ${SECONDS}s" >> "$H"; break; fi
  n=0
  for b in W V W V; do
    n=$((n + 1))
    f="$OUT/run01_verify_${logits}_${b}_$n.txt"
    timeout 60 b_$b/sparkdraft bench verify --repeats 30 --logits $logits > "$f" 2>&1
    echo "verify $logits $b $n rc $?: $(grep -E '^  verify ' "$f" | awk '{print $2}' | tr '\n' ' ')" >> "$H"
  done
done
if [[ "$gpu" == *H200* ]]; then
  timeout 45 b_W/sparkdraft bench markov --spec --json "$OUT/run01_markov.json" > "$OUT/run01_markov.txt" 2>&1
  echo "bench markov rc $?" >> "$H"
  for b in W V; do
    timeout 30 b_$b/sparkdraft bench verify --json "$OUT/run01_verify_$b.json" > "$OUT/run01_verify_json_$b.txt" 2>&1
    echo "bench verify json $b rc $?" >> "$H"
  done
fi
(cd "$OUT" && tar cJf run01_all.tar.xz run01_*; find . -maxdepth 1 ! -name run01_all.tar.xz ! -name . -exec rm -rf {} +)
tar xJOf "$OUT/run01_all.tar.xz" run01_verify_uniform_V_2.txt 2>/dev/null | tail -12
cat "$H" 2>/dev/null || tar xJOf "$OUT/run01_all.tar.xz" run01_head.txt
