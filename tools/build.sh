#!/usr/bin/env bash
# Configures and builds sparkdraft into ./build (Release, CUDA backend when nvcc exists).
#   tools/build.sh [TARGET...]   only those targets (default: everything)
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
export PATH="/usr/local/cuda/bin:$PATH"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
targets=()
for t in "$@"; do targets+=(--target "$t"); done
cmake --build build -j "$(nproc)" "${targets[@]}"
