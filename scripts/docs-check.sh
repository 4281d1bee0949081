#!/usr/bin/env bash
# Runs every shell and Python snippet of README.md and docs/*.md, so the docs cannot drift
# from the code. Run from a checkout with a release build (scripts/test.sh runs it after
# `cmake --build --preset release`).
#
# Which blocks run: fenced blocks tagged bash, sh or python. A block is
# left out only when the line right above its fence is one of these markers (an HTML comment,
# invisible on the rendered page):
#   <!-- docs-check: gpu -->            needs a CUDA device (run on the GPU machine)
#   <!-- docs-check: skip REASON -->    cannot run inside CI for REASON (e.g. it is CI itself)
# and a block marked
#   <!-- docs-check: venv -->           runs with a Python virtual environment active
#                                       (build/docs-venv, made on first use)
# runs in that environment; later Python blocks use it too. Shell blocks run with
# `bash -euo pipefail` from the repository root, Python blocks with python3 there. Blocks of
# other languages (cpp, text, output) are not run.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
exec python3 - "$@" <<'PY'
import os, re, subprocess, sys, time

files = ["README.md"] + sorted(
    os.path.join("docs", f) for f in os.listdir("docs") if f.endswith(".md"))
fence = re.compile(r"^```(\w*)\s*$")
marker = re.compile(r"^<!-- docs-check: (gpu|venv|skip)\s*(.*?)\s*-->\s*$")
venv = "build/docs-venv"
ran = skipped = 0
failed = []

def env_for(use_venv):
    env = dict(os.environ)
    if use_venv:
        if not os.path.exists(f"{venv}/bin/python"):
            subprocess.run([sys.executable, "-m", "venv", venv], check=True)
        env["VIRTUAL_ENV"] = os.path.abspath(venv)
        env["PATH"] = os.path.abspath(f"{venv}/bin") + os.pathsep + env["PATH"]
    return env

venv_active = False
for path in files:
    lines = open(path, encoding="utf-8").read().split("\n")
    i = 0
    while i < len(lines):
        m = fence.match(lines[i])
        if not m:
            i += 1
            continue
        lang, start = m.group(1), i
        j = i + 1
        while j < len(lines) and not lines[j].startswith("```"):
            j += 1
        body = "\n".join(lines[start + 1:j]) + "\n"
        i = j + 1
        if lang not in ("bash", "sh", "python"):
            continue
        mk = marker.match(lines[start - 1]) if start > 0 else None
        where = f"{path}:{start + 1}"
        if mk and mk.group(1) != "venv":
            why = "needs a CUDA device" if mk.group(1) == "gpu" else mk.group(2)
            if not why:
                failed.append(f"{where}: 'skip' marker without a reason")
            print(f"docs-check: {where} ({lang}) not run: {why}")
            skipped += 1
            continue
        venv_active = venv_active or bool(mk)
        cmd = ["bash", "-euo", "pipefail", "-c", body] if lang != "python" else \
              ["python", "-c", body] if venv_active else [sys.executable, "-c", body]
        t0 = time.time()
        r = subprocess.run(cmd, env=env_for(venv_active), stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT, text=True, timeout=1800)
        ran += 1
        status = "ok" if r.returncode == 0 else f"FAILED (exit {r.returncode})"
        print(f"docs-check: {where} ({lang}) {status} in {time.time() - t0:.1f} s")
        if r.returncode != 0:
            print("\n".join("    " + l for l in r.stdout.rstrip().split("\n")[-30:]))
            failed.append(where)

print(f"docs-check: {ran} snippets ran, {skipped} marked not to run, {len(failed)} failed")
for f in failed:
    print(f"docs-check: FAILED {f}")
sys.exit(1 if failed else 0)
PY
