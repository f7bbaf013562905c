#!/usr/bin/env bash
# 2026-12-04d run 2: the lists form after run 1 (its first pass 4.5 ms at 32 rows: the pick cut
# 33 slices of 4608 ids): the pick now counts a CTA's fixed work, the histogram has no mask of
# nonzero words (the drain scans it 16 bytes a load) and nothing waits on its atomics.
# CudaVerify.*, bench verify in both forms, ncu per kernel at 8 and 32 rows, and the SASS lines
# with the most stall samples of the lists form's first kernel at 8 rows.
set -u
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
RUN=${RUN:-run02}
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
./build/sparkdraft_cuda_tests --gtest_filter='CudaVerify.*' > $L/verify_tests.log 2>&1
echo "CudaVerify.*: rc $? $(grep -E '^\[  PASSED  \]' $L/verify_tests.log | tail -1)" >> $S
grep -E '^\[  FAILED  \] [A-Za-z]|lists checked' $L/verify_tests.log | sort -u >> $S
for form in rows lists; do
  ./build/sparkdraft bench verify --form $form --json $OUT/${RUN}_bench_verify_bf16_$form.json > $L/bench_$form.log 2>&1
  echo "bench verify bf16 --form $form: rc $?" >> $S; grep -A7 '^V ' $L/bench_$form.log >> $S
  grep "slices of" $L/bench_$form.log | sed 's/^ *//' >> $S
done
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct
for rows in 8 32; do
  form=lists
  timeout 200 ncu --kernel-name regex:'first_kernel|sums_kernel|draw_kernel' --launch-count 3 \
    --metrics $M --csv ./build/sparkdraft bench verify --vocab 151936 --rows $rows --form $form --repeats 2 \
    > $L/ncu_${rows}_$form.csv 2> $L/ncu_${rows}_$form.err
  echo "ncu rows $rows form $form: rc $?" >> $S
  python3 - $L/ncu_${rows}_$form.csv >> $S <<'PY'
import csv, sys
rows = [r for r in csv.reader(open(sys.argv[1], errors="replace")) if len(r) > 10]
if not rows: print("  no ncu rows"); sys.exit()
h = rows[0]; ki = h.index("Kernel Name"); mi = h.index("Metric Name"); vi = h.index("Metric Value"); ii = h.index("ID")
out = {}
for r in rows[1:]:
    out.setdefault((r[ii], r[ki].split("(")[0].split("::")[-1]), {})[r[mi]] = r[vi]
for (i, k), m in sorted(out.items(), key=lambda x: int(x[0][0])):
    print(f"  {k:14s} us {float(m.get('gpu__time_duration.sum','0').replace(',',''))/1000:8.1f}  dram% {m.get('dram__throughput.avg.pct_of_peak_sustained_elapsed','?'):>6}  sm% {m.get('sm__throughput.avg.pct_of_peak_sustained_elapsed','?'):>6}  warp-inst {m.get('smsp__inst_executed.sum','?'):>12}  warps% {m.get('sm__warps_active.avg.pct_of_peak_sustained_active','?'):>6}  L2hit% {m.get('lts__t_sector_hit_rate.pct','?'):>6}")
PY
done
timeout 200 ncu --kernel-name regex:first_kernel --launch-count 1 \
  --section SpeedOfLight --section WarpStateStats --section SourceCounters --section LaunchStats \
  -o $L/first -f ./build/sparkdraft bench verify --vocab 151936 --rows 8 --form lists --repeats 2 > $L/ncu_src.log 2>&1
echo "ncu source: rc $?" >> $S
ncu --import $L/first.ncu-rep --print-details all > $L/details.log 2>&1
grep -E "Duration|Throughput|Stall|Warp Cycles|Issued|Registers|Block Size|Grid Size|Achieved|Shared Memory" $L/details.log | head -40 >> $S
ncu --import $L/first.ncu-rep --page source --print-source sass --csv > $L/source.csv 2>&1
python3 - "$L/source.csv" >> $S <<'PY'
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
for r in sorted(data, key=val, reverse=True)[:25]:
    print(f"{val(r):8.0f} {100*val(r)/max(tot,1):5.1f}%  {r[0][:8]} {r[src][:90]}")
PY
cd $OUT && tar cJf logs.tar.xz logs && rm -rf logs
cat $S
