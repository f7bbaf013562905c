#!/usr/bin/env bash
# 2026-12-04d run 6: the verifier's final form of this series: run 5's warp-queued draw reverted
# (no faster: 108 us at 32 rows against the per-thread race's 97 in run 1), the lists form's
# draw at 256 threads (run 1: 97 us at 256 against 109 at 512), PDL kept. CudaVerify.*, bench
# verify (auto, rows, lists; bf16 V 151936 and 202048; f32; T 0.7; block), ncu per kernel at 8 and
# 32 rows (auto form).
set -u
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
RUN=${RUN:-run06}
T=./build/sparkdraft_cuda_tests
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
$T --gtest_filter='CudaVerify.*' > $L/verify_tests.log 2>&1
note "CudaVerify.*: rc $? $(grep -E '^\[  PASSED  \]' $L/verify_tests.log | tail -1)"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/verify_tests.log | sort -u >> $S
for form in auto rows lists; do
  ./build/sparkdraft bench verify --form $form --json $OUT/${RUN}_bench_verify_bf16_$form.json > $L/bench_$form.log 2>&1
  note "bench verify bf16 --form $form: rc $?"; grep -A7 '^V ' $L/bench_$form.log >> $S
done
./build/sparkdraft bench verify --dtype f32 --json $OUT/${RUN}_bench_verify_f32.json > $L/bench_f32.log 2>&1
note "bench verify f32 auto: rc $?"; grep -A7 '^V ' $L/bench_f32.log >> $S
./build/sparkdraft bench verify --temperature 0.7 --vocab 151936 > $L/bench_t07.log 2>&1
note "bench verify bf16 T 0.7 auto: rc $?"; grep -A4 '^V ' $L/bench_t07.log >> $S
./build/sparkdraft bench verify --method block --vocab 151936 > $L/bench_block.log 2>&1
note "bench verify bf16 block auto: rc $?"; grep -A4 '^V ' $L/bench_block.log >> $S
M=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,sm__throughput.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,sm__warps_active.avg.pct_of_peak_sustained_active,lts__t_sector_hit_rate.pct
for rows in 8 32; do
  timeout 200 ncu --kernel-name regex:'first_kernel|sums_kernel|draw_kernel' --launch-count 3 \
    --metrics $M --csv ./build/sparkdraft bench verify --vocab 151936 --rows $rows --repeats 2 \
    > $L/ncu_$rows.csv 2> $L/ncu_$rows.err
  note "ncu rows $rows (auto form): rc $?"
  python3 - $L/ncu_$rows.csv >> $S <<'PY'
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
cd $OUT && tar cJf logs.tar.xz logs && rm -rf logs
cat $S
