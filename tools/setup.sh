#!/usr/bin/env bash
# Installs what sparkdraft builds with, from Debian's packages, when missing:
# CMake, Ninja, g++, GoogleTest, Google Benchmark, nlohmann-json, CLI11.
# The CUDA 13 toolkit is expected at /usr/local/cuda (the CUDA backend is
# skipped, and said so, when nvcc is absent).
set -euo pipefail
pkgs=(cmake ninja-build g++ libgtest-dev libbenchmark-dev nlohmann-json3-dev libcli11-dev clang-format)
missing=()
for p in "${pkgs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  SUDO=""
  [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
