#!/usr/bin/env bash
# Builds sparkdraft and runs the main job: `sparkdraft demo` (extra arguments are passed on).
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
./build/sparkdraft demo "$@"
