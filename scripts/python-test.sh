#!/usr/bin/env bash
# Builds and installs the Python package (pip install .), then runs its tests.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
python3 -m pip install -q --upgrade pip >/dev/null 2>&1 || true
python3 -m pip install -q nanobind scikit-build-core pytest numpy
python3 -m pip install -q .
python3 -m pytest tests/python -q
