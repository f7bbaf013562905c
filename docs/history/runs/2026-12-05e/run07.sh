#!/usr/bin/env bash
# 2026-12-05e run 7. G = main's code (1d50aa0); H = G with attention_splits aiming at half a
# wave (want = CTAs of a wave / (2 units)): at 8 requests qwen3-8b 2 splits instead of 4, muse 1
# instead of 2; at one request 16 instead of 33. bench step --spec --timeline G / H / G / H.
set -u
RUN=${RUN:-run07}
for v in G H; do mkdir -p b_$v && tar xJf .carry/bin_$v.tar.xz -C b_$v; done
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name --format=csv,noheader >> $S
for v in G H G2 H2; do
  b=${v%2}
  timeout 60 ./b_$b/sparkdraft bench step --spec --timeline --preset-dir /tmp --json $L/step_$v.json > $L/step_$v.log 2>&1
  note "bench step --spec $v rc $? ($(( $(date +%s)-t0 ))s)"; grep -A6 'memory clock' $L/step_$v.log | tail -6 | cut -c1-80 >> $S
  python3 - $L/step_$v.json >> $S <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    t = r.get("fused_timeline", {}).get("timeline", [])
    def tot(key):
        b = [k["duration_us"] for k in t if key in k["name"]]
        return f"{len(b)} x {key} {sum(b):.1f}"
    print(f"  {r.get('preset')} rows {r.get('rows')}: " + "; ".join(tot(k) for k in ("attention_chunk", "attention_combine")))
PY
done
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
