#!/usr/bin/env bash
# 2026-12-07d run 2 (sitting 27), one machine session: M = main (32b24f4's code); T = M + the
# fused Markov step's Philox draws interleaved (the kEpl draws in a loop of their own, the
# brackets branch-free after them) and the step logits' transform under one branch a slot
# (load_logits: the kEpl sums first); U = T + the transform's tanh by tanh_fast (its try for
# the slot's kEpl entries, then tanh_f32 for all of them where one is not trusted; the same
# bits on every float: CudaFastMath.TanhEqualsTanhF32OnEveryFloat) + silu_mul_vec_kernel's eight
# silu_fast tries of a thread before any slow path (silu_mul8). Same values, same order:
# the same bits by construction; U's whole GPU suite (T's code is U's but the tanh) and check
# decide. Then the step M U M U, bench markov --spec M T U M T U, the rank-512 loop with
# the Muse transform (--transform) M U, and an ncu of U's fused_step_kernel<256, 8> at 32
# requests (beside run 1's of M). Carry .carry/bin_{M,T,U}.tar.xz (M and T: the CLI only). Everything
# tarred into run02_all.tar.xz.
set -u
gpu=$(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)
timeout 330 bash tools/gpu_ab.sh run02 --builds "M T U" --suite U --steps "M U M U" > /dev/null 2>&1
echo "gpu: $gpu; gpu_ab rc $?" > "$OUT/run02_head.txt"
n=0
for b in M T U M T U; do
  n=$((n + 1))
  timeout 60 b_$b/sparkdraft bench markov --spec --repeats 30 --json "$OUT/run02_markov_${b}_$n.json" \
    > "$OUT/run02_markov_${b}_$n.txt" 2>&1
  echo "bench markov $b ($n) rc $?" >> "$OUT/run02_head.txt"
done
for b in M U; do
  n=$((n + 1))
  timeout 40 b_$b/sparkdraft bench markov --vocab 202048 --rank 512 --rows 1 8 32 --transform \
    --repeats 30 --json "$OUT/run02_markovx_${b}_$n.json" > "$OUT/run02_markovx_${b}_$n.txt" 2>&1
  echo "bench markov --transform $b ($n) rc $?" >> "$OUT/run02_head.txt"
done
python3 - "$OUT" > "$OUT/run02_markov_table.txt" <<'PY'
import json, glob, sys, os
for kind in ("markov", "markovx"):
    rows = {}
    for f in sorted(glob.glob(os.path.join(sys.argv[1], "run02_%s_*_*.json" % kind))):
        tag = os.path.basename(f)[len("run02_%s_" % kind):-5]
        for e in json.load(open(f)):
            rows.setdefault((e.get("vocab"), e.get("rank"), e.get("rows")), {})[tag] = e.get("fused_us")
    tags = sorted({t for v in rows.values() for t in v}, key=lambda t: int(t.split("_")[1]))
    print("%s fused us  V rank rows | " % kind + " ".join(tags))
    for k, v in sorted(rows.items(), key=lambda kv: tuple(x or 0 for x in kv[0])):
        print(k, " ".join("%.1f" % v[t] if v.get(t) else "-" for t in tags))
PY
L=$OUT/run02_ncu; mkdir -p "$L"
timeout 90 ncu --clock-control none --kernel-name-base demangled -k "regex:fused_step_kernel" -c 1 \
  --set full --import-source yes -o "$L/k" ./b_U/sparkdraft bench step --preset qwen3-8b \
  --ctx 4096 --rows 32 --repeats 2 --preset-dir /tmp > "$L/ncu.log" 2>&1
echo "ncu U fused_step rc $?" >> "$OUT/run02_head.txt"
ncu -i "$L/k.ncu-rep" --page details > "$L/details.txt" 2>&1
ncu -i "$L/k.ncu-rep" --page source --csv --print-source sass > "$L/sass.csv" 2>&1
rm -f "$L/k.ncu-rep"
python3 tools/ncu_stalls.py "fused_step=$L/sass.csv" > "$L/stalls.txt" 2>&1
(cd "$OUT" && tar cJf run02_all.tar.xz run02_* && find . -maxdepth 1 -name 'run02_*' ! -name run02_all.tar.xz -exec rm -rf {} +)
tar xJOf "$OUT/run02_all.tar.xz" run02_head.txt
tar xJOf "$OUT/run02_all.tar.xz" run02_summary.txt 2>/dev/null | tail -30
tar xJOf "$OUT/run02_all.tar.xz" run02_markov_table.txt
tar xJOf "$OUT/run02_all.tar.xz" run02_ncu/details.txt | grep -E "Duration|Issue Slots Busy|Warp Cycles Per Issued|Executed Instructions  |Registers Per" | head -6
tar xJOf "$OUT/run02_all.tar.xz" run02_ncu/stalls.txt | head -8
