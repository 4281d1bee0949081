#!/usr/bin/env bash
# Lists the CUDA code in built files with cuobjdump (--list-elf: machine code, --list-ptx: PTX)
# and fails unless each file holds every code of the architecture list. Needs no GPU.
#
#   scripts/cuda-archs.sh FILE...      (a static library, a shared object, or a wheel: its
#                                       linmeta/_linmeta*.so is checked)
#
# The list: LINMETA_CUDA_ARCHITECTURES, else CUDAARCHS, else linmeta's default
# (cmake/LinmetaCudaArchitectures.cmake), in CMake's form ("80-real;90" = sm_80 + sm_90 +
# compute_90). cuobjdump: CUOBJDUMP, else PATH, else /usr/local/cuda/bin, else the PyPI package
# nvidia-cuda-cuobjdump installed into a venv of its own (build/cuobjdump-venv).
set -euo pipefail
cd "$(dirname "$0")/.."
(($#)) || { echo "usage: scripts/cuda-archs.sh FILE..." >&2; exit 2; }

archs=${LINMETA_CUDA_ARCHITECTURES:-${CUDAARCHS:-}}
if [[ -z $archs ]]; then
  archs=$(sed -n '/^set(LINMETA_DEFAULT_CUDA_ARCHITECTURES/,/)/p' cmake/LinmetaCudaArchitectures.cmake |
    sed 's/set(LINMETA_DEFAULT_CUDA_ARCHITECTURES//; s/)//' | tr -s ' \n' ';')
fi
want=()
IFS=';' read -r -a list <<<"$archs"
for a in "${list[@]}"; do
  [[ $a =~ ^([0-9]+)a?(-real|-virtual)?$ ]] || continue
  [[ ${BASH_REMATCH[2]} == -virtual ]] || want+=("sm_${BASH_REMATCH[1]}")
  [[ ${BASH_REMATCH[2]} == -real ]] || want+=("compute_${BASH_REMATCH[1]}")
done

cuobjdump=${CUOBJDUMP:-$(command -v cuobjdump || true)}
[[ -n $cuobjdump || ! -x /usr/local/cuda/bin/cuobjdump ]] || cuobjdump=/usr/local/cuda/bin/cuobjdump
if [[ -z $cuobjdump ]]; then
  venv=build/cuobjdump-venv
  [[ -x $venv/bin/python ]] || /usr/bin/python3 -m venv "$venv"
  "$venv/bin/python" -m pip install -q --disable-pip-version-check "nvidia-cuda-cuobjdump>=13,<14"
  cuobjdump=$(ls "$venv"/lib/python3*/site-packages/nvidia/cu*/bin/cuobjdump | head -1)
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failed=0
for f in "$@"; do
  target=$f
  if [[ $f == *.whl ]]; then
    python3 -m zipfile -e "$f" "$tmp/$(basename "$f")"
    target=$(ls "$tmp/$(basename "$f")"/linmeta/_linmeta*.so)
  fi
  # "ELF file 1: x.1.sm_90.cubin" -> sm_90; "PTX file 1: x.1.sm_80.ptx" -> compute_80
  elf=$("$cuobjdump" --list-elf "$target" | sed -n 's/^ELF file .*\.\(sm_[0-9a-z]*\)\.cubin$/\1/p' | sort -u -V)
  ptx=$("$cuobjdump" --list-ptx "$target" | sed -n 's/^PTX file .*\.sm_\([0-9a-z]*\)\.ptx$/compute_\1/p' | sort -u -V)
  echo "$f: machine code: $(echo $elf); PTX: $(echo $ptx)"
  for w in "${want[@]}"; do
    if ! grep -qx "$w" <<<"$elf"$'\n'"$ptx"; then
      echo "MISSING $w in $f" >&2
      failed=1
    fi
  done
done
((failed == 0)) || exit 1
echo "cuda-archs: every file holds ${want[*]}"
