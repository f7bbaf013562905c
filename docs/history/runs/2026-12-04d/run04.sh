#!/usr/bin/env bash
# 2026-12-04d run 4: run 3 with the draw's bounds changed (run 3's draw was slower: the Philox-based
# bound drew most uniforms twice): p's fast upper bound against the 2^25 bound only, and q's fast lower
# bound at or above p's upper bound (the residual is 0) before the exact p and q.
# CudaVerify.*, bench verify in both forms (and f32, T 0.7, block), ncu per kernel at 8 and
# 32 rows in both forms.
set -u
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
RUN=${RUN:-run04}
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
  for form in rows lists; do
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
done
./build/sparkdraft bench verify --dtype f32 --vocab 151936 --json $OUT/${RUN}_bench_verify_f32.json > $L/bench_f32.log 2>&1
echo "bench verify f32 auto: rc $?" >> $S; grep -A4 '^V ' $L/bench_f32.log >> $S
./build/sparkdraft bench verify --temperature 0.7 --vocab 151936 > $L/bench_t07.log 2>&1
echo "bench verify bf16 T 0.7 auto: rc $?" >> $S; grep -A4 '^V ' $L/bench_t07.log >> $S
./build/sparkdraft bench verify --method block --vocab 151936 > $L/bench_block.log 2>&1
echo "bench verify bf16 block auto: rc $?" >> $S; grep -A4 '^V ' $L/bench_block.log >> $S
for tool in memcheck racecheck; do
  timeout 300 compute-sanitizer --tool $tool ./build/sparkdraft_cuda_tests \
    --gtest_filter='CudaVerify.ListsFormCountsEveryPatternOfItsSlice:CudaVerify.GraphReplayEqualsEager:CudaVerify.EqualsCpuOnTheRareBranches' \
    > $L/verify_$tool.log 2>&1
  echo "$tool: rc $?; $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $L/verify_$tool.log | tr '\n' ' ')" >> $S
done
cd $OUT && tar cJf logs.tar.xz logs && rm -rf logs
cat $S
