#!/usr/bin/env bash
# Builds sparkdraft and runs every test through CTest. GPU tests skip (and say
# so) on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"
