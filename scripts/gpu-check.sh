#!/usr/bin/env bash
# GPU checks, run ON a machine with an NVIDIA GPU from the repository root, with a
# build directory that may have been built on another machine and copied here
# (absolute paths differ, so ctest is not used: the binaries run directly).
#
#   scripts/gpu-check.sh [--force-ptx-jit] [BUILD_DIR]        (default: build/release)
#
# --force-ptx-jit (or LINMETA_FORCE_PTX_JIT=1) runs every stage with CUDA_FORCE_PTX_JIT=1: the
# driver ignores the machine code and JIT-compiles the oldest PTX (compute_80 by default), so a
# Hopper or Blackwell card runs the code an A100 would (no griddepcontrol.wait: PDL builders
# launch in plain stream order); the test KernelImageGpu checks that this code is what runs.
# Logs and summary lines then carry "jit-".
#
# Stages, one summary line each; exit status 1 if any stage fails:
#   cuda-archs      scripts/cuda-archs.sh on BUILD/liblinmeta.a and the wheels of build/dist:
#                   cuobjdump lists every default architecture (skipped, with a note, where no
#                   cuobjdump is installed: it needs no GPU, run it on the build machine)
#   gpu-tests       BUILD/tests/linmeta_gpu_tests (all GPU tests, full random run)
#   soak            the random cuda-vs-host tests with LINMETA_SOAK_STEPS steps per builder
#                   kind (default 20000): vLLM's kinds (G 1-48, capture and eager, PDL on and
#                   off) and SGLang's (Sglang/SglangRandomGpu: every entry point and mode)
#   replay-cuda-F   BUILD/tools/linmeta-replay check tests/data/F.jsonl --target cuda, for
#                   every case file F of tests/data (seed, vLLM 0.34 GDN/KDA, the Mamba family,
#                   the files of steps a reference rejects)
#   replay-sglang-cuda-B  BUILD/tools/linmeta-sglang-replay check tests/data/sglang/B.jsonl
#                   --target cuda, for every SGLang backend B the tool serves (a file of a
#                   backend it does not serve yet gets a NOTE line, not a stage)
#   engine-loop     BUILD/examples/engine_loop/engine_loop --require-gpu (FULL-graph replay)
#   memcheck        compute-sanitizer --tool memcheck --leak-check full   } public cases +
#   racecheck       compute-sanitizer --tool racecheck                    } reduced random
#   initcheck       compute-sanitizer --tool initcheck                    } runs, vLLM's and
#                                                                         } SGLang's kinds
# A GPU test that skips for want of a device counts as a failure here.
#
# Environment:
#   OUT                          logs go to $OUT/gpu-check-*.log (else a temporary folder)
#   LINMETA_SANITIZER_STEPS      random steps per builder kind under the sanitizers (2000;
#                                vLLM's kinds and SGLang's)
#   LINMETA_SOAK_STEPS           random steps per builder kind of the soak stage (20000)
#   LINMETA_TEST_SEED            other random steps than the fixed seeds' (docs/testing.md)
#   LINMETA_SANITIZER_FILTER     gtest filter of the sanitizer stages
#   LINMETA_GPU_TEST_ARGS        extra arguments of the gpu-tests stage (e.g. a --gtest_filter)
#   COMPUTE_SANITIZER            path of compute-sanitizer (else PATH, then /usr/local/cuda)
set -uo pipefail
cd "$(dirname "$0")/.." || exit 2

jit=${LINMETA_FORCE_PTX_JIT:-0}
if [[ ${1:-} == --force-ptx-jit ]]; then
  jit=1
  shift
fi
prefix=
if [[ $jit == 1 ]]; then
  export CUDA_FORCE_PTX_JIT=1
  prefix=jit-
  echo "gpu-check: CUDA_FORCE_PTX_JIT=1 (every kernel JIT-compiled from its PTX)"
fi
build=${1:-build/release}
tests_bin=$build/tests/linmeta_gpu_tests
replay_bin=$build/tools/linmeta-replay
sglang_replay_bin=$build/tools/linmeta-sglang-replay
engine_bin=$build/examples/engine_loop/engine_loop
logdir=${OUT:-}
[[ -n $logdir ]] || logdir=$(mktemp -d -t linmeta-gpu-check.XXXXXX)
mkdir -p "$logdir"
export LINMETA_TEST_DATA=$PWD/tests/data
san_steps=${LINMETA_SANITIZER_STEPS:-2000}
san_filter=${LINMETA_SANITIZER_FILTER:-'Public/*:Kinds/RandomEquivalenceGpu.*:Kinds/AdversarialDeviceInputsGpu.*:Modes/PdlGpu.*:Sglang/SglangRandomGpu.*:Sglang/SglangCaptureGpu.*:Sglang/SglangErrorsGpu.*'}
soak_steps=${LINMETA_SOAK_STEPS:-20000}
read -r -a gpu_test_args <<<"${LINMETA_GPU_TEST_ARGS:-}"

sanitizer=${COMPUTE_SANITIZER:-}
if [[ -z $sanitizer ]]; then
  sanitizer=$(command -v compute-sanitizer || true)
  for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
    [[ -z $sanitizer && -x $c ]] && sanitizer=$c
  done
fi

failed=0
summary=$logdir/gpu-check-${prefix}summary.txt
: >"$summary"

# stage NAME KIND COMMAND...   KIND: gtest (checks gtest's verdict and skips) or plain.
stage() {
  local name=$prefix$1 kind=$2
  shift 2
  local log=$logdir/gpu-check-$name.log
  local t0 t1 rc verdict detail
  t0=$(date +%s.%N)
  "$@" >"$log" 2>&1
  rc=$?
  t1=$(date +%s.%N)
  verdict=PASS
  detail=$(grep -E '^cuda-archs: |^\[  PASSED  \]|^\[  FAILED  \] [0-9]+ test|ERROR SUMMARY|[0-9]+ passed, [0-9]+ failed|^linmeta-sglang-replay \(' "$log" |
    tr '\n' ' ' | sed 's/  */ /g; s/ $//')
  ((rc == 0)) || verdict=FAIL
  if [[ $kind == gtest ]]; then
    if grep -q 'no CUDA device: GPU test skipped' "$log"; then
      verdict=FAIL
      detail="tests skipped: no CUDA device visible; $detail"
    elif ! grep -q '^\[  PASSED  \]' "$log"; then
      verdict=FAIL
    fi
  fi
  [[ $verdict == PASS ]] || failed=1
  local line
  line=$(printf '%-4s %-34s %7ss  rc=%-3s %s  (log: %s)' "$verdict" "$name" \
    "$(awk -v a="$t0" -v b="$t1" 'BEGIN { printf "%.1f", b - a }')" "$rc" \
    "${detail:-no summary line}" "$log")
  echo "$line" | tee -a "$summary"
}

missing() {
  echo "FAIL $prefix$1  ($2)" | tee -a "$summary"
  failed=1
}

if [[ -n ${CUOBJDUMP:-} ]] || command -v cuobjdump >/dev/null || [[ -x /usr/local/cuda/bin/cuobjdump ]]; then
  shopt -s nullglob
  stage cuda-archs plain scripts/cuda-archs.sh "$build/liblinmeta.a" build/dist/linmeta-*.whl
  shopt -u nullglob
else
  echo "NOTE cuda-archs: no cuobjdump here (set CUOBJDUMP); scripts/cuda-archs.sh needs no GPU" |
    tee -a "$summary"
fi

if [[ ! -x $tests_bin ]]; then
  missing gpu-tests "$tests_bin not found: build the target linmeta_gpu_tests"
else
  stage gpu-tests gtest "$tests_bin" --gtest_color=no "${gpu_test_args[@]}"
fi

if [[ -x $tests_bin ]]; then
  LINMETA_RANDOM_STEPS=$soak_steps stage soak gtest "$tests_bin" --gtest_color=no \
    '--gtest_filter=Kinds/RandomEquivalenceGpu.*:Sglang/SglangRandomGpu.*'
fi

if [[ ! -x $replay_bin ]]; then
  missing replay-cuda "$replay_bin not found: build the target linmeta-replay"
else
  for f in tests/data/*.jsonl; do
    stage "replay-cuda-$(basename "$f" .jsonl)" plain "$replay_bin" check "$f" --target cuda
  done
fi

if [[ ! -x $sglang_replay_bin ]]; then
  missing replay-sglang-cuda "$sglang_replay_bin not found: build the target linmeta-sglang-replay"
else
  for f in tests/data/sglang/*.jsonl; do
    b=$(basename "$f" .jsonl)
    # A backend the tool does not serve yet: its cases say "no linmeta kind for ...".
    probe=$("$sglang_replay_bin" check "$f" --target host --quiet 2>&1)
    if grep -q 'error: no linmeta kind for SGLang backend' <<<"$probe"; then
      echo "NOTE ${prefix}replay-sglang-cuda-$b: linmeta-sglang-replay serves no kind for backend $b yet" |
        tee -a "$summary"
      continue
    fi
    stage "replay-sglang-cuda-$b" plain "$sglang_replay_bin" check "$f" --target cuda
  done
fi

if [[ ! -x $engine_bin ]]; then
  missing engine-loop "$engine_bin not found: build the target engine_loop"
else
  stage engine-loop plain "$engine_bin" --require-gpu
fi

if [[ -z $sanitizer ]]; then
  missing sanitizers "compute-sanitizer not found (set COMPUTE_SANITIZER)"
elif [[ -x $tests_bin ]]; then
  export LINMETA_RANDOM_STEPS=$san_steps
  args=(--gtest_color=no "--gtest_filter=$san_filter")
  stage memcheck gtest "$sanitizer" --tool memcheck --error-exitcode 1 --leak-check full "$tests_bin" "${args[@]}"
  stage racecheck gtest "$sanitizer" --tool racecheck --error-exitcode 1 "$tests_bin" "${args[@]}"
  stage initcheck gtest "$sanitizer" --tool initcheck --error-exitcode 1 "$tests_bin" "${args[@]}"
  unset LINMETA_RANDOM_STEPS
fi

if ((failed)); then
  echo "gpu-check: FAILED (logs in $logdir)"
  exit 1
fi
echo "gpu-check: all stages passed (logs in $logdir)"
