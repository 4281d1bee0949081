#!/usr/bin/env bash
# Installs the Debian packages linmeta's build and tests need. The CUDA 13 toolkit
# (nvcc, cudart, CCCL) is expected under /usr/local/cuda or on PATH: it is not in
# Debian's archive at that version.
set -euo pipefail

# clang + libclang-rt-dev (compiler-rt: libFuzzer, ASan, UBSan, TSan) for the fuzz and tsan presets;
# python3-torch / python3-numpy for the Python package tests and the seed oracle; libtorch-dev and
# pybind11-dev (torch's C++ headers) for the package's torch reader (linmeta._torch_reader).
packages=(cmake ninja-build g++ libgtest-dev libfmt-dev nlohmann-json3-dev clang-format python3-pip
  python3-venv clang libclang-rt-dev python3-torch python3-numpy libtorch-dev pybind11-dev)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  "${sudo_cmd[@]}" apt-get update -qq
  DEBIAN_FRONTEND=noninteractive "${sudo_cmd[@]}" apt-get install -y -qq "${missing[@]}" >/dev/null
fi

if ! command -v nvcc >/dev/null 2>&1; then
  if [[ -x /usr/local/cuda/bin/nvcc ]]; then
    echo "install-deps: nvcc found at /usr/local/cuda/bin (add it to PATH)"
  else
    echo "install-deps: nvcc (CUDA toolkit 13.0 or newer) not found; install the CUDA toolkit" >&2
    exit 1
  fi
fi
