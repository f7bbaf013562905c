#!/usr/bin/env bash
# 2026-12-05e run 4. D = main at 2a139d6; G = D + to_bf16 by the hardware conversion on the
# device (cvt.rn.bf16.f32, its NaN 0x7fff replaced by 0x7fc0) + the Markov step logit without
# its second conversion. (a) G's whole GPU suite (with the new exhaustive 2^32 test), check;
# (b) bench markov --spec D / G / D / G; (c) bench step --spec --timeline D / G / D / G.
set -u
RUN=${RUN:-run04}
for v in D G; do mkdir -p b_$v && tar xJf .carry/bin_$v.tar.xz -C b_$v; done
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
timeout 260 ./b_G/sparkdraft_cuda_tests > $L/tests.log 2>&1
note "G gpu suite rc $? $(grep -E '^\[  PASSED  \]' $L/tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | head >> $S
grep -E 'Bf16Hardware|OK \] CoreDevice.Bf16' $L/tests.log | head -3 >> $S
for st in qwen3 muse; do
  timeout 60 ./b_G/sparkdraft check --style $st > $L/check_$st.log 2>&1
  note "check tiny $st rc $? $(grep 'check:' $L/check_$st.log | cut -c1-100)"
done
for v in D G D2 G2; do
  b=${v%2}
  timeout 120 ./b_$b/sparkdraft bench markov --spec --json $L/markov_$v.json > $L/markov_$v.log 2>&1
  note "bench markov --spec $v rc $? ($(( $(date +%s)-t0 ))s)"; grep -E '^(151936|202048) ' $L/markov_$v.log | cut -c1-90 >> $S
done
for v in D G D2 G2; do
  b=${v%2}
  timeout 100 ./b_$b/sparkdraft bench step --spec --timeline --preset-dir /tmp --json $L/step_$v.json > $L/step_$v.log 2>&1
  note "bench step --spec $v rc $? ($(( $(date +%s)-t0 ))s)"; grep -A6 'memory clock' $L/step_$v.log | tail -6 | cut -c1-80 >> $S
  python3 - $L/step_$v.json >> $S <<'PY'
import json, sys
for r in json.load(open(sys.argv[1])):
    t = r.get("fused_timeline", {}).get("timeline", [])
    def tot(key):
        b = [k["duration_us"] for k in t if key in k["name"]]
        return f"{len(b)} x {key.split('_')[-2] if key.count('_')>1 else key} {sum(b):.1f}"
    print(f"  {r.get('preset')} rows {r.get('rows')}: " + "; ".join(tot(k) for k in ("attention_chunk", "fused_step_kernel", "gemm_", "residual_boundary")))
PY
done
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs
cat $S
