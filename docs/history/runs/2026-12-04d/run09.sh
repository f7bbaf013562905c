#!/usr/bin/env bash
# 2026-12-04d run 9: why attention takes 2.4x its K/V floor at 32 requests (issue 24, lever 1; run 8:
# 1574.7 us of the step's 4409.9 at 32 rows): ncu's speed of light, memory workload, warp states and
# the SASS lines with the most stall samples of one attention_chunk_kernel (bench step qwen3-8b,
# ctx 4096, rows 32, the first launch: the warm-up call), and the same at 8 rows.
set -u
RUN=${RUN:-run09}
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
for rows in 32 8; do
  timeout 280 ncu --kernel-name regex:attention_chunk --launch-count 1 \
    --section SpeedOfLight --section WarpStateStats --section SourceCounters --section LaunchStats \
    --section MemoryWorkloadAnalysis --section Occupancy -o $L/attn_$rows -f \
    ./build/sparkdraft bench step --preset qwen3-8b --preset-dir /tmp --ctx 4096 --rows $rows --repeats 1 \
    > $L/ncu_$rows.log 2>&1
  echo "== rows $rows: ncu rc $?" >> $S
  ncu --import $L/attn_$rows.ncu-rep --print-details all > $L/details_$rows.log 2>&1
  grep -E "Duration|Throughput|Stall|Warp Cycles|Issued Warp|Registers|Block Size|Grid Size|Achieved|Theoretical Occupancy|Shared Memory Configuration Size|Dynamic Shared|Waves" $L/details_$rows.log | head -50 >> $S
  ncu --import $L/attn_$rows.ncu-rep --page source --print-source sass --csv > $L/source_$rows.csv 2>&1
  python3 - "$L/source_$rows.csv" >> $S <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1], errors="replace")))
hdr_i = next((i for i, r in enumerate(rows) if any("Warp Stall Sampling (All" in c for c in r)), None)
if hdr_i is None:
    print("no source table:", rows[:3]); sys.exit()
hdr = rows[hdr_i]; col = next(i for i, c in enumerate(hdr) if "Warp Stall Sampling (All" in c)
src = next((i for i, c in enumerate(hdr) if c.strip() in ("Source", "SASS")), 1)
data = [r for r in rows[hdr_i + 1:] if len(r) > col]
def val(r):
    try: return float(r[col])
    except: return 0.0
tot = sum(val(r) for r in data)
print("stall samples", tot)
for r in sorted(data, key=val, reverse=True)[:20]:
    print(f"{val(r):8.0f} {100*val(r)/max(tot,1):5.1f}%  {r[src][:100]}")
PY
done
cd $OUT && tar cJf logs.tar.xz logs && rm -rf logs
cat $S
