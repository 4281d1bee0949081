"""Picks a small, category-covering sample of filled cases for tests/data/vllm034.jsonl
(GDN / KDA), tests/data/vllm034_mamba.jsonl (the Mamba family) or tests/data/vllm034_inkling.jsonl
(Inkling's short-conv builder).

  select_cases.py OUT.jsonl FILLED.jsonl... [--per-tag N] [--max-bytes B] [--prefix P]
  select_cases.py --count FILLED.jsonl...     (tag counts of the input only)

Every case is tagged by what its expected output shows (builder, path, cache mode, prefill
backend, capture, groups, RecoverSSM, checkpoints, zero drafts, the new 0.34 fields...; for
the Mamba family ``mamba_tags``: the reclassified rows, FULL-graph staging, Mamba2 chunks and
checkpoints...); for each tag the N smallest cases not yet taken are kept, so every category
present in the input is covered. Prints the tag counts of the sample.
"""

from __future__ import annotations

import argparse
import collections
import json


MAMBA = ("mamba2", "mamba1", "short_conv", "linear", "bailing_linear", "ple_short_conv")


def _query_lens(step: dict) -> list[int]:
    qsl = step["query_start_loc"]
    return [b - a for a, b in zip(qsl, qsl[1:])]


def mamba_tags(case: dict) -> list[str]:
    """Categories of a Mamba-family case (the Mamba case format); a ReplaySSM case's are its
    own ("mamba2/replayssm:..."), plus whether its scratch views are set and align mode's
    seq_lens."""
    t = _mamba_tags(case)
    if not case["config"].get("use_replayssm"):
        return t
    b = case["builder"]
    t = [f"{b}/replayssm{x[len(b):]}" for x in t]
    e = case.get("expected", {})
    if e.get("replayssm_rows") is not None:
        t.append(f"{b}/replayssm:scratch" + (":seq-lens" if e.get("replayssm_seq_lens_d") else ""))
    return t


def _mamba_tags(case: dict) -> list[str]:
    cfg, step, b = case["config"], case["step"], case["builder"]
    k = cfg["num_spec"]
    t = [b, f"{b}:{cfg['mamba_cache_mode']}", f"{b}:{'k0' if k == 0 else 'spec-config'}"]
    if case["mode"] == "capture":
        t.append(f"{b}:capture")
    if "groups" in step:
        t.append(f"{b}:groups")
    if cfg["full_cuda_graph"]:
        t.append(f"{b}:full-cg")
    if b == "mamba2":
        t.append(f"{b}:chunk{cfg['chunk_size']}")
        t.append(f"{b}:{'ckpt-declared' if cfg.get('prefill_checkpoint_alignment') else 'ckpt-default'}")
    if "error" in case:
        return t + [f"{b}:error"]
    e = case["expected"]
    q = _query_lens(step)
    pre, dec = e["num_prefills"], e["num_decodes"]
    t.append(f"{b}:" + ("mixed" if pre and dec else "prefill" if pre else "decode_only"))
    prefilling = step["is_prefilling"] or [False] * len(q)
    drafts = step["num_decode_draft_tokens_cpu"]
    ub = step["seq_lens_cpu_upper_bound"]
    if k and any(x > 1 for x in q[:dec]):
        t.append(f"{b}:spec-rows")
    if k and drafts is not None and dec and all(d <= 0 for d in drafts[:dec]):
        t.append(f"{b}:zero-drafts")
    if k and drafts is None and step["num_accepted_tokens"] is not None:
        t.append(f"{b}:accepted-without-drafts")
    if step["num_actual_tokens"] > step["query_start_loc"][-1]:
        t.append(f"{b}:token-pad")
    if 0 in q:
        t.append(f"{b}:zero-length-rows")
    if step["seq_lens"] != ub:
        t.append(f"{b}:async")
    for i, (p, n) in enumerate(zip(prefilling, q)):
        if not p and n > k + 1:
            t.append(f"{b}:resumed-long")
        if p and n == 1 and ub[i] > 1:
            t.append(f"{b}:one-token-prefill")
        if p and n == 1 and ub[i] == 1:
            t.append(f"{b}:first-chunk-one-token")
        if p and drafts is not None and drafts[i] >= 0 and n == drafts[i] + 1 and ub[i] > n:
            t.append(f"{b}:prompt-tail")
        if p and 1 < n <= k + 1:
            t.append(f"{b}:short-extend")
        if p and n > 1024:
            t.append(f"{b}:long-prefill")
    init = e.get("has_initial_states_p")
    if init:
        t.append(f"{b}:" + ("init" if all(init) else "noinit" if not any(init) else "mixed-init"))
    limit = min(cfg["max_num_seqs"], cfg["max_cudagraph_capture_size"])
    if b != "linear" and cfg["full_cuda_graph"] and not pre and dec <= limit:
        t.append(f"{b}:staged")
    if b != "linear" and k and not dec and e.get("num_accepted_tokens") is not None:
        t.append(f"{b}:accepted-passthrough")
    if e.get("cu_chunk_seqlen_p") is not None and len(e["cu_chunk_seqlen_p"]) > pre + 8:
        t.append(f"{b}:many-chunks")
    if e.get("checkpoint_meta") is not None or e.get("checkpoint") is not None:
        t.append(f"{b}:checkpoint")
    if b == "ple_short_conv":  # P1-P3: which path, and FULL-graph staging
        path = ("nospec" if e["spec_sequence_masks"] is None
                else "pure-spec" if e["non_spec_query_start_loc"] is None else "mixed-spec")
        t.append(f"{b}:{path}")
        if path == "pure-spec" and len(e["spec_state_indices_tensor"]) > e["num_spec_decodes"]:
            t.append(f"{b}:staged-spec")
    return sorted(set(t), key=t.index)


def inkling_tags(case: dict) -> list[str]:
    """Categories of an Inkling case (I1, I2): padding, empty rows, capture, groups, the
    token capacity and its edge."""
    cfg, step, b = case["config"], case["step"], case["builder"]
    t = [b, f"{b}:k{'0' if cfg['num_spec'] == 0 else '>0'}", f"{b}:cap{cfg['max_num_batched_tokens']}"]
    if case["mode"] == "capture":
        t.append(f"{b}:capture")
    if "groups" in step:
        t.append(f"{b}:groups")
    if "error" in case:
        return t + [f"{b}:error"]
    q = _query_lens(step)
    pad = step["num_actual_tokens"] - step["query_start_loc"][-1]
    if pad:
        t.append(f"{b}:token-pad" + ("-long" if pad > 16 else ""))
    if 0 in q:
        t.append(f"{b}:zero-length-rows")
    if q and q[0] == 0:
        t.append(f"{b}:leading-empty-row")
    if step["num_actual_tokens"] == cfg["max_num_batched_tokens"]:
        t.append(f"{b}:at-capacity")
    if len(q) == 1:
        t.append(f"{b}:one-row")
    return t


def tags(case: dict) -> list[str]:
    cfg, step = case["config"], case["step"]
    b = case["builder"]
    if b in MAMBA:
        return mamba_tags(case)
    if b == "inkling":
        return inkling_tags(case)
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
    ap.add_argument("out", nargs="?")
    ap.add_argument("inputs", nargs="*")
    ap.add_argument("--per-tag", type=int, default=12)
    ap.add_argument("--max-bytes", type=int, default=60000)
    ap.add_argument("--prefix", default="vllm034")
    ap.add_argument("--count", action="store_true", help="print the tag counts of the inputs")
    a = ap.parse_args()
    if a.count:
        counts = collections.Counter()
        for path in [a.out] + a.inputs:
            for line in open(path):
                if line.strip():
                    counts.update(tags(json.loads(line)))
        for tag, c in sorted(counts.items()):
            print(f"  {tag}: {c}")
        return
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
            case["name"] = f"{a.prefix}/{case['builder']}/{n:04d}:" + ",".join(x.split(":", 1)[1] for x in t[1:])
            out.write(json.dumps(case, separators=(",", ":")) + "\n")
    print(f"{len(chosen)} cases")
    for tag, c in sorted(counts.items()):
        print(f"  {tag}: {c}")


if __name__ == "__main__":
    main()
