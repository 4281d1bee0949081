#!/usr/bin/env bash
# Object-to-object differential test of linmeta.vllm (the vllm-0.34 profile, which it chooses
# itself under vLLM 0.34) against vLLM 0.34.0's real metadata builders, on CPU (docs/vllm.md):
# GDN, KDA, the Mamba family (Mamba2, Mamba1, ShortConv, PLE ShortConv, linear attention,
# Bailing; ReplaySSM's Triton path) and Inkling's short-conv builder. Not part of
# .ci/run: the venv is ~8.5 GB.
#
#   scripts/vllm-adapter-diff.sh [--builders LIST] [--steps N] [--seed S] [--zero-drafts P]
#                                [--dump FILE] [--record FILE] [--replayssm-steps N]
#                                [--capture-steps N]
#
# --builders: comma-separated, of gdn,kda,mamba2,mamba1,short_conv,linear,bailing_linear,
# ple_short_conv,inkling
# (default all).
# --replayssm-steps N: ReplaySSM (Triton) steps per base-Mamba builder (default: --steps);
# --capture-steps N: Inkling capture steps (default: --steps).
# --dump FILE: every differing case as a JSON line (the case format; replayable).
#
# 1. needs the venv of scripts/vllm-diff.sh ($LINMETA_VLLM_VENV, default ../venv-vllm beside
#    the repository; run scripts/vllm-diff.sh once to create it);
# 2. builds and installs the linmeta package into it (build dir build/python-vllm: later runs
#    recompile only what changed);
# 3. runs tests/vllm/adapter_diff.py: for GDN / KDA tests/data/vllm034_public.jsonl; for the
#    Mamba family tests/data/vllm034_mamba_public{,_errors}.jsonl,
#    tests/data/vllm034_mamba.jsonl and tests/vllm/mamba_steps.py --edges; then N random
#    steps per builder (default 2000; --seed default 1; the Mamba family's from
#    tests/vllm/mamba_steps.py, step i = line i of `mamba_steps.py --builder B --count N
#    --seed S --zero-drafts-percent P`), every field of the returned objects compared.
#    Prints (and with --record writes) the summary; exit 1 on a difference.
# The venv is shared: the run checks that the linmeta it imported is this tree's (its Python
# sources, and the extension unchanged from install to the end of the run).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
source scripts/env.sh

STEPS=2000 SEED=1 ZERO_DRAFTS=10 RECORD="" DUMP=""
BUILDERS=gdn,kda,mamba2,mamba1,short_conv,linear,bailing_linear,ple_short_conv,inkling
EXTRA=()
while [ $# -gt 0 ]; do
  case "$1" in
    --builders) BUILDERS=$2; shift 2 ;;
    --dump) DUMP=$2; shift 2 ;;
    --steps) STEPS=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --zero-drafts) ZERO_DRAFTS=$2; shift 2 ;;
    --record) RECORD=$2; shift 2 ;;
    --replayssm-steps|--capture-steps) EXTRA+=("$1" "$2"); shift 2 ;;
    *) echo "usage: $0 [--builders LIST] [--steps N] [--seed S] [--zero-drafts P] [--dump FILE]" \
        "[--record FILE]" >&2
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
# Which linmeta the venv holds now (another tree may install into the same venv).
SITE=$("$PY" -c "import os, linmeta; print(os.path.dirname(linmeta.__file__))")
installed() {
  diff -r -q -x '*.so' -x '__pycache__' -x '*.typed' -x '*.pyi' -x '_version.py' python/linmeta "$SITE" >&2 || return 1
  sha256sum "$SITE"/_linmeta*.so | cut -d' ' -f1
}
EXT=$(installed) || { echo "the venv's linmeta ($SITE) is not this tree's" >&2; exit 2; }

export VLLM_TARGET_DEVICE=cpu CUDA_VISIBLE_DEVICES=""
QUIET='^W[0-9]{4}|deprecated|vllm._C|max_num_scheduled_tokens|Reset SSM'
OUT=$(mktemp)
trap 'rm -f "$OUT"' EXIT
status=0
start=$(date +%s)
"$PY" tests/vllm/adapter_diff.py --builders "$BUILDERS" --steps "$STEPS" --seed "$SEED" \
  --zero-drafts "$ZERO_DRAFTS" ${DUMP:+--dump "$DUMP"} "${EXTRA[@]}" 2> >(grep -Ev "$QUIET" >&2) |
  tee "$OUT" || status=$?
echo "wall: $(( $(date +%s) - start )) s" | tee -a "$OUT"
if [ "$(installed)" != "$EXT" ]; then
  echo "the venv's linmeta changed during the run (another install): the run is void" | tee -a "$OUT" >&2
  status=2
fi

if [ -n "$RECORD" ]; then
  {
    echo "linmeta.vllm vs vLLM 0.34.0, object to object ($(date -u +%Y-%m-%d), linmeta $(git rev-parse --short HEAD)$(git diff --quiet HEAD || echo ' + uncommitted changes'))"
    echo "scripts/vllm-adapter-diff.sh --builders $BUILDERS --steps $STEPS --seed $SEED --zero-drafts $ZERO_DRAFTS ${EXTRA[*]}"
    cat "$OUT"
  } > "$RECORD"
fi
exit $status
