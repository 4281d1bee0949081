#!/usr/bin/env bash
# Prepares the folder that takes SGLang 0.5.23's metadata path to a GPU machine that has no
# package index and no SGLang (docs/sglang.md, "GPU figures"); scripts/sglang-gpu-bench.sh
# unpacks it there. Needs pip and the package index here, not the SGLang venv.
#
#   scripts/sglang-carry.sh [DIR]      (default DIR: .sglang-carry at the repository root)
#
# DIR/sglang-0.5.23-pruned.tgz  SGLang's own files from its wheel (pure Python: the wheel is
#                               cp311-only because of five Rust extensions, none of which the
#                               backends import), less multimodal_gen/, srt/models/, test/,
#                               benchmark/ and the extensions;
# DIR/wheels/                   the Python 3.12 wheels of what SGLang's import chain needs and
#                               the GPU image lacks (found by running the harness in a Python
#                               3.12 + torch 2.11 venv holding only the image's packages);
#                               sgl_kernel (~370 MB) is not carried: tests/sglang/stubs stands
#                               in for it.
# Prints the folder's size (the lead's carry budget is ~30 MiB).
set -euo pipefail
cd "$(dirname "$0")/.."
SGLANG_VERSION=0.5.23
DIR=${1:-.sglang-carry}
WHEELS=(
  annotated-types==0.8.0 apache-tvm-ffi==0.1.11 compressed-tensors==0.18.0 dill==0.4.1
  distro==1.9.0 fastapi==0.165.0 gguf==0.19.0 ipython==9.19.1 loguru==0.7.3 msgspec==0.23.0
  openai==2.8.0 opentelemetry-api==1.45.3 orjson==3.13.0 partial-json-parser==0.2.1.1.post7
  pybase64==1.5.1 pydantic==2.14.4 pydantic-core==2.50.5 pyzmq==27.3.0 sniffio==1.3.1
  starlette==1.10.0 traitlets==5.16.1 typing-extensions==4.16.0 typing-inspection==0.4.5
  uvicorn==0.55.0
)
PLATFORMS=()
for p in manylinux_2_34_x86_64 manylinux_2_31_x86_64 manylinux_2_28_x86_64 manylinux_2_27_x86_64 manylinux_2_26_x86_64 \
  manylinux_2_24_x86_64 manylinux_2_17_x86_64 manylinux2014_x86_64 manylinux1_x86_64 any; do
  PLATFORMS+=(--platform "$p")
done
PIP=(python3 -m pip download -q --disable-pip-version-check --no-deps --only-binary=:all:
  --implementation cp)

WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
rm -rf "$DIR"
mkdir -p "$DIR/wheels"
echo "== sglang==$SGLANG_VERSION (its wheel, cp311; only the .py and data files are kept)"
"${PIP[@]}" --python-version 3.11 "${PLATFORMS[@]}" -d "$WORK" "sglang==$SGLANG_VERSION"
(cd "$WORK" && unzip -q sglang-"$SGLANG_VERSION"-*.whl 'sglang/*' &&
  find sglang -type f ! -name '*.so' ! -path '*/__pycache__/*' \
    ! -path 'sglang/multimodal_gen/*' ! -path 'sglang/srt/models/*' \
    ! -path 'sglang/test/*' ! -path 'sglang/benchmark/*' | LC_ALL=C sort > keep.txt)
tar czf "$DIR/sglang-$SGLANG_VERSION-pruned.tgz" -C "$WORK" -T "$WORK/keep.txt"
echo "   $(wc -l < "$WORK/keep.txt") files"
echo "== ${#WHEELS[@]} wheels for Python 3.12"
"${PIP[@]}" --python-version 3.12 "${PLATFORMS[@]}" -d "$DIR/wheels" "${WHEELS[@]}"
du -sh "$DIR"
