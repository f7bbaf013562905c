#!/usr/bin/env bash
# Builds the Python package sparkdraft (the nanobind module and the libraries it links
# statically) into a directory to put on PYTHONPATH, without pip:
#
#   tools/build_python.sh [--python PY] [--cuda | --cpu] [--out DIR]
#
#   --python PY   the interpreter to build for (default python3). Python 3.12 and newer
#                 get nanobind's stable ABI (abi3: one module for 3.12+).
#   --cuda/--cpu  the CUDA backend (needs nvcc; sm_90a unless SPARKDRAFT_CUDA_ARCH is set)
#                 or the CPU backend only (default: --cpu).
#   --out DIR     default build-python/pkg-<cpu|cuda>-py<XY>; DIR/sparkdraft is the package.
#
# nanobind's CMake files come from PY's nanobind, else from python3's (the sources are
# the same for every interpreter). ccache is used when installed. Then, e.g.:
#   PYTHONPATH=DIR PY -m pytest python/tests
set -euo pipefail
cd "$(dirname "$0")/.."
PY=python3
VARIANT=cpu
OUT=""
while [[ $# -gt 0 ]]; do
  case "$1" in
    --python) PY="$2"; shift 2 ;;
    --cuda) VARIANT=cuda; shift ;;
    --cpu) VARIANT=cpu; shift ;;
    --out) OUT="$2"; shift 2 ;;
    -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
    *) echo "build_python.sh: unknown option '$1' (see --help)" >&2; exit 2 ;;
  esac
done
PYVER=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}{sys.version_info[1]}")')
OUT=${OUT:-build-python/pkg-$VARIANT-py$PYVER}
# One level below the source (as build/ and build-cpu/): ccache (base_dir) then shares
# the libraries' objects with those builds.
BUILD=build-py-$VARIANT-py$PYVER
NB_DIR=$("$PY" -m nanobind --cmake_dir 2>/dev/null || python3 -m nanobind --cmake_dir)
CUDA_FLAG=OFF
if [[ $VARIANT == cuda ]]; then
  CUDA_FLAG=ON
  export PATH=/usr/local/cuda/bin:$PATH
  command -v nvcc >/dev/null || { echo "build_python.sh: --cuda needs nvcc" >&2; exit 2; }
fi
LAUNCH=()
if command -v ccache >/dev/null; then
  LAUNCH=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
mkdir -p "$OUT/sparkdraft"
OUT_ABS=$(cd "$OUT" && pwd)
cmake -S . -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release "${LAUNCH[@]}" \
  -DSPARKDRAFT_PYTHON=ON -DSPARKDRAFT_CLI=OFF -DSPARKDRAFT_TESTS=OFF -DSPARKDRAFT_EXAMPLES=OFF \
  -DSPARKDRAFT_BENCH=OFF -DSPARKDRAFT_INSTALL=OFF -DSPARKDRAFT_CUDA=$CUDA_FLAG \
  -DPython_EXECUTABLE="$(command -v "$PY")" -Dnanobind_DIR="$NB_DIR" \
  -DSPARKDRAFT_PYTHON_OUT="$OUT_ABS"
if [[ $VARIANT == cuda ]] && ! compgen -G "$BUILD/CMakeFiles/*/CMakeCUDACompiler.cmake" >/dev/null; then
  echo "build_python.sh: CMake found no CUDA compiler" >&2; exit 2
fi
cmake --build "$BUILD" --target _core -j "${JOBS:-$(nproc)}"
cp python/sparkdraft/*.py "$OUT/sparkdraft/"
echo "built $OUT/sparkdraft ($VARIANT, Python $PYVER): PYTHONPATH=$OUT"
