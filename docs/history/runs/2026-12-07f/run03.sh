#!/usr/bin/env bash
# 2026-12-07f run 3 (sitting 29): W = main 1e00c2a; Q = W + phase A by pairs of tiles (rows
# <= 8 at rank 256: the two tiles of a pair on half the warps each). Q's Markov and draft
# tests and check (gpu_ab --suite), the step W Q W Q, then bench markov --spec W Q W Q.
# Carry .carry/bin_{W,Q}.tar.xz.
set -u
timeout 330 bash tools/gpu_ab.sh run03 --builds "W Q" --suite Q --filter 'Markov*:CudaDraft.*' \
  --steps "W Q W Q" > /dev/null 2>&1
echo "gpu_ab rc $?" > "$OUT/run03_head.txt"
n=0
for b in W Q W Q; do
  n=$((n + 1))
  timeout 40 b_$b/sparkdraft bench markov --spec --repeats 30 > "$OUT/run03_markov_${b}_$n.txt" 2>&1
  echo "markov --spec $b $n: $(grep -E '^(151936|202048)' "$OUT/run03_markov_${b}_$n.txt" | awk '{print $7 "(" $9 ")"}' | tr '\n' ' ')" >> "$OUT/run03_head.txt"
done
(cd "$OUT" && tar cJf run03_all.tar.xz run03_*; find . -maxdepth 1 ! -name run03_all.tar.xz ! -name . -exec rm -rf {} +)
tar xJOf "$OUT/run03_all.tar.xz" run03_summary.txt 2>/dev/null | head -70
tar xJOf "$OUT/run03_all.tar.xz" run03_head.txt
