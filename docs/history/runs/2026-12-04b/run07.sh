#!/usr/bin/env bash
# 2026-12-04b run 7: where the top-k loop's time goes (run 6's ncu filter also caught the dense
# loop's embedding kernels and ran out of launches before the top-k loop): ncu durations of the
# top-k kernels alone (bench markov --rows 1 / 32 --topk 16, the correctness run's launches;
# caches flushed, clocks not locked).
set -u
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft
S=$OUT/run07_summary.txt; : > $S
note() { echo "$*" | tee -a $S; }
for rows in 1 32; do
  timeout 200 ncu --clock-control none --kernel-name regex:topk --launch-count 11 \
    --metrics gpu__time_duration.sum ./build/sparkdraft bench markov --rows $rows --topk 16 --repeats 3 > $OUT/ncu_rows$rows.log 2>&1
  note "ncu rows $rows rc $?"
  grep -E "topk_[a-z_]+kernel|gpu__time_duration" $OUT/ncu_rows$rows.log | sed -E 's/.*(topk_[a-z_]+kernel).*/\1/; s/ +gpu__time_duration.sum +us +/ /' | paste -d' ' - - | tee -a $S
done
cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log
