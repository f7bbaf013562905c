#!/usr/bin/env bash
# 2026-12-04c run 7: a qwen3-8b CPU propose on the H200 host's Xeon (AVX-512; the CPU backend now
# picks the AVX2 fp32 form there), one thread, against the fp32-loop build of before the twin
# (f4b4d45, the CPU-only binary the helper built from `git archive`): docs/mma-twin.md's method,
# one propose = (user(R = 3) - user(R = 1)) / 2 of `sparkdraft demo --requests 1 --rounds R
# --threads 1`, old and new alternating, three rounds.
set -u
mkdir -p build
tar xJf .carry/bin.tar.xz -C /tmp
cp /tmp/sd_cli build/sparkdraft && cp /tmp/sd_old build/sparkdraft_f4b4d45
S=$OUT/run07_summary.txt; : > $S
lscpu | grep "Model name" | tee -a $S
./build/sparkdraft make-checkpoint --preset qwen3-8b --out /tmp/q8 > $OUT/make.log 2>&1; echo "make rc $?" | tee -a $S
user() {  # user CPU seconds of one command
  python3 -c 'import resource,subprocess,sys; subprocess.run(sys.argv[1:],stdout=open("/dev/null","w"),stderr=subprocess.STDOUT); print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_utime)' "$@"
}
for round in 1 2 3; do
  for b in old new; do
    if [[ $b == old ]]; then cmd=(./build/sparkdraft_f4b4d45 demo); else cmd=(./build/sparkdraft demo --backend cpu); fi
    u1=$(user "${cmd[@]}" --checkpoint /tmp/q8 --requests 1 --rounds 1 --threads 1)
    u3=$(user "${cmd[@]}" --checkpoint /tmp/q8 --requests 1 --rounds 3 --threads 1)
    echo "round $round $b: user R1 $u1 s, R3 $u3 s, one propose $(python3 -c "print(round(($u3-$u1)/2,3))") s" | tee -a $S
  done
done
"${cmd[@]}" --checkpoint /tmp/q8 --requests 1 --rounds 1 --threads 1 2>&1 | grep -iE "draft|token" | head -3 | tee -a $S
./build/sparkdraft_f4b4d45 demo --checkpoint /tmp/q8 --requests 1 --rounds 1 --threads 1 2>&1 | grep -iE "draft|token" | head -3 | tee -a $S
