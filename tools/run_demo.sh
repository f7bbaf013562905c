#!/usr/bin/env bash
# Builds the sparkdraft tool (only what the demo needs: no tests) and runs the
# main job: `sparkdraft demo` (extra arguments are passed on).
#
# Without a GPU (nvidia-smi lists none) the demo runs on the CPU backend, so the
# tool is built without the CUDA backend into ./build-cpu: about a minute and a
# half on 2 cores. With a GPU, or with SPARKDRAFT_DEMO_CUDA=1, it is built with
# the CUDA backend into ./build (the CUDA objects take several minutes more).
set -euo pipefail
cd "$(dirname "$0")/.."

gpu="" why_not="nvidia-smi is not installed"
if command -v nvidia-smi >/dev/null 2>&1; then
  gpu=$(nvidia-smi -L 2>/dev/null | grep -m1 '^GPU' || true)
  why_not="nvidia-smi lists none"
fi
if [ "${SPARKDRAFT_DEMO_CUDA:-0}" = 1 ] || [ -n "$gpu" ]; then
  dir=build
  why=${gpu:+"GPU found (${gpu%% (*})"}
  why=${why:-"SPARKDRAFT_DEMO_CUDA=1"}
  echo "run_demo: $why: building the tool with the CUDA backend into ./$dir"
  echo "run_demo: (a first CUDA build takes several minutes on $(nproc) cores)"
  bash tools/build.sh sparkdraft_cli
else
  dir=build-cpu
  echo "run_demo: no GPU found ($why_not): building the tool without the CUDA backend"
  echo "run_demo: into ./$dir (CPU backend; SPARKDRAFT_DEMO_CUDA=1 builds the CUDA backend into ./build)"
  bash tools/build.sh --dir "$dir" --cpu-only sparkdraft_cli
fi
echo "run_demo: running ./$dir/sparkdraft demo $*"
"./$dir/sparkdraft" demo "$@"
