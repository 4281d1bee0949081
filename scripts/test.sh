#!/usr/bin/env bash
# The whole test suite on a fresh machine: dependencies, release build (host and
# GPU tests; GPU tests skip without a device), host tests under ASan + UBSan, the
# fuzz target for 3 minutes, the concurrency tests under TSan, the replay tool over
# the public cases, and the Python package tests.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/install-deps.sh

echo "== clang-format"
scripts/format.sh --check

echo "== release build + tests"
cmake --preset release
cmake --build --preset release
ctest --preset release

echo "== AddressSanitizer + UndefinedBehaviorSanitizer (host tests)"
cmake --preset asan
cmake --build --preset asan --target linmeta_tests linmeta-replay
ctest --preset asan

echo "== fuzz target: ${LINMETA_CI_FUZZ_SECONDS:-180} s, fails on any finding (docs/fuzzing.md)"
scripts/fuzz.sh "${LINMETA_CI_FUZZ_SECONDS:-180}"

echo "== ThreadSanitizer (host concurrency tests)"
cmake --preset tsan
cmake --build --preset tsan
ctest --preset tsan

echo "== replay tool over the public cases"
build/release/tools/linmeta-replay check tests/data/public.jsonl --target host

if [[ -f pyproject.toml && -d tests/python ]]; then
  echo "== Python package"
  scripts/python-test.sh
fi
