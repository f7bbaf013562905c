#!/usr/bin/env bash
# 2026-12-04d run 10: SwiGLU (silu_mul) eight outputs a thread with 16-byte loads and stores where
# I is a multiple of 8 (run 8's timeline: 92.8 us of the step at 32 requests, 18.6 us a layer for
# 19 MB). CudaSiluMul.* and every backbone / draft test that runs it (GPU == CPU bit for bit), then
# bench step qwen3-8b ctx 4096 rows 1 8 32 with the timeline.
set -u
RUN=${RUN:-run10}
mkdir -p build /tmp/sdlib
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests && cp /tmp/libcupti.so.13 /tmp/sdlib/
export LD_LIBRARY_PATH=/tmp/sdlib:${LD_LIBRARY_PATH:-}
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
T=./build/sparkdraft_cuda_tests
timeout 300 $T --gtest_filter='CudaSiluMul.*:*Swiglu*:*SwiGLU*:CudaBackbone*:CudaDraft.*-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*:*Speed*' > $L/tests.log 2>&1
echo "tests rc $? $(grep -E '^\[  PASSED  \]' $L/tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u | wc -l) failed" >> $S
grep -E '^\[  FAILED  \] [A-Za-z]' $L/tests.log | sort -u >> $S
for preset in tiny; do for st in qwen3 muse; do
  rm -rf /tmp/ck && ./build/sparkdraft make-checkpoint --preset $preset --style $st --out /tmp/ck > /dev/null 2>&1
  ./build/sparkdraft check --checkpoint /tmp/ck > $L/check_$st.log 2>&1
  echo "check $preset $st rc $? $(grep 'check:' $L/check_$st.log | cut -c1-100)" >> $S
done; done
timeout 400 ./build/sparkdraft bench step --preset qwen3-8b --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
  --repeats 20 --timeline --json $OUT/${RUN}_bench_step_qwen3-8b.json > $L/step.log 2>&1
echo "bench step qwen3-8b --timeline: rc $?" >> $S
grep -E "  fused |timeline of one" $L/step.log >> $S
grep -E "^qwen3-8b " $L/step.log >> $S
python3 - $OUT/${RUN}_bench_step_qwen3-8b.json >> $S <<'PY'
import json, sys
for rec in json.load(open(sys.argv[1])):
    ks = [k for k in rec["fused_timeline"]["timeline"] if "silu" in k["name"]]
    print(f"  rows {rec['rows']}: silu_mul kernels {len(ks)}, {sum(k['duration_us'] for k in ks):.1f} us")
PY
cd $OUT && tar cJf logs.tar.xz logs && rm -rf logs
cat $S
