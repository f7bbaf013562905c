#!/usr/bin/env bash
# 2026-12-04 run 5 (run 4's binaries): does the fused Markov loop's slot cut pay at T 0.5?
# bench markov --spec --temperature 0.5 on uniform logits, this tree and the tree before the
# cut (run 1's sd_cli0), then the trained profile at T 0.5; and the step's timeline with the
# defaults (PDL in the Markov loop only).
set -u
mkdir -p build build-python
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft
tar xJf .carry/py.tar.xz -C build-python
S=$OUT/run05_summary.txt; : > $S
note() { echo "$*" | tee -a $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm --format=csv,noheader | tee -a $S
timeout 150 /tmp/sd_cli0 bench markov --spec --temperature 0.5 --json $OUT/run05_markov_uniform_t05_before.json > $OUT/m0.log 2>&1
note "before the cut, uniform T 0.5 rc $?"; tail -7 $OUT/m0.log | tee -a $S
for lg in uniform trained; do
  timeout 150 ./build/sparkdraft bench markov --spec --temperature 0.5 --logits $lg --json $OUT/run05_markov_${lg}_t05.json > $OUT/m_$lg.log 2>&1
  note "$lg T 0.5 rc $?"; tail -7 $OUT/m_$lg.log | tee -a $S
done
PYTHONPATH=build-python/pkg-cuda-py312 timeout 200 python3 bench/python/timeline.py --preset qwen3-8b \
  --preset-dir /tmp --rows 1 8 32 --json $OUT/run05_timeline_qwen3-8b.json \
  --md $OUT/run05_timeline_qwen3-8b.md > $OUT/timeline.log 2>&1
note "timeline rc $?"; tail -5 $OUT/timeline.log | tee -a $S
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log
