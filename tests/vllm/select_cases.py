"""Picks a small, category-covering sample of filled cases for tests/data/vllm034.jsonl.

  select_cases.py OUT.jsonl FILLED.jsonl... [--per-tag N] [--max-bytes B]

Every case is tagged by what its expected output shows (builder, path, cache mode, prefill
backend, capture, groups, RecoverSSM, checkpoints, zero drafts, the new 0.34 fields...);
for each tag the N smallest cases not yet taken are kept, so every category present in the
input is covered. Prints the tag counts of the sample.
"""

from __future__ import annotations

import argparse
import collections
import json


def tags(case: dict) -> list[str]:
    cfg, step = case["config"], case["step"]
    b = case["builder"]
    t = [b, f"{b}:{cfg['mamba_cache_mode']}", f"{b}:backend={cfg.get('prefill_backend')}"]
    if case["mode"] == "capture":
        t.append(f"{b}:capture")
    if "groups" in step:
        t.append(f"{b}:groups")
    if cfg["use_recoverssm"]:
        t.append(f"{b}:recoverssm")
    if cfg["full_cuda_graph"]:
        t.append(f"{b}:full-cg")
    if "error" in case:
        return t + [f"{b}:error"]
    e = case["expected"]
    spec, pre, dec = e["num_spec_decodes"], e["num_prefills"], e["num_decodes"]
    path = (
        "pure_spec" if spec and not pre and not dec
        else "mixed" if spec
        else "decode_prefill" if pre and dec
        else "prefill" if pre
        else "decode_only"
    )
    t.append(f"{b}:{path}")
    drafts = step["num_decode_draft_tokens_cpu"]
    if spec and drafts is not None and not any(d > 0 for d in drafts):
        t.append(f"{b}:zero-drafts")
    if step["num_actual_tokens"] > step["query_start_loc"][-1]:
        t.append(f"{b}:token-pad")
    if any(a == b2 for a, b2 in zip(step["query_start_loc"][1:], step["query_start_loc"][:-1])):
        t.append(f"{b}:zero-length-rows")
    if step["seq_lens"] != step["seq_lens_cpu_upper_bound"]:
        t.append(f"{b}:async")
    if step["is_prefilling"] is not None and any(
        not p and q > cfg["num_spec"] + 1
        for p, q in zip(step["is_prefilling"], [y - x for x, y in zip(step["query_start_loc"], step["query_start_loc"][1:])])
    ):
        t.append(f"{b}:resumed-long")
    for field in (
        "checkpoint",
        "flashinfer_checkpoint_plan",
        "spec_token_start",
        "flashinfer_prefill_query_start_loc",
        "flashinfer_prefill_seq_order",
        "recoverssm_commit",
    ):
        if e.get(field) is not None:
            t.append(f"{b}:{field}")
    if e.get("chunk_indices") is not None:
        t.append(f"{b}:chunks")
    return t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("inputs", nargs="+")
    ap.add_argument("--per-tag", type=int, default=12)
    ap.add_argument("--max-bytes", type=int, default=60000)
    a = ap.parse_args()
    pool = []
    for path in a.inputs:
        for line in open(path):
            if line.strip() and len(line) <= a.max_bytes:
                pool.append((len(line), json.loads(line)))
    pool.sort(key=lambda x: x[0])
    by_tag = collections.defaultdict(list)
    for i, (_, case) in enumerate(pool):
        for tag in tags(case):
            by_tag[tag].append(i)
    chosen = set()
    for tag in sorted(by_tag):
        taken = sum(1 for i in by_tag[tag] if i in chosen)
        for i in by_tag[tag]:
            if taken >= a.per_tag:
                break
            if i not in chosen:
                chosen.add(i)
                taken += 1
    counts = collections.Counter()
    with open(a.out, "w") as out:
        for n, i in enumerate(sorted(chosen)):
            case = pool[i][1]
            t = tags(case)
            counts.update(t)
            case["name"] = f"vllm034/{case['builder']}/{n:04d}:" + ",".join(x.split(":", 1)[1] for x in t[1:])
            out.write(json.dumps(case, separators=(",", ":")) + "\n")
    print(f"{len(chosen)} cases")
    for tag, c in sorted(counts.items()):
        print(f"  {tag}: {c}")


if __name__ == "__main__":
    main()
