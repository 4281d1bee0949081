#!/usr/bin/env python3
"""Per-workload ratios B / A of two ``linmeta-bench --json`` files (docs/bench.md, "Comparing
two runs"): host median and GPU median in a graph, each with the larger noise (interquartile
range / median) of the two runs; ``faster`` / ``slower`` only when B / A lies outside it.

    python3 bench/python/compare.py A.json B.json [--csv]

Standard library only (the bench's JSON; no build, no torch)."""

from __future__ import annotations

import argparse
import csv
import json
import sys

FIGURES = (("host us", ("host_us", "total")), ("GPU graph us", ("gpu_us", "graph")))


def summary(workload: dict, path: tuple[str, ...]) -> dict | None:
    node = workload
    for key in path:
        node = node.get(key) if isinstance(node, dict) else None
    return node if isinstance(node, dict) and node.get("count", 0) > 0 else None


def cells(a: dict | None, b: dict | None) -> list[str]:
    if a is None or b is None:
        return ["-", "-", "-", "-", ""]
    ratio = b["median"] / a["median"] if a["median"] > 0 else float("nan")
    noise = max((s["p75"] - s["p25"]) / s["median"] if s["median"] > 0 else 0 for s in (a, b))
    known = a.get("p75", 0) > 0 and b.get("p75", 0) > 0  # files before the noise figures
    change = "" if not known or abs(ratio - 1) <= noise else "faster" if ratio < 1 else "slower"
    return [f"{a['median']:.2f}", f"{b['median']:.2f}", f"{ratio:.3f}",
            f"{100 * noise:.1f}" if known else "?", change]


def load(path: str) -> list[dict]:
    try:
        with open(path) as f:
            return json.load(f)["workloads"]
    except (OSError, ValueError, KeyError, TypeError) as e:
        sys.exit(f"compare.py: {path}: not a linmeta-bench --json file ({e})")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--csv", action="store_true", help="CSV on stdout instead of the text table")
    args = ap.parse_args()
    b_by_name = {w["name"]: w for w in load(args.b) if "error" not in w}
    rows = []
    for wa in load(args.a):
        wb = b_by_name.get(wa["name"])
        if wb is None or "error" in wa:
            continue
        rows.append([wa["name"]] + [c for _, p in FIGURES
                                    for c in cells(summary(wa, p), summary(wb, p))])
    if args.csv:
        out = csv.writer(sys.stdout)
        out.writerow(["workload"] + [f"{t} {s}" for t, _ in FIGURES
                                     for s in ("A", "B", "B/A", "noise%", "change")])
        out.writerows(rows)
        return
    print(f"A = {args.a}, B = {args.b}; 'faster' / 'slower' when B / A is outside the noise")
    tops = ["workload"] + [x for t, _ in FIGURES for x in (t, "", "", "", "")]
    bottoms = [""] + ["A", "B", "B/A", "noise%", "change"] * len(FIGURES)
    table = [tops, bottoms] + rows
    widths = [max(len(r[c]) for r in table) for c in range(len(tops))]
    left = {0, 5, 10}
    for r in table:
        print("  ".join(v.ljust(w) if c in left else v.rjust(w)
                        for c, (v, w) in enumerate(zip(r, widths))).rstrip())


if __name__ == "__main__":
    main()
