"""Picks a small public sample of SGLang cases (tests/data/sglang/*.jsonl): for every
kind of step in CASES (mode, forward mode, engine configuration, graph state, tracking off /
with host lists / device only, padded rows or not), the shortest case with one row and the
shortest with several; the shortest of every (mode, tracking, graph state) triple first, then
the others, shortest first, up to --max-bytes in all.

    python3 select_sample.py CASES.jsonl OUT.jsonl [--max-bytes 100000]
"""

from __future__ import annotations

import argparse
import json
import sys


def kind(case: dict) -> tuple:
    inp = case["input"]
    track = inp.get("track")
    tracking = "off" if track is None else ("host" if track["cpu_lists"] else "device")
    padded = len(inp["req_pool_indices"]) > len(inp["mamba_slots"])
    return (case["mode"], inp["forward_mode"], case["config"]["name"], tracking, padded,
            inp.get("num_padding", 0) is None, "raises" in case, case["config"]["graph"])


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("cases")
    ap.add_argument("out")
    ap.add_argument("--max-bytes", type=int, default=100000)
    args = ap.parse_args(argv)
    best: dict = {}
    with open(args.cases) as f:
        for line in f:
            case = json.loads(line)
            several = len(case["input"]["mamba_slots"]) > 1
            key = kind(case) + (several,)
            if key not in best or len(line) < len(best[key]):
                best[key] = line
    lines = sorted(best.values(), key=len)
    # First the shortest case of every (mode, tracking, graph state), then the other kinds,
    # shortest first, while they fit.
    first: dict = {}
    for line in lines:
        k = kind(json.loads(line))
        first.setdefault((k[0], k[3], k[7]), line)
    out = list(first.values())
    size = sum(map(len, out))
    for line in lines:
        if line in first.values():
            continue
        if size + len(line) > args.max_bytes:
            break
        out.append(line)
        size += len(line)
    out.sort(key=lambda l: json.loads(l)["name"])
    with open(args.out, "w") as f:
        f.writelines(out)
    print(f"{args.out}: {len(out)} of {len(lines)} kinds, {size} bytes", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
