#!/usr/bin/env bash
# 2026-12-07e run 3 (sitting 28): the H200 refresh owed since 2026-12-06h, of W (main: rebuild
# .carry/bin_W.tar.xz from main). On an H200 only (else it stops at once): the whole GPU suite and check, the step
# twice, the peer (qwen3-8b, muse), bench markov --spec and bench verify with their JSON. Carry
# .carry/bin_W.tar.xz (sparkdraft and sparkdraft_cuda_tests). Everything tarred into
# run03_all.tar.xz; the short tables printed last.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
echo "gpu: $gpu" > "$OUT/run03_head.txt"
if [[ "$gpu" != *H200* ]]; then cat "$OUT/run03_head.txt"; exit 0; fi
timeout 450 bash tools/gpu_ab.sh run03 --builds "W" --suite W --steps "W W" --peer "qwen3-8b muse" > /dev/null 2>&1
echo "gpu_ab rc $?" >> "$OUT/run03_head.txt"
timeout 45 b_W/sparkdraft bench markov --spec --json "$OUT/run03_markov.json" > "$OUT/run03_markov.txt" 2>&1
echo "bench markov rc $?" >> "$OUT/run03_head.txt"
timeout 30 b_W/sparkdraft bench verify --json "$OUT/run03_verify.json" > "$OUT/run03_verify.txt" 2>&1
echo "bench verify rc $?" >> "$OUT/run03_head.txt"
(cd "$OUT" && tar cJf run03_all.tar.xz run03_* && find . -maxdepth 1 -name 'run03_*' ! -name run03_all.tar.xz -exec rm -rf {} +)
tar xJOf "$OUT/run03_all.tar.xz" run03_head.txt
tar xJOf "$OUT/run03_all.tar.xz" run03_summary.txt 2>/dev/null | head -40
tar xJOf "$OUT/run03_all.tar.xz" run03_markov.txt | tail -8
tar xJOf "$OUT/run03_all.tar.xz" run03_verify.txt | tail -9
