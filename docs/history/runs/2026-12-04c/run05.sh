#!/usr/bin/env bash
# 2026-12-04c run 5: why the top-k step kernel takes 30 us a step whatever the row count (run 7 of
# 2026-12-04b): ncu's speed of light, warp states and the SASS lines with the most stall samples of
# one markov_topk_step_kernel (bench markov --rows 1 --topk 16, V 151936, rank 256).
set -u
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft
S=$OUT/run05_summary.txt; : > $S
timeout 240 ncu --kernel-name regex:topk_step --launch-count 1 --launch-skip 2 \
  --section SpeedOfLight --section WarpStateStats --section SourceCounters --section LaunchStats \
  --section MemoryWorkloadAnalysis -o $OUT/topk_step -f \
  ./build/sparkdraft bench markov --rows 1 --topk 16 --repeats 3 > $OUT/ncu.log 2>&1
echo "ncu rc $?" >> $S
ncu --import $OUT/topk_step.ncu-rep --print-details all > $OUT/details.log 2>&1
grep -E "Duration|Elapsed Cycles|Throughput|Stall|Warp Cycles|Issued|Registers|Block Size|Grid Size|Achieved|L1|L2|DRAM" $OUT/details.log | head -60 >> $S
ncu --import $OUT/topk_step.ncu-rep --page source --print-source sass --csv > $OUT/source.csv 2>&1
python3 - "$OUT/source.csv" >> $S <<'PY'
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
for r in sorted(data, key=val, reverse=True)[:30]:
    print(f"{val(r):8.0f} {100*val(r)/max(tot,1):5.1f}%  {r[0][:8]} {r[src][:90]}")
PY
cd $OUT && tar cJf logs.tar.xz *.log *.csv && rm -f *.log *.csv
cat $S
