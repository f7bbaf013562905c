#!/usr/bin/env bash
# The PTX of one CUDA source of this project, compiled exactly as the build
# compiles it (the compile command ninja has for it in ./build), without line info:
#   tools/ptx_of.sh SRC OUT.ptx [ROOT]
# ROOT (default: this checkout) is another checkout of the project to compile SRC
# from instead, e.g. a `git worktree add /tmp/old HEAD~3` (same flags, its sources).
# Pair with tools/ptx_compare.py to show that a change leaves kernels unchanged.
set -euo pipefail
cd "$(dirname "$0")/.."
src="${1:?usage: tools/ptx_of.sh SRC OUT.ptx [ROOT]}"
out="${2:?usage: tools/ptx_of.sh SRC OUT.ptx [ROOT]}"
root="${3:-$PWD}"
here="$PWD"
[[ -d build ]] || { echo "tools/ptx_of.sh: no ./build (run tools/build.sh first)" >&2; exit 2; }
cmd=$(cd build && ninja -t commands | grep -F -- "-c $here/$src " | head -1)
[[ -n "$cmd" ]] || { echo "tools/ptx_of.sh: no compile command for $src in ./build" >&2; exit 2; }
cmd=${cmd//-lineinfo/}
cmd=$(sed -E "s# -o [^ ]+# -o $out#; s#-MD -MT [^ ]+ -MF [^ ]+##; s# -c # -ptx #" <<<"$cmd")
cmd=${cmd//$here\/src/$root/src}
cmd=${cmd//$here\/include/$root/include}
(cd build && eval "$cmd")
