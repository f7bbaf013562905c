#!/usr/bin/env bash
# Configures and builds sparkdraft (Ninja, Release; the CUDA backend when nvcc exists).
#   tools/build.sh [--dir DIR] [--cpu-only] [TARGET...]
#     --dir DIR    the build directory (default ./build)
#     --cpu-only   without the CUDA backend (-DSPARKDRAFT_CUDA=OFF), even where nvcc exists
#     TARGET...    only those targets (default: everything)
# Progress is Ninja's [done/total] line per object.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=build
cuda=ON
targets=()
while (($#)); do
  case $1 in
    --dir) dir=$2; shift 2 ;;
    --cpu-only) cuda=OFF; shift ;;
    *) targets+=(--target "$1"); shift ;;
  esac
done
bash tools/setup.sh
export PATH="/usr/local/cuda/bin:$PATH"
cmake -S . -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSPARKDRAFT_CUDA=$cuda >/dev/null
cmake --build "$dir" -j "$(nproc)" "${targets[@]}"
