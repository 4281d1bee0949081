#!/usr/bin/env bash
# SGLang 0.5.23's own metadata path and linmeta.sglang's on the same steps, in one run, on
# CUDA tensors and then on CPU tensors of the same machine (bench/python/bench_sglang.py;
# docs/sglang.md, "GPU figures"). For a GPU machine without SGLang and without a package
# index: the folder made by scripts/sglang-carry.sh brings SGLang's files and the wheels
# its import chain needs; tests/sglang/stubs stands in for sgl_kernel.
#
#   scripts/sglang-gpu-bench.sh [CARRY_DIR] [bench_sglang.py options...]
#
# After each device's bench, tests/sglang/linmeta_diff.py checks linmeta.sglang against
# SGLang's class on the same random steps on that device's tensors (every field compared).
#
# CARRY_DIR: default .sglang-carry. Environment: OUT (where the JSON and logs go; default
# build/gpu-sgl/out), LINMETA_SGLANG_BUILD (the build folder, default build/gpu-sgl),
# LINMETA_SGLANG_WHEEL (a linmeta wheel built elsewhere for this Python: installed instead of
# building the extension here), DEVICES (default "cuda cpu"), ITERS (default 30), DIFF_COUNT
# (linmeta_diff.py steps per backend and device, default 900: 100 per mode; 0: none),
# DIFF_BACKENDS (default "mamba2 gdn kda lightning short_conv"). Python: python3 (3.12 with torch there).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
CARRY=.sglang-carry
if [ $# -gt 0 ] && [ "${1#-}" = "$1" ]; then CARRY=$1; shift; fi
BUILD=${LINMETA_SGLANG_BUILD:-build/gpu-sgl}
DEST=${OUT:-$BUILD/out}
SITE=/tmp/linmeta-sglang-site
PY=$(command -v python3)
mkdir -p "$DEST"

echo "== unpacking $CARRY into $SITE"
rm -rf "$SITE"
mkdir -p "$SITE"
tar xzf "$CARRY"/sglang-*-pruned.tgz -C "$SITE"
"$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile \
  --no-cache-dir --target "$SITE" "$CARRY"/wheels/*.whl

if [ -n "${LINMETA_SGLANG_WHEEL:-}" ]; then
  echo "== installing $LINMETA_SGLANG_WHEEL into $SITE"
  "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --no-compile \
    --no-cache-dir --target "$SITE" "$LINMETA_SGLANG_WHEEL"
  LINMETA_PATH=
else
  echo "== building linmeta's Python extension in $BUILD"
  cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=Release -DLINMETA_BUILD_PYTHON=ON \
    -DLINMETA_BUILD_TESTS=OFF -DLINMETA_BUILD_TOOLS=OFF -DPython_EXECUTABLE="$PY" \
    -DCMAKE_CUDA_ARCHITECTURES="${LINMETA_CUDA_ARCHITECTURES:-90}" > "$DEST/cmake.log"
  cmake --build "$BUILD" --target _linmeta >> "$DEST/cmake.log"
  LINMETA_PATH=":$ROOT/$BUILD/python"
fi

export PYTHONPATH="$SITE:$ROOT/tests/sglang/stubs$LINMETA_PATH"
export PYTHONUNBUFFERED=1
"$PY" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
      "cuda", torch.cuda.is_available() and torch.cuda.get_device_name())'
status=0
for device in ${DEVICES:-cuda cpu}; do
  echo "== bench_sglang.py --device $device"
  if ! "$PY" bench/python/bench_sglang.py --device "$device" --iters "${ITERS:-30}" \
      --json "$DEST/sglang-$device.json" "$@" 2>&1 | tee "$DEST/sglang-$device.log"; then
    status=1
  fi
  count=${DIFF_COUNT:-900}
  [ "$count" -gt 0 ] || continue
  for backend in ${DIFF_BACKENDS:-mamba2 gdn kda lightning short_conv}; do
    echo "== linmeta_diff.py on $device tensors: $count $backend steps"
    if ! LINMETA_SGLANG_DEVICE=$device "$PY" tests/sglang/linmeta_diff.py --backend "$backend" \
        --count "$count" --seed 1 2>&1 | tee "$DEST/diff-$backend-$device.log"; then
      status=1
    fi
  done
done
exit $status
