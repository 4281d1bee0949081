#!/usr/bin/env bash
# Object-to-object differential test of linmeta.vllm (the vllm-0.34 profile, which it chooses
# itself under vLLM 0.34) against vLLM 0.34.0's real GDN and KDA metadata builders, on CPU
# (docs/vllm.md). Not part of .ci/run: the venv is ~8.5 GB.
#
#   scripts/vllm-adapter-diff.sh [--steps N] [--seed S] [--zero-drafts P] [--record FILE]
#
# 1. needs the venv of scripts/vllm-diff.sh ($LINMETA_VLLM_VENV, default ../venv-vllm beside
#    the repository; run scripts/vllm-diff.sh once to create it);
# 2. builds and installs the linmeta package into it (build dir build/python-vllm: later runs
#    recompile only what changed);
# 3. runs tests/vllm/adapter_diff.py: ../shared/cases/vllm034_public.jsonl when present, then
#    N random steps per builder (default 2000; --seed default 1), every field of the returned
#    objects compared. Prints (and with --record writes) the summary; exit 1 on a difference.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
source scripts/env.sh

STEPS=2000 SEED=1 ZERO_DRAFTS=10 RECORD=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --zero-drafts) ZERO_DRAFTS=$2; shift 2 ;;
    --record) RECORD=$2; shift 2 ;;
    *) echo "usage: $0 [--steps N] [--seed S] [--zero-drafts P] [--record FILE]" >&2
      exit 2 ;;
  esac
done

VENV=${LINMETA_VLLM_VENV:-$(cd "$ROOT/.." && pwd)/venv-vllm}
PY="$VENV/bin/python"
if ! "$PY" -c "import vllm, sys; sys.exit(vllm.__version__ != '0.34.0')" 2>/dev/null; then
  echo "no vllm 0.34.0 in $VENV: run scripts/vllm-diff.sh once to create it" >&2
  exit 2
fi
echo "== install linmeta into $VENV"
"$PY" -m pip install -q --disable-pip-version-check nanobind scikit-build-core
"$PY" -m pip install -q --disable-pip-version-check --no-build-isolation --no-deps \
  --config-settings=build-dir=build/python-vllm .

export VLLM_TARGET_DEVICE=cpu CUDA_VISIBLE_DEVICES=""
QUIET='^W[0-9]{4}|deprecated|vllm._C|max_num_scheduled_tokens|Reset SSM'
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
status=0
"$PY" tests/vllm/adapter_diff.py --steps "$STEPS" --seed "$SEED" --zero-drafts "$ZERO_DRAFTS" \
  2> >(grep -Ev "$QUIET" >&2) | tee "$OUT" || status=$?

if [ -n "$RECORD" ]; then
  {
    echo "linmeta.vllm vs vLLM 0.34.0, object to object ($(date -u +%Y-%m-%d), linmeta $(git rev-parse --short HEAD))"
    echo "scripts/vllm-adapter-diff.sh --steps $STEPS --seed $SEED --zero-drafts $ZERO_DRAFTS"
    cat "$OUT"
  } > "$RECORD"
fi
exit $status
