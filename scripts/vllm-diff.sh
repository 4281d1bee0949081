#!/usr/bin/env bash
# Differential test of linmeta's vllm-0.34 profile against vLLM 0.34.0's real GDN and KDA
# metadata builders, on CPU (docs/semantics.md, "The differential harness"). Not part of
# .ci/run: the venv is ~8.5 GB.
#
#   scripts/vllm-diff.sh [--steps N] [--chunk C] [--seed S] [--zero-drafts P] [--record FILE]
#                        [--make-data]
#
# 1. creates the venv if absent ($LINMETA_VLLM_VENV, default ../venv-vllm beside the
#    repository): vllm==0.34.0 with --no-deps, then its Requires-Dist minus
#    flashinfer-python (pinned to a version the registry lacks; never imported on CPU);
# 2. checks the harness on ../shared/cases/vllm034_public.jsonl when present;
# 3. builds linmeta-stepgen, linmeta-replay and linmeta_tests;
# 4. per builder, N random steps (default 10000) of the step generator, in chunks of C:
#    the wheel fills "expected", linmeta-replay compares every field linmeta emits, the
#    Vllm034PlanFields test compares the planner's data for the fields it does not emit
#    yet. Prints (and with --record writes) the counts; exit 1 on any mismatch.
# --zero-drafts P: P percent of the steps (default 10) have every spec row draft 0 tokens
# (rules R1 / K1; the generator's plain stream makes them rare).
# --make-data regenerates tests/data/vllm034.jsonl (a category-covering sample).
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
source scripts/env.sh

STEPS=10000 CHUNK=1000 SEED=1 RECORD="" MAKE_DATA=0 ZERO_DRAFTS=10
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --chunk) CHUNK=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --zero-drafts) ZERO_DRAFTS=$2; shift 2 ;;
    --record) RECORD=$2; shift 2 ;;
    --make-data) MAKE_DATA=1; shift ;;
    *) echo "usage: $0 [--steps N] [--chunk C] [--seed S] [--zero-drafts P] [--record FILE] [--make-data]" >&2
      exit 2 ;;
  esac
done

VENV=${LINMETA_VLLM_VENV:-$(cd "$ROOT/.." && pwd)/venv-vllm}
PY="$VENV/bin/python"
if ! "$PY" -c "import vllm, sys; sys.exit(vllm.__version__ != '0.34.0')" 2>/dev/null; then
  echo "== installing vllm 0.34.0 into $VENV"
  python3 -m venv "$VENV"
  WHEELS=$(mktemp -d)
  "$VENV/bin/pip" download --no-deps -d "$WHEELS" vllm==0.34.0
  WHEEL=$(ls "$WHEELS"/vllm-0.34.0-*.whl)
  "$VENV/bin/pip" install --no-deps "$WHEEL"
  python3 tests/vllm/wheel_requirements.py "$WHEEL" flashinfer-python > "$WHEELS/requirements.txt"
  "$VENV/bin/pip" install -r "$WHEELS/requirements.txt"
  rm -rf "$WHEELS"
fi
export VLLM_TARGET_DEVICE=cpu CUDA_VISIBLE_DEVICES=""
QUIET='^W[0-9]{4}|deprecated|vllm._C|max_num_scheduled_tokens|Reset SSM'
harness() { (cd tests/vllm && "$PY" wheel_cases.py "$@") 2> >(grep -Ev "$QUIET" >&2); }

if [ -f ../shared/cases/vllm034_public.jsonl ]; then
  echo "== harness vs ../shared/cases/vllm034_public.jsonl"
  harness check "$ROOT/../shared/cases/vllm034_public.jsonl"
fi

echo "== build"
cmake --preset release > /dev/null
cmake --build --preset release --target linmeta-stepgen linmeta-replay linmeta_tests > /dev/null
BIN=build/release
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

summary=()
status=0
for builder in gdn kda; do
  passed=0 failed=0 partial=0 plan_bad=0 done_steps=0 raised=0 chunk_no=0
  : > "$WORK/fields-$builder.txt"
  while [ "$done_steps" -lt "$STEPS" ]; do
    n=$(( STEPS - done_steps < CHUNK ? STEPS - done_steps : CHUNK ))
    s=$(( SEED * 1000 + chunk_no ))
    "$BIN/tools/linmeta-stepgen" --builder "$builder" --profile vllm-0.34 --count "$n" --seed "$s" \
      --zero-drafts-percent "$ZERO_DRAFTS" > "$WORK/steps.jsonl"
    harness fill "$WORK/steps.jsonl" "$WORK/cases.jsonl" 2> "$WORK/fill.txt"
    raised=$(( raised + $(grep -o '([0-9]* raised)' "$WORK/fill.txt" | tr -dc 0-9) ))
    "$BIN/tools/linmeta-replay" check "$WORK/cases.jsonl" > "$WORK/replay.txt" || true
    grep -v '^partial:\|passed, .* failed$' "$WORK/replay.txt" | head -20 || true
    read -r p f < <(tail -1 "$WORK/replay.txt" | sed -E 's/([0-9]+) passed, ([0-9]+) failed.*/\1 \2/')
    pa=$(grep -o '^partial: [0-9]*' "$WORK/replay.txt" | tr -dc 0-9 || true)
    grep '^partial:' "$WORK/replay.txt" | sed 's/.*emit yet://' >> "$WORK/fields-$builder.txt" || true
    LINMETA_VLLM034_CASES="$WORK/cases.jsonl" "$BIN/tests/linmeta_tests" \
      --gtest_filter='Vllm034PlanFields.*' > "$WORK/plan.txt" 2>&1 || true
    grep -A3 'Failure' "$WORK/plan.txt" | head -12 || true
    pb=$(grep -o '[0-9]* mismatching' "$WORK/plan.txt" | tr -dc 0-9)
    passed=$(( passed + p )) failed=$(( failed + f )) partial=$(( partial + ${pa:-0} ))
    plan_bad=$(( plan_bad + ${pb:-1} ))
    if [ "$MAKE_DATA" = 1 ]; then cp "$WORK/cases.jsonl" "$WORK/keep-$builder-$chunk_no.jsonl"; fi
    done_steps=$(( done_steps + n )) chunk_no=$(( chunk_no + 1 ))
    echo "$builder: $done_steps/$STEPS steps: replay $passed passed, $failed failed, $partial partial;" \
      "plan fields: $plan_bad cases mismatching"
  done
  # "name (n) name (n) ..." per chunk -> totals per field
  fields=$(tr ' ' '\n' < "$WORK/fields-$builder.txt" | grep -v '^$' | paste - - 2>/dev/null | tr -d '()' |
    awk 'NF == 2 { n[$1] += $2 } END { for (k in n) printf " %s (%d)", k, n[k] }')
  line="$builder: $STEPS random steps (seeds $((SEED * 1000))..$((SEED * 1000 + chunk_no - 1)),"
  line+=" $raised raised in the wheel): linmeta-replay $passed passed, $failed failed,"
  line+=" $partial partial (fields not emitted yet:$fields); planner data of those fields:"
  line+=" $plan_bad cases mismatching"
  summary+=("$line")
  if [ "$failed" -ne 0 ] || [ "$plan_bad" -ne 0 ]; then status=1; fi
done

if [ "$MAKE_DATA" = 1 ]; then
  python3 tests/vllm/select_cases.py tests/data/vllm034.jsonl "$WORK"/keep-*.jsonl --per-tag 14
fi

{
  echo "vLLM 0.34.0 differential ($(date -u +%Y-%m-%d), linmeta $(git rev-parse --short HEAD))"
  printf '%s\n' "${summary[@]}"
} | tee "${RECORD:-/dev/null}"
exit $status
