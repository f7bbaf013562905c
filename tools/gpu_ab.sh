#!/usr/bin/env bash
# An A/B run on the GPU machine (the device tool): several builds carried as
# .carry/bin_<name>.tar.xz (stripped `sparkdraft`, and `sparkdraft_cuda_tests` for the build
# whose suite runs; CONTRIBUTING.md "Binaries carried to the GPU"), one machine session:
#
#   tools/gpu_ab.sh RUN --builds "E H" [--suite H] [--filter GTEST_FILTER]
#                       [--steps "E H E H"] [--step-args "--spec"] [--match S ...]
#                       [--peer "qwen3-8b muse"]
#
#   RUN          the run's name (run06): $OUT/RUN_summary.txt and $OUT/RUN_logs.tar.xz
#   --builds     the builds to unpack (into b_<name>/)
#   --suite B    build B's GPU test binary (--filter: its gtest filter; default all), then
#                `sparkdraft check` on tiny qwen3 and muse with build B
#   --steps      `sparkdraft bench step <step-args> --timeline` once per name, in this order
#                (alternate the builds: A B A B); a repeated name's files get .2, .3, ...
#                (step_A.2.json: a build name is letters and digits, so no repeat's name
#                is another build's)
#   --match      tools/step_kernels.py's strings for the timeline table (default: the 8
#                largest kernel families)
#   --peer       after the steps, the PyTorch peer (bench/peer/peer_step.py: eager, CUDA graph,
#                torch.compile + graph; ctx 4096, rows 1 8 32) of each preset named, in the
#                same session; its JSON as $OUT/RUN_peer_<preset>.json
#
# Writes every log under $OUT/logs (tarred at the end) and a short summary, printed last.
# Exits 2 on a bad command line; a failing stage is recorded in the summary, not fatal.
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
usage() {
  sed -n '2,25p' "$0" >&2
  exit 2
}
[[ $# -ge 1 ]] || usage
run="$1"
shift
builds="" suite="" filter="" steps="" step_args="--spec" peer=""
match=()
while [[ $# -gt 0 ]]; do
  # Every option but --match takes one non-empty value.
  [[ "$1" == --match || -n "${2-}" ]] || usage
  case "$1" in
    --builds) builds="$2" && shift 2 ;;
    --suite) suite="$2" && shift 2 ;;
    --filter) filter="$2" && shift 2 ;;
    --steps) steps="$2" && shift 2 ;;
    --peer) peer="$2" && shift 2 ;;
    --step-args) step_args="$2" && shift 2 ;;
    --match)
      shift
      while [[ $# -gt 0 && "$1" != --* ]]; do
        match+=("$1")
        shift
      done
      ;;
    *) usage ;;
  esac
done
[[ -n "$builds" ]] || usage
out="${OUT:?OUT must name the folder that comes back (the device tool sets it)}"
logs="$out/logs"
summary="$out/${run}_summary.txt"
mkdir -p "$logs"
: >"$summary"
note() { echo "$*" >>"$summary"; }
t0=$(date +%s)
since() { echo "$(($(date +%s) - t0))s"; }

for b in $builds $suite $steps; do
  [[ "$b" =~ ^[A-Za-z0-9]+$ ]] || {
    echo "gpu_ab.sh: build name '$b': letters and digits only" >&2
    exit 2
  }
done
for b in $builds; do
  [[ -f ".carry/bin_$b.tar.xz" ]] || {
    echo "gpu_ab.sh: .carry/bin_$b.tar.xz is not here (carry it)" >&2
    exit 2
  }
  mkdir -p "b_$b" && tar xJf ".carry/bin_$b.tar.xz" -C "b_$b"
done
{ nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,clocks.max.mem --format=csv,noheader; } \
  >>"$summary" 2>&1

if [[ -n "$suite" ]]; then
  timeout 300 "./b_$suite/sparkdraft_cuda_tests" ${filter:+--gtest_filter="$filter"} \
    >"$logs/tests.log" 2>&1
  rc=$?
  note "$suite gpu suite rc $rc $(grep -E '^\[  PASSED  \]' "$logs/tests.log" | tail -1)" \
    "$(grep -E '^\[  FAILED  \] [A-Za-z]' "$logs/tests.log" | sort -u | wc -l) failed; $(since)"
  grep -E '^\[  FAILED  \] [A-Za-z]' "$logs/tests.log" | sort -u | head >>"$summary"
  for style in qwen3 muse; do
    timeout 60 "./b_$suite/sparkdraft" check --style "$style" >"$logs/check_$style.log" 2>&1
    note "check tiny $style rc $? $(grep 'check:' "$logs/check_$style.log" | cut -c1-100)"
  done
fi

jsons=()
declare -A seen=()
for b in $steps; do
  seen[$b]=$((${seen[$b]:-0} + 1))
  tag="$b"
  [[ ${seen[$b]} -gt 1 ]] && tag="$b.${seen[$b]}"
  # shellcheck disable=SC2086  # step_args is a list of flags
  timeout 120 "./b_$b/sparkdraft" bench step $step_args --timeline --preset-dir /tmp \
    --json "$logs/step_$tag.json" >"$logs/step_$tag.log" 2>&1
  note "bench step $step_args $tag rc $? ($(since))"
  grep -A6 'memory clock' "$logs/step_$tag.log" | tail -6 | cut -c1-80 >>"$summary"
  [[ -s "$logs/step_$tag.json" ]] && jsons+=("$logs/step_$tag.json")
done
if [[ ${#jsons[@]} -gt 0 ]]; then
  if [[ ${#match[@]} -gt 0 ]]; then
    python3 tools/step_kernels.py "${jsons[@]}" --match "${match[@]}" >>"$summary" 2>&1
  else
    python3 tools/step_kernels.py "${jsons[@]}" --top 8 >>"$summary" 2>&1
  fi
fi
for p in $peer; do
  timeout 200 python3 bench/peer/peer_step.py --preset "$p" --preset-dir /tmp --ctx 4096 \
    --rows 1 8 32 --modes eager graph compile --json "$out/${run}_peer_$p.json" \
    >"$logs/peer_$p.log" 2>&1
  note "peer $p rc $? ($(since))"
  tail -5 "$logs/peer_$p.log" | grep -v wrote >>"$summary"
done
note "total $(since)"
(cd "$out" && tar cJf "${run}_logs.tar.xz" logs && rm -rf logs)
cat "$summary"
