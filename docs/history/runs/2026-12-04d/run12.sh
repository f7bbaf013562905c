#!/usr/bin/env bash
# 2026-12-04d run 12: the verifier's two forms on trained-profile target logits (bench verify
# --logits trained: bench markov's profile, a normal bulk around -2 and eight ids far above it):
# the lists form's shared-memory counting meets more equal patterns there than on uniform logits.
set -u
RUN=${RUN:-run12}
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft
S=$OUT/${RUN}_summary.txt; : > $S
for form in auto rows lists; do
  ./build/sparkdraft bench verify --logits trained --form $form --json $OUT/${RUN}_bench_verify_trained_$form.json > $OUT/bench_$form.log 2>&1
  echo "bench verify --logits trained --form $form: rc $?" >> $S; grep -A7 '^V ' $OUT/bench_$form.log >> $S
done
cd $OUT && tar cJf logs.tar.xz *.log && rm -f *.log
cat $S
