#!/usr/bin/env bash
# 2026-12-07c run 2 (sitting 26): main (M, 197dde5, never run on an H200 since e5bb815) and T =
# M + the fused Markov step's trims (branch markov-trim: fragments by ldmatrix, each loaded once;
# the ring's copies at constant strides; the ring stage and the lane slot without divisions; the
# first epilogue pass's base logits requested before phase A). Same products, same order: the
# same bits by construction; T's whole GPU suite and check decide. Then the step M T M T, the
# Markov loop M T M T, the peer, all in one session. Carry .carry/bin_{M,T}.tar.xz.
set -u
bash tools/gpu_ab.sh run02 --builds "M T" --suite T --steps "M T M T" --peer "qwen3-8b muse"
for style in qwen3 muse; do
  timeout 60 b_M/sparkdraft check --style $style 2>&1 | grep 'check:' | cut -c1-100 | sed "s/^/M check $style: /"
done
n=0
for b in M T M T; do
  n=$((n + 1))
  timeout 100 b_$b/sparkdraft bench markov --spec --repeats 30 --json "$OUT/run02_markov_${b}_$n.json" \
    > "$OUT/run02_markov_${b}_$n.txt" 2>&1
  echo "bench markov $b ($n) rc $?"
done
python3 - "$OUT" <<'PY'
import json, glob, sys, os
rows = {}
for f in sorted(glob.glob(os.path.join(sys.argv[1], "run02_markov_*.json"))):
    tag = os.path.basename(f)[len("run02_markov_"):-5]
    for e in json.load(open(f)):
        rows.setdefault((e.get("vocab"), e.get("rank"), e.get("rows")), {})[tag] = e.get("fused_us")
tags = sorted({t for v in rows.values() for t in v}, key=lambda t: int(t.split("_")[1]))
print("markov fused us  V rank rows | " + " ".join(tags))
for k, v in sorted(rows.items(), key=lambda kv: tuple(x or 0 for x in kv[0])):
    print(k, " ".join("%.1f" % v[t] if v.get(t) else "-" for t in tags))
PY
# Last (optional, time permitting): ncu of T's first fused_step_kernel at 32 requests of qwen3-8b,
# per-instruction counts and stall samples beside 2026-12-06i run 1's of main's.
L=$OUT/ncu; mkdir -p "$L"
timeout 120 ncu --clock-control none --kernel-name-base demangled -k "regex:fused_step_kernel" -c 1 \
  --set full --import-source yes -o "$L/kT" ./b_T/sparkdraft bench step --preset qwen3-8b \
  --ctx 4096 --rows 32 --repeats 2 --preset-dir /tmp > "$L/ncu_kT.log" 2>&1
echo "ncu T fused_step rc $?"
ncu -i "$L/kT.ncu-rep" --page details > "$L/kT_details.txt" 2>&1
ncu -i "$L/kT.ncu-rep" --page source --csv --print-source sass > "$L/kT_sass.csv" 2>&1
rm -f "$L/kT.ncu-rep"
grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|Executed Instructions  |Registers Per" "$L/kT_details.txt" | head -8
(cd "$OUT" && tar cJf run02ncu_logs.tar.xz ncu && rm -rf ncu)
