#!/usr/bin/env bash
# clang-format over the C++/CUDA sources: `scripts/format.sh` rewrites them,
# `scripts/format.sh --check` lists unformatted files and fails.
set -euo pipefail
cd "$(dirname "$0")/.."
mapfile -t files < <(git ls-files '*.cpp' '*.hpp' '*.cu' '*.cuh')
if [[ ${1:-} == --check ]]; then
  bad=0
  for f in "${files[@]}"; do
    if ! clang-format --dry-run --Werror "$f" >/dev/null 2>&1; then
      echo "format: $f is not clang-formatted (run scripts/format.sh)"
      bad=1
    fi
  done
  exit $bad
fi
clang-format -i "${files[@]}"
