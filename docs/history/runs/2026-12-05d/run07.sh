#!/usr/bin/env bash
# 2026-12-05d run 7. new7 = main at ed93456. The resident verifier's stall profile at one
# request (now the automatic pick there): ncu with source, V 151936, bf16, N 7, one launch.
set -u
RUN=${RUN:-run07}
mkdir -p b_new7 && tar xJf .carry/bin_new7.tar.xz -C b_new7
[ -e /tmp/res ] || ln -s "$PWD" /tmp/res
S=$OUT/${RUN}_summary.txt; : > $S
L=$OUT/logs; mkdir -p $L
note() { echo "$*" >> $S; }
t0=$(date +%s)
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader >> $S
NCU="ncu --set full --import-source yes --cache-control all --clock-control none"
timeout 100 $NCU -k regex:resident -c 1 -o $OUT/ncu_resident_r1 ./b_new7/sparkdraft bench verify \
  --vocab 151936 --rows 1 --repeats 1 > $L/ncu_resident_r1.log 2>&1
note "ncu resident rows 1 rc $? ($(( $(date +%s)-t0 ))s)"
f=$OUT/ncu_resident_r1.ncu-rep
if [ -e $f ]; then
  timeout 30 ncu -i $f --page details --csv > $L/ncu_resident_r1_details.csv 2>&1
  timeout 60 ncu -i $f --page source --csv --print-source sass > $L/ncu_resident_r1_source_sass.csv 2>&1
  note "$(grep -E '"Duration"' $L/ncu_resident_r1_details.csv | awk -F'","' '{print $5 ":" $(NF)}' | tr -d '"' | cut -c1-200)"
fi
note "total $(( $(date +%s)-t0 ))s"
cd $OUT && tar cJf ${RUN}_logs.tar.xz logs && rm -rf logs ncu_*.ncu-rep
cat $S
