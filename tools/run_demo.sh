#!/usr/bin/env bash
# Builds the sparkdraft tool (only what the demo needs: no tests) and runs the
# main job: `sparkdraft demo` (extra arguments are passed on).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ ! -x build/sparkdraft ]; then
  echo "run_demo: first build of the sparkdraft tool into ./build (library + CLI only, no tests;" \
       "with nvcc the CUDA backend too: a few minutes on $(nproc) cores). Progress [done/total]:"
else
  echo "run_demo: bringing ./build/sparkdraft up to date"
fi
bash tools/build.sh sparkdraft_cli
echo "run_demo: running ./build/sparkdraft demo $*"
./build/sparkdraft demo "$@"
