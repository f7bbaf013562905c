#!/usr/bin/env bash
# 2026-12-04d run 5: the verifier after run 4 with its draw by whole warps (warp_race: ids of
# positive weight queued per warp, their noise drawn 32 at a time; skips with a margin so that
# an id skipped out of order loses strictly), the draw's bounds of runs 3-4 reverted, and
# programmatic dependent launch on the verify kernels after the first. Every GPU test but the
# big presets; check bit for bit on every tiny preset; then the verifier: bench verify in both
# forms (bf16), f32, T 0.7, block; ncu per kernel at 8 and 32 rows (lists form); sanitizers.
set -u
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
RUN=${RUN:-run05}
T=./build/sparkdraft_cuda_tests
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
timeout 300 $T --gtest_filter='-CudaDraft.Qwen3_8b*:CudaDraft.MuseCpu*:*Speed*' > $L/gpu_tests.log 2>&1
note "gpu tests rc $? $(grep -E '^\[  PASSED  \]' $L/gpu_tests.log | tail -1) $(grep -E '^\[  FAILED  \] [A-Za-z]' $L/gpu_tests.log | sort -u | wc -l) failed; $(( $(date +%s)-t0 ))s"
grep -E '^\[  FAILED  \] [A-Za-z]' $L/gpu_tests.log | sort -u | head -20 >> $S
grep -E "lists checked" $L/gpu_tests.log >> $S
for preset in tiny tiny-conf tiny-d2t tiny-topk tiny-topk-union tiny-gated tiny-rnn tiny-fillin; do
  for st in qwen3 muse; do
    rm -rf /tmp/ck && ./build/sparkdraft make-checkpoint --preset $preset --style $st --out /tmp/ck > /dev/null 2>&1
    ./build/sparkdraft check --checkpoint /tmp/ck > $L/check_${preset}_$st.log 2>&1
    note "check $preset $st rc $? $(grep 'check:' $L/check_${preset}_$st.log | cut -c1-100)"
  done
done
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
for tool in memcheck racecheck; do
  timeout 300 compute-sanitizer --tool $tool $T \
    --gtest_filter='CudaVerify.ListsFormCountsEveryPatternOfItsSlice:CudaVerify.GraphReplayEqualsEager:CudaVerify.EqualsCpuOnTheRareBranches:CudaVerify.EqualsCpuAtOneDraftToken' \
    > $L/verify_$tool.log 2>&1
  note "$tool: rc $?; $(grep -hE 'ERROR SUMMARY|RACECHECK SUMMARY' $L/verify_$tool.log | tr '\n' ' ')"
done
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
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf logs.tar.xz logs && rm -rf logs
cat $S
