#!/usr/bin/env bash
# The whole test suite (what CI runs via .ci/run): dependencies, release build (host and GPU
# tests; GPU tests skip without a device), host tests under ASan + UBSan, the fuzz target for
# 3 minutes, the concurrency tests under TSan, the replay tool over the case files, the example
# consumer projects, the Python package (its binary wheel installed without nvcc, tested) and
# the docs check.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/install-deps.sh

echo "== tools (docs/building.md states these as the tested minimums)"
echo "cmake $(cmake --version | head -1 | awk '{print $3}'), $(g++ --version | head -1)," \
  "nvcc $(nvcc --version | sed -n 's/.*release \([0-9.]*\).*/\1/p')"

echo "== clang-format"
scripts/format.sh --check

echo "== release build + tests"
cmake --preset release
cmake --build --preset release
ctest --preset release
echo "== CUDA code in the library (cuobjdump: every default architecture, docs/building.md)"
scripts/cuda-archs.sh build/release/liblinmeta.a

echo "== AddressSanitizer + UndefinedBehaviorSanitizer (host tests)"
cmake --preset asan
cmake --build --preset asan --target linmeta_tests linmeta-replay linmeta-sglang-replay linmeta-replay-test-hook \
  linmeta-bench linmeta_fatbin_check engine_loop
ctest --preset asan

echo "== fuzz target: ${LINMETA_CI_FUZZ_SECONDS:-180} s, fails on any finding (docs/fuzzing.md)"
scripts/fuzz.sh "${LINMETA_CI_FUZZ_SECONDS:-180}"

echo "== ThreadSanitizer (host concurrency tests)"
cmake --preset tsan
cmake --build --preset tsan
ctest --preset tsan

echo "== replay tool over the case files"
for f in tests/data/*.jsonl; do
  build/release/tools/linmeta-replay check "$f" --target host --jobs 2
done

echo "== example consumer projects (find_package, add_subdirectory, FetchContent)"
scripts/examples.sh build/release

# Before the docs check: README's install snippet reuses the wheel this stage builds.
echo "== Python package: the binary wheel, installed in a venv with no nvcc on PATH, its tests"
scripts/python-test.sh

echo "== docs check (every runnable snippet of README.md and docs/*.md)"
scripts/docs-check.sh
