#!/usr/bin/env bash
# Configures and builds sparkdraft into ./build (Release, CUDA backend when nvcc exists).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/setup.sh
export PATH="/usr/local/cuda/bin:$PATH"
cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build -j "$(nproc)"
