#!/usr/bin/env bash
# Builds sparkdraft and runs every test through CTest. GPU tests skip (and say
# so) on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/build.sh
ctest --test-dir build --output-on-failure -j "$(nproc)"

# The Python package (python/, docs/python.md): `pip install .` into build-python/venv
# (tools/setup_python.sh; the CPU backend unless SPARKDRAFT_PYTHON_CUDA=1), then pytest
# (CUDA tests skip without a GPU and say so). SPARKDRAFT_SKIP_PYTHON=1 leaves it out.
if [[ ${SPARKDRAFT_SKIP_PYTHON:-0} != 1 ]]; then
  VPY=$(bash tools/setup_python.sh | tail -n 1)
  "$VPY" -m pytest -q -rs python/tests
fi
