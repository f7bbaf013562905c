#!/usr/bin/env bash
# 2026-12-04c run 3: the verifier's cheaper vocabulary passes (merge ccc74db: the sums pass
# branch-free into a 96-bit carry chain, no division at T 1, the draw's exact skips, the first
# pass on 32-bit keys), on the H200: tools/gpu_verify.sh's verify stage (CudaVerify.*: GPU == CPU
# bit for bit; bench verify bf16 and fp32, V 151936 and 202048, rows 1 8 32; memcheck and
# racecheck), then bench verify at T 0.7 (the division path).
set -u
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_tests build/sparkdraft_cuda_tests
S=$OUT/run03_summary.txt; : > $S
bash tools/gpu_verify.sh $OUT/v verify > /dev/null 2>&1
cat $OUT/v/summary.txt >> $S
./build/sparkdraft bench verify --temperature 0.7 --json $OUT/run03_bench_verify_bf16_t07.json > $OUT/v/bench_t07.log 2>&1
echo "bench verify bf16 T 0.7: rc $?" >> $S; grep -A7 '^V ' $OUT/v/bench_t07.log >> $S
cp $OUT/v/bench_verify_*.json $OUT/ 2>/dev/null
cd $OUT && tar cJf logs.tar.xz v && rm -rf v
cat $S
