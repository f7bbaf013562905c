#!/usr/bin/env bash
# The Python side of the test command: a venv at build-python/venv (reusing the system's
# packages where they are installed: --system-site-packages) with numpy, pytest, torch
# and transformers, then this package installed into it with `pip install .`
# (scikit-build-core + nanobind, fetched by pip's build isolation).
#
#   SPARKDRAFT_PYTHON_CUDA=1   build the CUDA backend too (needs nvcc; default: the CPU
#                              backend only, SPARKDRAFT_CUDA=OFF: a few minutes, not >10)
#   SPARKDRAFT_TORCH_INDEX     where torch comes from when it is missing (default: the CPU
#                              wheels, https://download.pytorch.org/whl/cpu; where that
#                              index cannot be reached, PyPI's torch, a few GB)
#   PYTHON                     the interpreter (default python3; needs venv: on Debian
#                              apt-get install python3-venv)
#   --deps-only                the venv and the packages the tests need, not this package
#                              (.ci/run fetches them while it compiles)
# Prints the venv's python on its last line.
set -euo pipefail
deps_only=0
if [[ ${1:-} == --deps-only ]]; then
  deps_only=1
elif (($#)); then
  echo "setup_python.sh: unknown argument '$1' (the only one: --deps-only)" >&2
  exit 2
fi
cd "$(dirname "$0")/.."
VENV=build-python/venv
PY=${PYTHON:-python3}
if [[ ! -x $VENV/bin/python ]]; then
  mkdir -p build-python
  if ! "$PY" -m venv --system-site-packages "$VENV"; then
    rm -rf "$VENV"
    echo "setup_python.sh: '$PY -m venv' failed (on Debian: apt-get install python3-venv)" >&2
    exit 2
  fi
fi
VPY=$VENV/bin/python
pip_install() { "$VPY" -m pip install --disable-pip-version-check -q "$@"; }
"$VPY" -c 'import numpy, pytest' 2>/dev/null || pip_install numpy pytest
if ! "$VPY" -c 'import torch' 2>/dev/null &&
  ! pip_install torch --index-url "${SPARKDRAFT_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}"; then
  # A machine that reaches PyPI but not the torch index: PyPI's torch (it pulls the CUDA
  # libraries, a few GB).
  echo "setup_python.sh: no torch from ${SPARKDRAFT_TORCH_INDEX:-https://download.pytorch.org/whl/cpu}; installing PyPI's torch" >&2
  pip_install torch
fi
"$VPY" -c 'import transformers' 2>/dev/null || pip_install transformers
if ((deps_only)); then
  echo "$VPY"
  exit 0
fi
CUDA=OFF
[[ ${SPARKDRAFT_PYTHON_CUDA:-0} == 1 ]] && CUDA=ON
args=()
if command -v ccache >/dev/null; then
  args+=(-Ccmake.define.CMAKE_CXX_COMPILER_LAUNCHER=ccache
         -Ccmake.define.CMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
SPARKDRAFT_CUDA=$CUDA pip_install "${args[@]}" .
echo "$VPY"
