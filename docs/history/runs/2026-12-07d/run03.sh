#!/usr/bin/env bash
# 2026-12-07d run 3 (sitting 27): the H200 refresh owed since 2026-12-06h, of main's code (U of
# run 2 = f844d37's kernels). On an H200 only (else it stops at once): the whole GPU suite and
# check, the step twice, the peer (qwen3-8b, muse), bench markov --spec and bench verify; every
# output tarred into run03_all.tar.xz, the short tables printed last. Carry .carry/bin_U.tar.xz.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $gpu" > "$OUT/run03_head.txt"
if [[ "$gpu" != *H200* ]]; then cat "$OUT/run03_head.txt"; exit 0; fi
timeout 420 bash tools/gpu_ab.sh run03 --builds "U" --suite U --steps "U U" --peer "qwen3-8b muse" > /dev/null 2>&1
echo "gpu_ab rc $?" >> "$OUT/run03_head.txt"
timeout 45 b_U/sparkdraft bench markov --spec --json "$OUT/run03_markov.json" > "$OUT/run03_markov.txt" 2>&1
echo "bench markov rc $?" >> "$OUT/run03_head.txt"
timeout 30 b_U/sparkdraft bench verify --json "$OUT/run03_verify.json" > "$OUT/run03_verify.txt" 2>&1
echo "bench verify rc $?" >> "$OUT/run03_head.txt"
(cd "$OUT" && tar cJf run03_all.tar.xz run03_* && find . -maxdepth 1 -name 'run03_*' ! -name run03_all.tar.xz -exec rm -rf {} +)
tar xJOf "$OUT/run03_all.tar.xz" run03_head.txt
tar xJOf "$OUT/run03_all.tar.xz" run03_summary.txt 2>/dev/null | head -30
tar xJOf "$OUT/run03_all.tar.xz" run03_markov.txt | tail -8
tar xJOf "$OUT/run03_all.tar.xz" run03_verify.txt | tail -9
