#!/usr/bin/env bash
# The Python package on a GPU machine whose python3 already holds torch (e.g. the H200 image):
# builds the extension with CMake into a build folder (no pip, no downloads), then runs the
# Python tests (CUDA ones included) and the vLLM adapter benches on CUDA tensors.
#
#   scripts/gpu-python.sh [BUILD_DIR]          (default: build/gpu-python)
#   scripts/gpu-python.sh --wheel WHEEL        the binary wheel instead (scripts/build-wheel.sh,
#                                              built elsewhere): installed with no index and no
#                                              build into a venv of that python3
#                                              (--system-site-packages: its torch and pytest),
#                                              the tests run against it (LINMETA_TEST_INSTALLED=1)
#
# CUDA_FORCE_PTX_JIT=1 in the environment runs it all on the JIT-compiled oldest PTX
# (docs/building.md).
#
# Needs nvcc, CMake, ninja, nanobind and pytest for that python3, and fmt's CMake package
# (-Dfmt_DIR through LINMETA_CMAKE_ARGS when it is not installed). The seed oracle for the
# adapter tests and the bench's seed column: LINMETA_ORACLE_DIR, default ../shared/oracle
# (without it those tests skip and the seed column is left out, each saying so).
# Output: OUT (default: a temporary folder) gets pytest.txt, vllm-bench-{1,2,3}.txt / .json
# (GDN / KDA against the seed builders, three runs: the docs quote their medians) and
# vllm-mamba-bench.txt / .json (the Mamba-family classes against the native builds; needs
# BENCH, a built linmeta-bench, default build/release/bench/linmeta-bench, for the steps).
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2
out=${OUT:-$(mktemp -d -t linmeta-gpu-python.XXXXXX)}
mkdir -p "$out"
python=$(command -v python3)
export PYTHONUNBUFFERED=1
[[ -z ${CUDA_FORCE_PTX_JIT:-} ]] || echo "== CUDA_FORCE_PTX_JIT=$CUDA_FORCE_PTX_JIT"

if [[ ${1:-} == --wheel ]]; then
  wheel=$(realpath "$2")
  venv=build/gpu-wheel-venv
  echo "== installing $(basename "$wheel") into $venv (no index, no build)"
  rm -rf "$venv"
  "$python" -m venv --system-site-packages "$venv" &&
    "$venv/bin/python" -m pip install -q --no-index --no-deps "$wheel" || exit 1
  python=$PWD/$venv/bin/python
  export LINMETA_TEST_INSTALLED=1 LINMETA_WHEEL=$wheel
else
  build=${1:-build/gpu-python}
  read -r -a extra <<<"${LINMETA_CMAKE_ARGS:-}"
  echo "== building the extension into $build (log: $out/py-build.log)"
  if ! { cmake -S . -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINMETA_BUILD_PYTHON=ON \
    -DLINMETA_BUILD_TESTS=OFF -DLINMETA_BUILD_TOOLS=OFF -DPython_EXECUTABLE="$python" \
    "${extra[@]}" && cmake --build "$build"; } >"$out/py-build.log" 2>&1; then
    tail -30 "$out/py-build.log"
    exit 1
  fi
  [[ $build == /* ]] || build=$PWD/$build
  export PYTHONPATH=$build/python${PYTHONPATH:+:$PYTHONPATH}
fi

echo "== pytest tests/python"
PYTHONSAFEPATH=1 "$python" -m pytest tests/python -q -p no:cacheprovider 2>&1 | tee "$out/pytest.txt" | tail -15
status=${PIPESTATUS[0]}

for run in 1 2 3; do
  echo "== bench/python/bench_vllm.py --device cuda (run $run of 3)"
  "$python" bench/python/bench_vllm.py --device cuda --iters "${LINMETA_BENCH_ITERS:-500}" --pin-cpu 2 \
    --json "$out/vllm-bench-$run.json" 2>&1 | tee "$out/vllm-bench-$run.txt" | tail -12
done

bench=${BENCH:-build/release/bench/linmeta-bench}
if [[ -x $bench ]]; then
  echo "== bench/python/bench_vllm_builders.py --device cuda (the Mamba family)"
  "$python" bench/python/bench_vllm_builders.py --device cuda --bench "$bench" --pin-cpu 2 \
    --json "$out/vllm-mamba-bench.json" 2>&1 | tee "$out/vllm-mamba-bench.txt" | tail -16
else
  echo "== no $bench: the Mamba-family adapter bench is skipped"
fi
exit "$status"
