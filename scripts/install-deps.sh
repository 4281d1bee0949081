#!/usr/bin/env bash
# Installs the Debian packages linmeta's build and tests need. The CUDA 13 toolkit
# (nvcc, cudart, CCCL) is expected under /usr/local/cuda or on PATH: it is not in
# Debian's archive at that version.
set -euo pipefail

# clang + libclang-rt-dev (compiler-rt: libFuzzer, ASan, UBSan, TSan) for the fuzz and tsan presets;
# python3-torch / python3-numpy for the Python package tests and the seed oracle.
packages=(cmake ninja-build g++ libgtest-dev libfmt-dev nlohmann-json3-dev clang-format python3-pip
  python3-venv clang libclang-rt-dev python3-torch python3-numpy)
missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "install-deps: installing ${missing[*]}"
  sudo_cmd=()
  [[ $(id -u) -eq 0 ]] || sudo_cmd=(sudo)
  # Another apt or dpkg (unattended-upgrades, a second CI job) may hold the package manager's
  # locks: every apt-get call waits for them, up to LINMETA_APT_LOCK_TIMEOUT seconds (600).
  lock_timeout=${LINMETA_APT_LOCK_TIMEOUT:-600}
  apt_get=("${sudo_cmd[@]}" apt-get -o DPkg::Lock::Timeout="$lock_timeout")
  echo "install-deps: if another apt or dpkg is running, waiting up to ${lock_timeout} s for its lock"
  # DPkg::Lock::Timeout covers dpkg's locks; apt-get update also takes /var/lib/apt/lists/lock,
  # which older apt does not wait for: retry while that lock is taken.
  waited=0
  until update_log=$("${apt_get[@]}" update -qq 2>&1); do
    if [[ $update_log != *"Could not get lock"* ]] || ((waited >= lock_timeout)); then
      echo "$update_log" >&2
      echo "install-deps: apt-get update failed (after ${waited} s of waiting for a lock)" >&2
      exit 1
    fi
    sleep 5
    waited=$((waited + 5))
  done
  [[ -z $update_log ]] || echo "$update_log"
  if ! DEBIAN_FRONTEND=noninteractive "${apt_get[@]}" install -y -qq "${missing[@]}" >/dev/null; then
    echo "install-deps: apt-get install failed (did another apt or dpkg still hold its lock" \
      "after ${lock_timeout} s? run it again once that one has finished)" >&2
    exit 1
  fi
fi

if ! command -v nvcc >/dev/null 2>&1; then
  if [[ -x /usr/local/cuda/bin/nvcc ]]; then
    echo "install-deps: nvcc found at /usr/local/cuda/bin (add it to PATH)"
  else
    echo "install-deps: nvcc (CUDA toolkit 13.0 or newer) not found; install the CUDA toolkit" >&2
    exit 1
  fi
fi
