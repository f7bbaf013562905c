#!/usr/bin/env bash
# 2026-12-06f run 2: the fused Markov loop's per-warp draw queue (branch markov-drawq: 6e45e8d,
# 51a6c6f; written by a helper in sitting 20, not run before). Builds:
#   F2s = main's kernels (21d9ba0; sparkdraft only);
#   MQ  = markov-drawq at 8c84cb8 (sparkdraft and tests).
# MQ's Markov tests (the extended MarkovFused.SlotCutMatchesEagerAndCpu: mixed cut and uncut
# slots at kEpl 8 / 4 / 2 / 1), check, then bench markov --spec on uniform and trained-profile
# logits (T 1), F2s then MQ (each checks fused == eager first).
set -u
nvidia-smi --query-gpu=name --format=csv,noheader
bash tools/gpu_ab.sh run02 --builds "F2s MQ" --suite MQ \
  --filter "MarkovFused.*:MarkovNoiseBound.*:MarkovEager.*:MarkovVocabParallel.*"
mkdir -p "$OUT/m"
declare -A seen=()
for b in F2s MQ; do
  seen[$b]=$((${seen[$b]:-0} + 1))
  for l in uniform trained; do
    f="$OUT/m/run02_markov_${b}_${l}_${seen[$b]}"
    timeout 100 "./b_$b/sparkdraft" bench markov --spec --logits "$l" --repeats 30 --json "$f.json" \
      >"$f.log" 2>&1
    echo "bench markov $b $l #${seen[$b]} rc $?"
  done
done
python3 - "$OUT" <<'PY'
import json, sys, glob, os, collections
t = collections.defaultdict(list)
for f in sorted(glob.glob(os.path.join(sys.argv[1], "m", "run02_markov_*.json"))):
    b, l = os.path.basename(f).split("_")[2:4]
    for r in json.load(open(f)):
        t[(l, r.get("vocab"), r.get("rows"), b)].append(r.get("fused_us"))
print("logits V rows: F2s fused us | MQ fused us")
for key in sorted({k[:3] for k in t}, key=str):
    print(*key, t[key + ("F2s",)], t[key + ("MQ",)])
PY
(cd "$OUT" && tar cJf run02_markov.tar.xz m && rm -rf m)
