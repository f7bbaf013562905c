#!/usr/bin/env bash
# 2026-12-07c run 3 (sitting 26): the H200 refresh of T (branch markov-trim, run 2's T: main +
# the fused Markov step's trims; its whole GPU suite passed on an H100 in run 2). Carry
# .carry/bin_T.tar.xz. Its whole GPU suite and check, the step twice and the peer, then the Markov
# loop and the verifier benches; everything under $OUT tarred into run03_all.tar.xz (run 2 lost
# its summary and the peer's JSON to the 8-file limit), the short tables printed last.
set -u
bash tools/gpu_ab.sh run03 --builds "T" --suite T --steps "T T" --peer "qwen3-8b muse" > /dev/null 2>&1
timeout 100 b_T/sparkdraft bench markov --spec --json "$OUT/run03_markov.json" > "$OUT/run03_markov.txt" 2>&1
echo "bench markov rc $?" >> "$OUT/run03_summary.txt"
timeout 100 b_T/sparkdraft bench verify --json "$OUT/run03_verify.json" > "$OUT/run03_verify.txt" 2>&1
echo "bench verify rc $?" >> "$OUT/run03_summary.txt"
(cd "$OUT" && tar cJf run03_all.tar.xz run03_* && find . -maxdepth 1 -name 'run03_*' ! -name run03_all.tar.xz -delete)
tar xJOf "$OUT/run03_all.tar.xz" run03_summary.txt | head -40
tar xJOf "$OUT/run03_all.tar.xz" run03_markov.txt | tail -8
tar xJOf "$OUT/run03_all.tar.xz" run03_verify.txt | tail -9
