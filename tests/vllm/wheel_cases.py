"""Case files through vLLM 0.34.0's real builders (CPU).

  wheel_cases.py check FILE.jsonl      re-run every case and compare with its recorded
                                       expected / expected_groups (validates the harness on
                                       a sample made elsewhere, e.g. vllm034_public.jsonl);
                                       a case with "error" must raise that exception class
  wheel_cases.py fill IN.jsonl OUT.jsonl [--dtypes F]
                                       fill "expected" (and "expected_groups") of steps
                                       that carry none (the step generator's output); a
                                       step the wheel rejects gets "error" instead

Exit status 1 when a check finds a mismatch.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
import traceback

import wheel_builders
import wheel_mamba
import wheel_runner


def _first_difference(a, b, path="expected"):
    if isinstance(a, dict) and isinstance(b, dict):
        for key in list(a) + [k for k in b if k not in a]:
            if key not in a or key not in b:
                return f"{path}.{key}: present on one side only"
            d = _first_difference(a[key], b[key], f"{path}.{key}")
            if d:
                return d
        return None
    if a != b:
        return f"{path}: {json.dumps(a)[:200]} != {json.dumps(b)[:200]}"
    return None


def check(path: str) -> int:
    cases = [json.loads(line) for line in open(path) if line.strip()]
    bad = 0
    for case in cases:
        try:
            expected, groups = wheel_runner.execute(case)
        except (wheel_builders.UnsupportedConfig, wheel_mamba.HarnessMismatch) as e:
            print(f"FAIL {case['name']}: {type(e).__name__}: {e}")
            bad += 1
            continue
        except Exception as e:  # noqa: BLE001 - reported per case
            recorded = case.get("error", {}).get("type")
            if recorded == type(e).__name__:
                continue
            what = f"raised {type(e).__name__}: {e}"
            print(f"FAIL {case['name']}: {what}" + (f" (recorded: {recorded})" if recorded else ""))
            bad += 1
            continue
        if "error" in case:
            print(f"FAIL {case['name']}: recorded {case['error'].get('type')}, the wheel raised nothing")
            bad += 1
            continue
        diff = _first_difference(expected, case.get("expected"))
        if diff is None and groups is not None:
            diff = _first_difference(groups, case.get("expected_groups"), "expected_groups")
        if diff is not None:
            print(f"FAIL {case['name']}: {diff}")
            bad += 1
    print(f"{len(cases) - bad} passed, {bad} failed")
    return 1 if bad else 0


def fill(src: str, dst: str, dtype_path: str | None) -> int:
    dtype_log: dict = {}
    n = errors = 0
    start = time.time()
    with open(dst, "w") as out:
        for line in open(src):
            if not line.strip():
                continue
            case = json.loads(line)
            case.pop("expected", None)
            case.pop("expected_groups", None)
            case.pop("error", None)
            try:
                expected, groups = wheel_runner.execute(case, dtype_log)
                case["expected"] = expected
                if groups is not None:
                    case["expected_groups"] = groups
            except (wheel_builders.UnsupportedConfig, wheel_mamba.HarnessMismatch):
                raise
            except Exception as e:  # noqa: BLE001 - recorded in the case
                errors += 1
                where = traceback.extract_tb(e.__traceback__)[-1]
                case["error"] = {
                    "type": type(e).__name__,
                    "message": str(e),
                    "where": f"{where.filename.split('site-packages/')[-1]}:{where.lineno} in {where.name}",
                    "line": (where.line or "").strip(),
                }
            out.write(json.dumps(case, separators=(",", ":")) + "\n")
            n += 1
    print(f"filled {n} steps ({errors} raised) in {time.time() - start:.0f} s", file=sys.stderr)
    if dtype_path:
        with open(dtype_path, "w") as f:
            for (builder, name), kinds in sorted(dtype_log.items()):
                f.write(f"{builder}\t{name}\t{','.join(sorted(kinds))}\n")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("check")
    c.add_argument("file")
    f = sub.add_parser("fill")
    f.add_argument("src")
    f.add_argument("dst")
    f.add_argument("--dtypes")
    a = ap.parse_args()
    if a.cmd == "check":
        return check(a.file)
    return fill(a.src, a.dst, a.dtypes)


if __name__ == "__main__":
    sys.exit(main())
