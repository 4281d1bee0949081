#!/usr/bin/env bash
# Creates (when absent) the venv that holds the real SGLang 0.5.23 wheel, for the SGLang
# harness (tests/sglang/, docs/sglang.md) and bench/python/bench_sglang.py. Not part of
# .ci/run: the venv is ~11 GB and the install takes ~7 minutes.
#
#   scripts/sglang-env.sh            create or check the venv, print its python
#   scripts/sglang-env.sh --check    only check: exit 1 when it is absent or another version
#
# The venv: $LINMETA_SGLANG_VENV, default ../venv-sglang beside the repository; made from
# python3.11 when there is one (SGLang 0.5.23's wheels resolve fully for it), else python3.
# sglang==0.5.23 is installed with all its dependencies from the package index (torch
# 2.14.1, triton, sglang-kernel, flashinfer-python, transformers), under `nice`.
# Other scripts call it for the interpreter: PY=$(scripts/sglang-env.sh).
set -euo pipefail
SGLANG_VERSION=0.5.23
_sglang_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SGLANG_VENV=${LINMETA_SGLANG_VENV:-$(cd "$_sglang_root/.." && pwd)/venv-sglang}
SGLANG_PY="$SGLANG_VENV/bin/python"

sglang_installed() {
  "$SGLANG_PY" - "$SGLANG_VERSION" 2>/dev/null <<'EOF'
import sys
from importlib.metadata import version
sys.exit(version("sglang") != sys.argv[1])
EOF
}

if [ "${1:-}" = --check ]; then
  if sglang_installed; then echo "$SGLANG_PY"; exit 0; fi
  echo "sglang-env: no sglang $SGLANG_VERSION in $SGLANG_VENV" >&2
  exit 1
fi

if ! sglang_installed; then
  base=python3
  if command -v python3.11 > /dev/null; then base=python3.11; fi
  echo "== installing sglang $SGLANG_VERSION into $SGLANG_VENV ($base; ~7 min, ~11 GB)" >&2
  nice -n 10 "$base" -m venv "$SGLANG_VENV"
  nice -n 10 "$SGLANG_VENV/bin/pip" install -q --disable-pip-version-check -U pip
  nice -n 10 "$SGLANG_VENV/bin/pip" install --disable-pip-version-check "sglang==$SGLANG_VERSION"
  sglang_installed
fi
echo "$SGLANG_PY"
