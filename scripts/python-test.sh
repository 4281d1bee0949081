#!/usr/bin/env bash
# The Python package as a user gets it: builds the binary wheel once (scripts/build-wheel.sh,
# whose build folder build/wheel-build is kept, so a later run recompiles only what changed),
# installs that wheel into a virtual environment and runs tests/python against the installed
# package, with no CUDA compiler on PATH (checked: `command -v nvcc` must fail there).
#
# The venv is made from Debian's /usr/bin/python3 with --system-site-packages, so Debian's
# python3-torch (1.13) and python3-numpy (scripts/install-deps.sh) are visible: the vLLM
# adapter tests run the seed builders live through the seed oracle with that torch
# ($LINMETA_ORACLE_DIR, default ../shared/oracle; without it they skip, saying so).
# Debian's pip refuses installs into the system interpreter; the venv is ours.
#
#   scripts/python-test.sh              wheel + install + pytest (+ a bench smoke run)
#   scripts/python-test.sh --build-only wheel + install, no tests
#   scripts/python-test.sh -k vllm      extra arguments go to pytest (no bench smoke run then)
#
# LINMETA_VENV overrides the venv folder (default build/venv); LINMETA_PYTHON the interpreter
# (of the venv and of the wheel). The tests see LINMETA_TEST_INSTALLED=1 and LINMETA_WHEEL (the
# wheel's path): tests/python/conftest.py then refuses a linmeta imported from anywhere but the
# venv's site-packages, and tests/python/test_version.py checks the wheel's name and tag.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

venv="${LINMETA_VENV:-build/venv}"
python="${LINMETA_PYTHON:-/usr/bin/python3}"
LINMETA_PYTHON="$python" scripts/build-wheel.sh build/dist
wheels=(build/dist/linmeta-*.whl)  # build-wheel.sh leaves the one it made
wheel=${wheels[0]}

if [[ ! -x "$venv/bin/python" ]]; then
  echo "python-test: creating $venv from $python (--system-site-packages)"
  "$python" -m venv --system-site-packages "$venv"
fi
py="$PWD/$venv/bin/python"
# numpy 1.25+ for bool DLPack, below 2 for Debian's torch 1.13 (built against numpy 1.x).
"$py" -m pip install -q --disable-pip-version-check pytest "numpy>=1.25,<2"
"$py" -m pip uninstall -q -y linmeta >/dev/null 2>&1 || true
"$py" -m pip install -q --disable-pip-version-check --no-deps "$wheel"

if [[ ${1:-} == --build-only ]]; then
  exit 0
fi

# The tests' environment: PATH without any folder that holds nvcc, no CUDA compiler variables.
test_path="$PWD/$venv/bin"
IFS=: read -r -a dirs <<<"$PATH"
for d in "${dirs[@]}"; do
  [[ -z $d || -e $d/nvcc ]] || test_path+=":$d"
done
installed() {
  env -u CUDACXX -u CUDA_HOME -u CUDA_PATH -u CUDA_ROOT PATH="$test_path" \
    LINMETA_TEST_INSTALLED=1 LINMETA_WHEEL="$PWD/$wheel" "$@"
}
if installed bash -c 'command -v nvcc'; then
  echo "python-test: nvcc is still on the tests' PATH" >&2
  exit 1
fi
echo "python-test: $(basename "$wheel") installed in $venv; tests run with no nvcc on PATH"

# PYTHONSAFEPATH: the working directory (the checkout) is not put on sys.path (Python 3.11+).
installed env PYTHONSAFEPATH=1 "$py" -m pytest tests/python -q "$@"
# A smoke run of the vLLM adapter bench (with the seed oracle it checks the outputs equal the
# seed's first; without it the seed column is left out).
if [[ $# -eq 0 ]]; then
  echo "python-test: bench/python/bench_vllm.py smoke run"
  installed "$py" bench/python/bench_vllm.py --iters 20 --repeats 1 --seed-iters 5 --groups 1,2 >/dev/null
fi
