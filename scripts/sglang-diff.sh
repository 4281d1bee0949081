#!/usr/bin/env bash
# The differential of linmeta's SGLang kinds against SGLang 0.5.23's own backends
# (docs/sglang.md, "Exact against the wheel"): builds the Python extension for the SGLang
# venv's interpreter (scripts/sglang-env.sh), checks the plugin switch
# (tests/sglang/linmeta_plugin_check.py), then, per backend,
#   1. tests/sglang/linmeta_diff.py: the same random steps through SGLang's class and through
#      linmeta.sglang's replacement, every field of every object compared;
#   2. the wheel's cases of those steps (sglang_cases.py run) replayed natively by
#      linmeta-sglang-replay (host target, and cuda with --cuda).
# Not part of .ci/run: the venv is ~11 GB.
#
#   scripts/sglang-diff.sh [--steps N] [--seed S] [--backends "mamba2 gdn kda lightning short_conv"] [--cuda]
#
# --steps N   steps per mode (default 2000); the modes are sglang_steps.py's
# --cuda      also replay the cases on the cuda target (needs a GPU)
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
source scripts/env.sh

STEPS=2000 SEED=1 BACKENDS="mamba2 gdn kda lightning short_conv" CUDA=0
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --backends) BACKENDS=$2; shift 2 ;;
    --cuda) CUDA=1; shift ;;
    *) echo "usage: $0 [--steps N] [--seed S] [--backends LIST] [--cuda]" >&2; exit 2 ;;
  esac
done

PY=$(scripts/sglang-env.sh)
if ! "$PY" -c "import nanobind" 2> /dev/null; then
  nice -n 10 "$PY" -m pip install -q --disable-pip-version-check "nanobind>=2.9"
fi
BUILD=build/sglang-py
echo "== building linmeta for $("$PY" -c 'import sys; print(sys.version.split()[0])') in $BUILD"
cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINMETA_BUILD_PYTHON=ON \
  -DPython_EXECUTABLE="$PY" -DLINMETA_BUILD_TESTS=OFF \
  -DCMAKE_CUDA_ARCHITECTURES="${LINMETA_CUDA_ARCHITECTURES:-90}" > /dev/null
nice cmake --build "$BUILD" --target _linmeta linmeta-sglang-replay
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
status=0
cd tests/sglang
echo "== the plugin switch (linmeta_plugin_check.py)"
if ! PYTHONPATH="$ROOT/$BUILD/python" nice -n 10 "$PY" linmeta_plugin_check.py; then status=1; fi
for backend in $BACKENDS; do
  nmodes=$(python3 -c "import sglang_steps as s; print(len(s.BACKEND_MODES['$backend']))")
  count=$((STEPS * nmodes))
  echo "== $backend: linmeta.sglang against SGLang's class, $count steps"
  if ! PYTHONPATH="$ROOT/$BUILD/python" nice -n 10 "$PY" linmeta_diff.py --backend "$backend" \
      --count "$count" --seed "$SEED"; then status=1; fi
  echo "== $backend: the wheel's cases replayed natively"
  nice -n 10 "$PY" sglang_cases.py run --backend "$backend" --count "$count" --seed "$SEED" \
    "$WORK/$backend.jsonl"
  if ! "$ROOT/$BUILD/tools/linmeta-sglang-replay" check "$WORK/$backend.jsonl" --quiet; then
    status=1
  fi
  if [ "$CUDA" = 1 ] && ! "$ROOT/$BUILD/tools/linmeta-sglang-replay" check \
      "$WORK/$backend.jsonl" --quiet --target cuda; then status=1; fi
done
exit $status
