#!/usr/bin/env bash
# Differential test of linmeta's vllm-0.34 profile against vLLM 0.34.0's real GDN and KDA
# metadata builders, on CPU (docs/semantics.md, "The differential harness"). Not part of
# .ci/run: the venv is ~8.5 GB.
#
#   scripts/vllm-diff.sh [--steps N] [--chunk C] [--seed S] [--zero-drafts P] [--record FILE]
#                        [--builders "gdn kda"] [--keep DIR] [--make-data] [--replayssm]
#                        [--build DIR]
#
# --builders also takes vLLM's Mamba family: "mamba2 mamba1 short_conv linear bailing_linear
# ple_short_conv", and Inkling's short-conv builder "inkling" (its Triton kernel runs in Triton's
# CPU interpreter). Their steps
# come from tests/vllm/mamba_steps.py (linmeta-stepgen knows gdn/kda only), the wheel fills
# them the same way, and linmeta-replay checks them once it accepts those builder names; until
# then the run stops after the fill ("fill only") and keeps the filled files (--keep DIR, by
# default build/vllm-diff-filled/). With --make-data they give tests/data/vllm034_mamba.jsonl.
#
# 1. creates the venv if absent ($LINMETA_VLLM_VENV, default ../venv-vllm beside the
#    repository): vllm==0.34.0 with --no-deps, then its Requires-Dist minus
#    flashinfer-python (pinned to a version the registry lacks; never imported on CPU);
# 2. checks the harness on the public cases of tests/data (vllm034_public.jsonl; for the
#    Mamba family vllm034_mamba_public{,_errors}.jsonl): it must reproduce them;
# 3. builds linmeta-stepgen and linmeta-replay;
# 4. per builder, N random steps (default 10000) of the step generator, in chunks of C:
#    the wheel fills "expected", linmeta-replay compares every field. Prints (and with
#    --record writes) the counts; exit 1 on any mismatch.
# --zero-drafts P: P percent of the steps (default 10) have every spec row draft 0 tokens
# (rules R1 / K1; the generator's plain stream makes them rare).
# --make-data regenerates tests/data/vllm034.jsonl (a category-covering sample of the gdn/kda
# steps), tests/data/vllm034_mamba.jsonl (of the Mamba-family steps) and
# tests/data/vllm034_inkling.jsonl (of the inkling steps).
# --keep DIR writes every filled chunk to DIR/BUILDER-SEED.jsonl.
# --replayssm (the Mamba base builders mamba2 mamba1 short_conv ple_short_conv): every step's
# configuration has ReplaySSM's Triton path on (mamba_steps.py --replayssm); with --make-data
# the sample goes to tests/data/vllm034_replayssm.jsonl instead.
# --build DIR takes linmeta-replay from an existing build directory (e.g. build/dev) instead
# of building the release preset.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
source scripts/env.sh

STEPS=10000 CHUNK=1000 SEED=1 RECORD="" MAKE_DATA=0 ZERO_DRAFTS=10 BUILDERS="gdn kda" KEEP=""
REPLAYSSM=0 BUILD=""
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) STEPS=$2; shift 2 ;;
    --chunk) CHUNK=$2; shift 2 ;;
    --seed) SEED=$2; shift 2 ;;
    --zero-drafts) ZERO_DRAFTS=$2; shift 2 ;;
    --record) RECORD=$2; shift 2 ;;
    --builders) BUILDERS=$2; shift 2 ;;
    --keep) KEEP=$2; shift 2 ;;
    --make-data) MAKE_DATA=1; shift ;;
    --replayssm) REPLAYSSM=1; shift ;;
    --build) BUILD=$2; shift 2 ;;
    *) echo "usage: $0 [--steps N] [--chunk C] [--seed S] [--zero-drafts P] [--record FILE] [--builders LIST] [--keep DIR] [--make-data] [--replayssm] [--build DIR]" >&2
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

is_mamba() { case "$1" in mamba2|mamba1|short_conv|linear|bailing_linear|ple_short_conv|inkling) return 0 ;; *) return 1 ;; esac; }
any_mamba=0 any_gdn=0
for builder in $BUILDERS; do
  if is_mamba "$builder"; then any_mamba=1
  elif [ "$builder" = gdn ] || [ "$builder" = kda ]; then any_gdn=1
  else echo "unknown builder '$builder' (gdn kda mamba2 mamba1 short_conv linear bailing_linear ple_short_conv inkling)" >&2; exit 2
  fi
  case "$REPLAYSSM:$builder" in
    1:mamba2|1:mamba1|1:short_conv|1:ple_short_conv|0:*) ;;
    *) echo "--replayssm: '$builder' is no Mamba base builder (mamba2 mamba1 short_conv ple_short_conv)" >&2; exit 2 ;;
  esac
done

if [ "$any_gdn" = 1 ]; then
  echo "== harness vs tests/data/vllm034_public.jsonl"
  harness check "$ROOT/tests/data/vllm034_public.jsonl"
fi
if [ "$any_mamba" = 1 ]; then
  for f in vllm034_mamba_public.jsonl vllm034_mamba_public_errors.jsonl vllm034_replayssm.jsonl; do
    if [ ! -f "$ROOT/tests/data/$f" ]; then continue; fi
    echo "== harness vs tests/data/$f"
    harness check "$ROOT/tests/data/$f"
  done
  if [ -z "$KEEP" ]; then KEEP=build/vllm-diff-filled; fi
fi
if [ -n "$KEEP" ]; then mkdir -p "$KEEP"; fi

if [ -n "$BUILD" ]; then
  BIN=$BUILD
else
  echo "== build"
  cmake --preset release > /dev/null
  cmake --build --preset release --target linmeta-stepgen linmeta-replay > /dev/null
  BIN=build/release
fi
WORK=$(mktemp -d)
trap 'rm -rf "$WORK"' EXIT

summary=()
status=0
for builder in $BUILDERS; do
  passed=0 failed=0 done_steps=0 raised=0 chunk_no=0 fill_only=0 fill_s=0
  while [ "$done_steps" -lt "$STEPS" ]; do
    n=$(( STEPS - done_steps < CHUNK ? STEPS - done_steps : CHUNK ))
    s=$(( SEED * 1000 + chunk_no ))
    if is_mamba "$builder"; then
      "$PY" tests/vllm/mamba_steps.py --builder "$builder" --count "$n" --seed "$s" \
        --zero-drafts-percent "$ZERO_DRAFTS" $([ "$REPLAYSSM" = 1 ] && echo --replayssm) \
        > "$WORK/steps.jsonl"
    else
      "$BIN/tools/linmeta-stepgen" --builder "$builder" --profile vllm-0.34 --count "$n" --seed "$s" \
        --zero-drafts-percent "$ZERO_DRAFTS" > "$WORK/steps.jsonl"
    fi
    t0=$(date +%s)
    if ! harness fill "$WORK/steps.jsonl" "$WORK/cases.jsonl" 2> "$WORK/fill.txt"; then
      echo "$builder: the harness failed on chunk $chunk_no (seed $s):" >&2
      tail -5 "$WORK/fill.txt" >&2
      failed=$(( failed + n )) done_steps=$(( done_steps + n )) chunk_no=$(( chunk_no + 1 ))
      continue
    fi
    fill_s=$(( fill_s + $(date +%s) - t0 ))
    r=$(grep -o '([0-9]* raised)' "$WORK/fill.txt" | tr -dc 0-9)
    raised=$(( raised + ${r:-0} ))
    if [ -n "$KEEP" ]; then cp "$WORK/cases.jsonl" "$KEEP/$builder-$s.jsonl"; fi
    if [ "$MAKE_DATA" = 1 ]; then cp "$WORK/cases.jsonl" "$WORK/keep-$builder-$chunk_no.jsonl"; fi
    "$BIN/tools/linmeta-replay" check "$WORK/cases.jsonl" > "$WORK/replay.txt" 2>&1 || true
    if is_mamba "$builder" && grep -q "invalid case: builder: '$builder' is not" "$WORK/replay.txt"; then
      # linmeta-replay does not take this builder yet: the fill is the whole run.
      fill_only=1 done_steps=$(( done_steps + n )) chunk_no=$(( chunk_no + 1 ))
      echo "$builder: $done_steps/$STEPS steps filled (${fill_s} s in the wheel; linmeta-replay does not take $builder cases yet)"
      continue
    fi
    grep -v 'passed, .* failed' "$WORK/replay.txt" | head -20 || true
    read -r p f < <(grep -E '^[0-9]+ passed, [0-9]+ failed' "$WORK/replay.txt" | tail -1 |
      sed -E 's/([0-9]+) passed, ([0-9]+) failed.*/\1 \2/')
    passed=$(( passed + ${p:-0} )) failed=$(( failed + ${f:-$n} ))
    done_steps=$(( done_steps + n )) chunk_no=$(( chunk_no + 1 ))
    echo "$builder: $done_steps/$STEPS steps: replay $passed passed, $failed failed"
  done
  # (an assignment's failing substitution would end the script under set -e)
  tag=""
  if [ "$REPLAYSSM" = 1 ]; then tag=" (ReplaySSM)"; fi
  line="$builder$tag: $STEPS random steps (seeds $((SEED * 1000))..$((SEED * 1000 + chunk_no - 1)),"
  if [ "$fill_only" = 1 ]; then
    line+=" $raised raised in the wheel, filled in ${fill_s} s): fill only, linmeta-replay does not take"
    line+=" $builder cases yet (filled files: $KEEP/$builder-*.jsonl)"
    if [ "$passed" -ne 0 ] || [ "$failed" -ne 0 ]; then line+="; replayed chunks: $passed passed, $failed failed"; fi
    summary+=("$line")
    if [ "$failed" -ne 0 ]; then status=1; fi
    continue
  fi
  line+=" $raised raised in the wheel): linmeta-replay $passed passed, $failed failed"
  summary+=("$line")
  if [ "$failed" -ne 0 ]; then status=1; fi
done

if [ "$MAKE_DATA" = 1 ]; then
  shopt -s nullglob
  gdn_kept=("$WORK"/keep-gdn-*.jsonl "$WORK"/keep-kda-*.jsonl)
  mamba_kept=("$WORK"/keep-mamba2-*.jsonl "$WORK"/keep-mamba1-*.jsonl "$WORK"/keep-short_conv-*.jsonl
    "$WORK"/keep-linear-*.jsonl "$WORK"/keep-bailing_linear-*.jsonl "$WORK"/keep-ple_short_conv-*.jsonl)
  if [ ${#gdn_kept[@]} -gt 0 ]; then
    python3 tests/vllm/select_cases.py tests/data/vllm034.jsonl "${gdn_kept[@]}" --per-tag 14
  fi
  if [ ${#mamba_kept[@]} -gt 0 ] && [ "$REPLAYSSM" = 1 ]; then
    python3 tests/vllm/select_cases.py tests/data/vllm034_replayssm.jsonl "${mamba_kept[@]}" \
      --prefix vllm034_replayssm --per-tag 2 --max-bytes 40000
  elif [ ${#mamba_kept[@]} -gt 0 ]; then
    python3 tests/vllm/select_cases.py tests/data/vllm034_mamba.jsonl "${mamba_kept[@]}" \
      --prefix vllm034_mamba --per-tag 2 --max-bytes 40000
  fi
  inkling_kept=("$WORK"/keep-inkling-*.jsonl)
  if [ ${#inkling_kept[@]} -gt 0 ]; then
    python3 tests/vllm/select_cases.py tests/data/vllm034_inkling.jsonl "${inkling_kept[@]}" \
      --prefix vllm034_inkling --per-tag 3 --max-bytes 40000
  fi
fi

{
  echo "vLLM 0.34.0 differential ($(date -u +%Y-%m-%d), linmeta $(git rev-parse --short HEAD))"
  printf '%s\n' "${summary[@]}"
} | tee "${RECORD:-/dev/null}"
exit $status
