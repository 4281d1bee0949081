#!/usr/bin/env bash
# Builds and runs the consumer projects of examples/ the way a user would, with no extra
# flags: the installed package (find_package; also builds examples/engine_loop; once more with
# Clang), the source tree through add_subdirectory, and FetchContent. Each runs a host-target
# step.
#
#   scripts/examples.sh [BUILD_DIR]   (default build/release: installed from there first)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
build=${1:-build/release}
work=build/examples
rm -rf "$work"
mkdir -p "$work"

cmake --install "$build" --prefix "$work/prefix" >/dev/null
run() {  # NAME SOURCE [cmake args...]
  local name=$1 src=$2
  shift 2
  echo "-- examples/$name"
  cmake -S "$src" -B "$work/$name" -G Ninja "$@" >"$work/$name.log" 2>&1 ||
    { cat "$work/$name.log"; return 1; }
  cmake --build "$work/$name" >>"$work/$name.log" 2>&1 || { cat "$work/$name.log"; return 1; }
  "$work/$name/host_step"
}
run find_package examples/find_package -DCMAKE_PREFIX_PATH="$PWD/$work/prefix"
"$work/find_package/engine_loop/engine_loop"
# The same consumer compiled by Clang (the minimum docs/building.md states) against the
# GCC-built library.
run find_package_clang examples/find_package -DCMAKE_PREFIX_PATH="$PWD/$work/prefix" \
  -DCMAKE_CXX_COMPILER=clang++
run add_subdirectory examples/add_subdirectory
run fetchcontent examples/fetchcontent
echo "examples: all passed"
