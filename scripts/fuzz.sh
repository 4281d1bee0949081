#!/usr/bin/env bash
# Runs the libFuzzer target fuzz/linmeta_fuzz (docs/fuzzing.md) for a given time:
#   scripts/fuzz.sh [SECONDS] [libFuzzer flags...]     (default 180 s)
# Builds the fuzz preset, writes the seed corpus from the case files (every builder kind and
# profile) plus edge programs, fuzzes into build/fuzz/corpus (kept between runs), and fails
# on any finding; the input that triggered it lands in build/fuzz/findings/ (replay:
# build/fuzz/fuzz/linmeta_fuzz FILE; docs/fuzzing.md).
# LINMETA_FUZZ_JOBS=N runs N workers (libFuzzer -fork=N).
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
seconds=${1:-180}
shift || true

cmake --preset fuzz >/dev/null
cmake --build --preset fuzz
bin=build/fuzz/fuzz
seeds=build/fuzz/seeds corpus=build/fuzz/corpus findings=build/fuzz/findings
rm -rf "$seeds"
data=tests/data
"$bin/linmeta_fuzz_seeds" "$seeds" $data/public.jsonl $data/seed_errors.jsonl $data/vllm034.jsonl \
  $data/vllm034_mamba_public.jsonl $data/vllm034_mamba_public_errors.jsonl
mkdir -p "$corpus" "$findings"

args=(-max_total_time="$seconds" -timeout=10 -rss_limit_mb=2560 -malloc_limit_mb=1024
  -print_final_stats=1 -artifact_prefix="$findings/")
jobs=${LINMETA_FUZZ_JOBS:-1}
((jobs > 1)) && args+=(-fork="$jobs" -ignore_crashes=0)
log=build/fuzz/last-run.log
echo "== fuzzing for ${seconds}s (${jobs} worker(s)); log: $log"
set +e
ASAN_OPTIONS=detect_leaks=1:protect_shadow_gap=0 UBSAN_OPTIONS=print_stacktrace=1 \
  "$bin/linmeta_fuzz" "${args[@]}" "$@" "$corpus" "$seeds" >"$log" 2>&1
rc=$?
set -e
execs=$(grep -h 'stat::number_of_executed_units' "$log" | awk '{s += $2} END {print s + 0}')
rate=$(grep -h 'stat::average_exec_per_sec' "$log" | awk '{s += $2} END {print s + 0}')
echo "fuzz: ${execs} executions, ${rate} exec/s, corpus $(ls "$corpus" | wc -l) inputs"
if ((rc != 0)) || grep -q -E 'ERROR: (AddressSanitizer|libFuzzer)|runtime error|FINDING' "$log"; then
  echo "fuzz: FINDING (exit $rc); the end of $log:" >&2
  tail -60 "$log" >&2
  ls -1 "$findings" >&2
  exit 1
fi
echo "fuzz: no finding"
