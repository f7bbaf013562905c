#!/usr/bin/env bash
# 2026-12-04d run 8: where the draft step's graph is idle (issue 24, "measure the gaps"): bench step
# --timeline (one replay of the fused graph under CUPTI: each kernel's start and end) on the
# qwen3-8b preset, ctx 4096, rows 1, 8 and 32, with programmatic dependent launch off (the default)
# and on (--step-pdl on). CUPTI is the toolkit's libcupti.so.13, carried with the binary.
set -u
RUN=${RUN:-run08}
mkdir -p build /tmp/sdlib
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/libcupti.so.13 /tmp/sdlib/
export LD_LIBRARY_PATH=/tmp/sdlib:${LD_LIBRARY_PATH:-}
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
for pdl in off on; do
  timeout 400 ./build/sparkdraft bench step --preset qwen3-8b --preset-dir /tmp --ctx 4096 --rows 1 8 32 \
    --repeats 20 --timeline --step-pdl $pdl --json $OUT/${RUN}_bench_step_timeline_pdl_$pdl.json > $L/step_pdl_$pdl.log 2>&1
  echo "bench step qwen3-8b --timeline --step-pdl $pdl: rc $?" >> $S
  grep -E "rows [0-9]+:|  fused |timeline of one|    gap " $L/step_pdl_$pdl.log >> $S
  grep -E "^qwen3-8b " $L/step_pdl_$pdl.log >> $S
done
cd $OUT && tar cJf logs.tar.xz logs && rm -rf logs
cat $S
