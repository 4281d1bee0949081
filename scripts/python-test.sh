#!/usr/bin/env bash
# Builds and installs the Python package into a virtual environment and runs its tests.
#
# The venv is made from Debian's /usr/bin/python3 with --system-site-packages, so Debian's
# python3-torch (1.13) and python3-numpy (scripts/install-deps.sh) are visible: the vLLM
# adapter tests run the seed builders live through the seed oracle with that torch
# ($LINMETA_ORACLE_DIR, default ../shared/oracle; without it they skip, saying so).
# Debian's pip refuses installs into the system interpreter; the venv is ours.
#
#   scripts/python-test.sh              build (reusing build/python) + install + pytest
#   scripts/python-test.sh --build-only build + install, no tests
#   scripts/python-test.sh -k vllm      extra arguments go to pytest (no bench smoke run then)
#
# LINMETA_VENV overrides the venv folder (default build/venv); LINMETA_PYTHON the interpreter.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

venv="${LINMETA_VENV:-build/venv}"
python="${LINMETA_PYTHON:-/usr/bin/python3}"
if [[ ! -x "$venv/bin/python" ]]; then
  echo "python-test: creating $venv from $python (--system-site-packages)"
  "$python" -m venv --system-site-packages "$venv"
fi
py="$venv/bin/python"
# numpy 1.25+ for bool DLPack, below 2 for Debian's torch 1.13 (built against numpy 1.x).
"$py" -m pip install -q --disable-pip-version-check nanobind scikit-build-core pytest \
  "numpy>=1.25,<2"
# --no-build-isolation + a fixed build dir: later runs recompile only what changed.
"$py" -m pip install -q --disable-pip-version-check --no-build-isolation \
  --config-settings=build-dir=build/python .

if [[ ${1:-} == --build-only ]]; then
  exit 0
fi

"$py" -m pytest tests/python -q "$@"
# A smoke run of the vLLM adapter bench (with the seed oracle it checks the outputs equal the
# seed's first; without it the seed column is left out).
if [[ $# -eq 0 ]]; then
  echo "python-test: bench/python/bench_vllm.py smoke run"
  "$py" bench/python/bench_vllm.py --iters 20 --repeats 1 --seed-iters 5 --groups 1,2 >/dev/null
fi
