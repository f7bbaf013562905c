#!/usr/bin/env bash
# clang-format over the tracked C++/CUDA sources (.clang-format at the root).
#   tools/format.sh --check   list the files whose format differs; exit 1 if any
#   tools/format.sh --apply   rewrite them in place
# CLANG_FORMAT picks the binary (default: clang-format-14, else clang-format).
set -euo pipefail
cd "$(dirname "$0")/.."

mode="${1:-}"
if [[ "$mode" != "--check" && "$mode" != "--apply" ]]; then
  echo "usage: tools/format.sh --check | --apply" >&2
  exit 2
fi

cf="${CLANG_FORMAT:-}"
if [[ -z "$cf" ]]; then
  if command -v clang-format-14 >/dev/null; then cf=clang-format-14; else cf=clang-format; fi
fi
command -v "$cf" >/dev/null || { echo "tools/format.sh: $cf not found" >&2; exit 2; }

mapfile -t files < <(git ls-files -- '*.h' '*.hpp' '*.cpp' '*.cc' '*.cu' '*.cuh')
if [[ "$mode" == "--apply" ]]; then
  "$cf" -i --style=file "${files[@]}"
  echo "formatted ${#files[@]} files"
  exit 0
fi

bad=0
for f in "${files[@]}"; do
  if ! "$cf" --style=file --dry-run --Werror "$f" >/dev/null 2>&1; then
    echo "needs format: $f"
    bad=$((bad + 1))
  fi
done
if ((bad)); then
  echo "$bad of ${#files[@]} files need format (tools/format.sh --apply)" >&2
  exit 1
fi
echo "all ${#files[@]} files formatted"
