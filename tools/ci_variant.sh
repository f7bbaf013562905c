#!/usr/bin/env bash
# One CI variant: configure a build directory with extra CMake arguments, build
# it, run its tests through CTest, and say how long each step took.
#   tools/ci_variant.sh NAME BUILD_DIR [CMAKE_ARG...]
set -euo pipefail
cd "$(dirname "$0")/.."
name=$1 dir=$2
shift 2
export PATH="/usr/local/cuda/bin:$PATH"
t0=$(date +%s)
echo "ci[$name]: configure $dir $*"
cmake -S . -B "$dir" -G Ninja "$@" >/dev/null
echo "ci[$name]: build"
cmake --build "$dir" -j "$(nproc)"
t1=$(date +%s)
echo "ci[$name]: test"
ctest --test-dir "$dir" --output-on-failure -j "$(nproc)"
t2=$(date +%s)
echo "ci[$name]: passed (build $((t1 - t0)) s, tests $((t2 - t1)) s)"
