#!/usr/bin/env bash
# Builds and runs linmeta-bench (GPU figures need a CUDA device; without one the
# host target runs alone). Extra arguments go to the bench, e.g. --filter spec-k3.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
scripts/install-deps.sh >&2
cmake --preset release >&2
cmake --build --preset release --target linmeta-bench >&2
exec build/release/bench/linmeta-bench "$@"
