#!/usr/bin/env bash
# One CI variant: configure a build directory with extra CMake arguments, build
# it (everything, or only the targets after --), run its tests through CTest (all,
# or all but those whose names match --exclude REGEX), and say how long each step
# took.
#   tools/ci_variant.sh [--exclude REGEX] NAME BUILD_DIR [CMAKE_ARG...] [-- TARGET...]
set -euo pipefail
cd "$(dirname "$0")/.."
select=()
if [ "${1:-}" = "--exclude" ]; then
  select=(-E "$2")
  shift 2
fi
name=$1 dir=$2
shift 2
cmake_args=() targets=()
while (($#)) && [ "$1" != "--" ]; do cmake_args+=("$1"); shift; done
if (($#)); then
  shift
  for t in "$@"; do targets+=(--target "$t"); done
fi
export PATH="/usr/local/cuda/bin:$PATH"
t0=$(date +%s)
echo "ci[$name]: configure $dir ${cmake_args[*]}"
cmake -S . -B "$dir" -G Ninja "${cmake_args[@]}" >/dev/null
echo "ci[$name]: build ${targets[*]:-everything}"
cmake --build "$dir" -j "$(nproc)" "${targets[@]}"
t1=$(date +%s)
echo "ci[$name]: test ${select[*]:-(all)}"
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)" "${select[@]}"
t2=$(date +%s)
echo "ci[$name]: passed (build $((t1 - t0)) s, tests $((t2 - t1)) s)"
