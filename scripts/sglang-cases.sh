#!/usr/bin/env bash
# Runs SGLang 0.5.23's own linear-attention metadata code (tests/sglang/, docs/sglang.md) on
# random steps of every mode and checks the harness: every case re-reads, and every N-th
# step run again through fresh objects (a new pool, model runner and backend) gives the
# identical JSON. First it checks the plugin route linmeta.sglang will take
# (tests/sglang/plugin_probe.py). Not part of .ci/run: the venv (scripts/sglang-env.sh) is ~11 GB.
#
#   scripts/sglang-cases.sh [--steps N] [--seed S] [--backends "mamba2 gdn ..."]
#                           [--every N] [--keep DIR] [--make-data]
#
# --steps N    steps per backend and mode (default 2000); the modes are those of
#              tests/sglang/sglang_steps.py (decode extend mixed verify draft_extend
#              dp_decode replay capture cpu_capture, and KDA's prefill_graph)
# --every N    the fresh-objects check reruns every N-th case (default 100)
# --keep DIR   keeps the case files (DIR/BACKEND-SEED.jsonl)
# --make-data  rewrites tests/data/sglang/BACKEND.jsonl, a small sample of each mode
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)

STEPS=2000 SEED=1 EVERY=100 KEEP="" MAKE_DATA=0 BACKENDS="mamba2 gdn kda short_conv lightning"
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --backends) BACKENDS=$2; shift 2 ;;
    --every) EVERY=$2; shift 2 ;;
    --keep) KEEP=$2; shift 2 ;;
    --make-data) MAKE_DATA=1; shift ;;
    *) echo "usage: $0 [--steps N] [--seed S] [--backends LIST] [--every N] [--keep DIR] [--make-data]" >&2
      exit 2 ;;
  esac
done

PY=$(scripts/sglang-env.sh)
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT
if [ -n "$KEEP" ]; then mkdir -p "$KEEP" && KEEP=$(cd "$KEEP" && pwd); fi
cd tests/sglang
status=0
echo "== plugin route (plugin_probe.py)"
if ! nice -n 10 "$PY" plugin_probe.py; then status=1; fi
for backend in $BACKENDS; do
  out="$WORK/$backend-$SEED.jsonl"
  nmodes=$(python3 -c "import sglang_steps as s; print(len(s.BACKEND_MODES['$backend']))")
  nice -n 10 "$PY" sglang_cases.py run --backend "$backend" --count $((STEPS * nmodes)) \
    --seed "$SEED" "$out"
  if ! nice -n 10 "$PY" sglang_cases.py check "$out" --every "$EVERY" --verbose; then status=1; fi
  if [ -n "$KEEP" ]; then cp "$out" "$KEEP/"; fi
  if [ "$MAKE_DATA" = 1 ]; then
    python3 select_sample.py "$out" "$ROOT/tests/data/sglang/$backend.jsonl"
  fi
done
exit $status
