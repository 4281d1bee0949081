"""Random SGLang scheduler steps for the linear-attention metadata harness (no torch, no
SGLang: plain dicts, the "step" object of docs/sglang-cases.md).

A step is what SGLang's scheduler hands a MambaAttnBackendBase subclass: the forward mode,
the rows (request-pool row, mamba slot the scheduler allocated for it, lengths), prefix-cache
tracking inputs, speculative inputs and, for graph entries, the padded bucket. Rows follow
SGLang's layout: no reordering; a mixed step is the prefills first, then the running decodes
as 1-token extends (ScheduleBatch.mix_with_running); graph padding rows are request row 0
with seq_len 1 (ForwardBatch._pad_inputs_to_size, the fill value of the Mamba backends).

    python sglang_steps.py --backend mamba2 --mode mixed --count 10 --seed 1
"""

from __future__ import annotations

import argparse
import json
import random
import sys

# Engine configurations a step runs under (sglang_world.Config fields).
CONFIGS = {
    "plain": {"chunk_size": 16, "cache_chunk_size": 64, "topk": 0, "draft_tokens": 0},
    "plain8": {"chunk_size": 8, "cache_chunk_size": 32, "topk": 0, "draft_tokens": 0},
    "chain": {"chunk_size": 16, "cache_chunk_size": 64, "topk": 1, "draft_tokens": 4},
    "tree": {"chunk_size": 16, "cache_chunk_size": 64, "topk": 2, "draft_tokens": 4},
    # With the radix cache's extra mamba buffer: KDA's prefill-graph buckets with track tables.
    "plain_xb": {"chunk_size": 16, "cache_chunk_size": 64, "topk": 0, "draft_tokens": 0,
                 "extra_buffer": True},
    "plain8_xb": {"chunk_size": 8, "cache_chunk_size": 32, "topk": 0, "draft_tokens": 0,
                  "extra_buffer": True},
}
POOL_SIZE = 320  # request rows 1..319 (row 0 pads), mamba slots 1..320
GRAPH_MAX_BS = 48  # init_cuda_graph_state / init_cpu_graph_state's max_bs
MAX_CONTEXT = 4096

# mode -> the entries it runs through ("eager": init_forward_metadata; "capture" /
# "replay": init_forward_metadata_out_graph with in_capture True / False after
# init_cuda_graph_state; "cpu_capture": init_forward_metadata_capture_cpu_graph after
# init_cpu_graph_state).
MODES = (
    "decode",
    "extend",
    "mixed",
    "verify",
    "draft_extend",
    "dp_decode",
    "replay",
    "capture",
    "cpu_capture",
)
BACKEND_MODES = {
    "mamba2": MODES,
    "gdn": MODES,
    # prefill_graph: KDA's breakable prefill-graph tables (init_prefill_graph_metadata on
    # a bucket of bucket_tokens tokens, then refresh_prefill_graph_metadata with the step).
    "kda": MODES + ("prefill_graph",),
    "short_conv": MODES,
    # seg_la verifies a draft tree as a chain: the backend refuses topk > 1.
    "lightning": MODES,
}
NO_TREE = {"lightning"}


def _rows(rng: random.Random, n: int):
    """n distinct request-pool rows and n distinct mamba slots (the scheduler's allocation)."""
    reqs = rng.sample(range(1, POOL_SIZE), n)
    slots = rng.sample(range(1, POOL_SIZE + 1), n)
    return reqs, slots


def _batch_size(rng: random.Random, top: int) -> int:
    r = rng.random()
    if r < 0.15:
        return 1
    if r < 0.75:
        return rng.randint(1, min(16, top))
    return rng.randint(1, top)


def _extend_len(rng: random.Random, chunk: int) -> int:
    r = rng.random()
    if r < 0.2:
        return chunk * rng.randint(1, 12)  # chunk-aligned
    if r < 0.35:
        return rng.randint(1, 3)
    return rng.randint(1, 400)


def _prefix_len(rng: random.Random, chunk: int) -> int:
    r = rng.random()
    if r < 0.4:
        return 0
    if r < 0.6:
        return chunk * rng.randint(1, 40)
    return rng.randint(1, 1500)


def _prefill_track(rng, prefix: int, extend: int, chunk: int, cache_chunk: int):
    """(mask, seqlen) as ScheduleBatch._mamba_radix_cache_v2_req_prepare_for_extend sets
    them (no DCP; the checkpoint grid is the cache chunk size), with its branching point
    taken at random."""
    mask = extend >= cache_chunk
    if not mask:
        return False, -1
    aligned = prefix + (extend // cache_chunk) * cache_chunk
    seqlen = prefix + extend
    if prefix + (extend // chunk) * chunk != aligned:
        seqlen = aligned + 1  # _force_track_h
    if rng.random() < 0.2:
        k = rng.randint(1, extend // cache_chunk)
        branch = prefix + k * cache_chunk
        if prefix < branch < seqlen:
            seqlen = branch + 1
    return True, seqlen


def _track_block(rng, rows, cfg, tracked: bool):
    """Tracking inputs for extend rows [(prefix, extend)], or None when tracking is off."""
    if not tracked:
        return None
    mask, seqlens, dst = [], [], []
    for prefix, extend in rows:
        m, s = _prefill_track(rng, prefix, extend, cfg["chunk_size"], cfg["cache_chunk_size"])
        mask.append(m)
        seqlens.append(s)
        dst.append(rng.randint(1, POOL_SIZE) if m or rng.random() < 0.5 else -1)
    return {"mask": mask, "indices": dst, "seqlens": seqlens, "cpu_lists": rng.random() < 0.5}


def make_step(backend: str, mode: str, rng: random.Random) -> dict:
    spec_modes = ("verify", "draft_extend")
    # SGLang's CPU graph state has no verify buffers: cpu_capture is decode only.
    if mode in spec_modes or (mode in ("replay", "capture") and rng.random() < 0.4):
        names = ["chain"] if backend in NO_TREE else ["chain", "tree"]
        config = rng.choice(names)
    else:
        config = rng.choice(["plain", "plain8"])
    cfg = CONFIGS[config]
    k = cfg["draft_tokens"]
    step = {"backend": backend, "mode": mode, "config": config}
    graph = mode in ("replay", "capture", "cpu_capture")
    if graph:
        bs = _batch_size(rng, GRAPH_MAX_BS)
        real = bs if mode != "replay" or rng.random() < 0.4 else rng.randint(1, bs)
        verify = k > 0
    else:
        top = 96 if mode != "mixed" else 128
        bs = real = _batch_size(rng, top)
        verify = mode == "verify"
    reqs, slots = _rows(rng, real)
    step["forward_mode"] = (
        "TARGET_VERIFY" if verify else
        {"decode": "DECODE", "extend": "EXTEND", "mixed": "MIXED",
         "draft_extend": "DRAFT_EXTEND_V2", "dp_decode": "EXTEND"}.get(mode, "DECODE")
    )
    rows = []  # (prefix, extend) per real row
    if mode == "extend":
        rows = [(_prefix_len(rng, cfg["chunk_size"]), _extend_len(rng, cfg["chunk_size"]))
                for _ in range(real)]
    elif mode == "prefill_graph":
        rows = [(_prefix_len(rng, cfg["chunk_size"]), _extend_len(rng, cfg["chunk_size"]))
                for _ in range(min(real, 24))]
        real = bs = len(rows)
        reqs, slots = reqs[:real], slots[:real]
        step["forward_mode"] = "EXTEND"
        if rng.random() < 0.5:  # a bucket with track tables (the extra buffer on)
            config = step["config"] = config + "_xb"
    elif mode == "mixed":
        prefills = rng.randint(1, min(4, real))
        rows = [(_prefix_len(rng, cfg["chunk_size"]), _extend_len(rng, cfg["chunk_size"]))
                for _ in range(prefills)]
        rows += [(rng.randint(1, 3000), 1) for _ in range(real - prefills)]
        step["num_running_decodes"] = real - prefills
    elif mode == "draft_extend":
        rows = [(rng.randint(1, 3000), rng.randint(1, k)) for _ in range(real)]
    elif mode == "dp_decode":
        rows = [(rng.randint(1, 3000), 1) for _ in range(real)]
    elif verify:
        rows = [(rng.randint(1, 3000), k) for _ in range(real)]
    else:  # decode
        rows = [(rng.randint(1, 3000), 1) for _ in range(real)]
    pad = bs - real
    step["req_pool_indices"] = reqs + [0] * pad
    step["mamba_slots"] = slots  # written into req_index_to_mamba_index_mapping[reqs]
    step["seq_lens"] = [p + e for p, e in rows] + [1] * pad
    if mode == "prefill_graph":
        total = sum(e for _, e in rows)
        step["bucket_tokens"] = total + rng.choice([0, 0, rng.randint(1, 512)])
    if mode in ("extend", "mixed", "draft_extend", "dp_decode", "prefill_graph"):
        step["extend_prefix_lens"] = [p for p, _ in rows]
        step["extend_seq_lens"] = [e for _, e in rows]
    if mode == "dp_decode":
        # prepare_mlp_sync_batch: a decode batch relabelled as 1-token extends, padded.
        extra = rng.choice([0, 0, 1, 3])
        step["original_forward_mode"] = "DECODE"
        step["original_batch_size"] = real
        step["req_pool_indices"] += [0] * extra
        step["seq_lens"] += [1] * extra
        step["extend_prefix_lens"] += [0] * extra
        step["extend_seq_lens"] += [1] * extra
    if verify:
        step["spec"] = {"draft_token_num": k, "topk": cfg["topk"]}
        if cfg["topk"] > 1:
            step["spec"]["retrieve_next_token"] = [
                [rng.randint(-1, k - 1) for _ in range(k)] for _ in range(real)]
            step["spec"]["retrieve_next_sibling"] = [
                [rng.randint(-1, k - 1) for _ in range(k)] for _ in range(real)]
    # Prefix-cache tracking.
    if mode == "prefill_graph" and CONFIGS[config].get("extra_buffer") and rng.random() < 0.7:
        step["track"] = _track_block(rng, rows, cfg, True)
    elif mode in ("extend", "mixed") and rng.random() < 0.6:
        tracked_rows = rows if mode == "extend" else rows[: len(rows) - step["num_running_decodes"]]
        track = _track_block(rng, tracked_rows, cfg, True)
        if mode == "mixed":  # ScheduleBatch.mix_with_running: decode tails untracked
            n = step["num_running_decodes"]
            track["mask"] += [False] * n
            track["indices"] += [-1] * n
            track["seqlens"] += [-1] * n
        step["track"] = track
    elif mode in ("decode", "replay") and not verify and rng.random() < 0.4:
        step["track"] = {
            "mask": [rng.random() < 0.3 for _ in range(bs)],
            "indices": [rng.randint(1, POOL_SIZE) for _ in range(bs)],
            "seqlens": None,
            "cpu_lists": False,
        }
    if mode == "replay":
        r = rng.random()
        step["num_padding"] = None if r < 0.3 else pad  # None: counted from seq_lens_cpu == 1
    if backend == "short_conv" and not graph:
        # A server's eager steps run on a backend with its graph state: ShortConv's eager
        # entry then writes _cache_indices_buf when the batch fits (GRAPH_MAX_BS rows).
        step["graph_state"] = rng.choice(["none", "cuda", "cpu"])
    return step


def generate(backend: str, modes, count: int, seed: int):
    rng = random.Random(seed)
    for i in range(count):
        mode = modes[i % len(modes)]
        step = make_step(backend, mode, rng)
        step["seed"] = seed
        step["index"] = i
        yield step


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--backend", required=True, choices=sorted(BACKEND_MODES))
    ap.add_argument("--mode", action="append", help="repeatable; default: every mode")
    ap.add_argument("--count", type=int, default=100)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    modes = args.mode or list(BACKEND_MODES[args.backend])
    for step in generate(args.backend, modes, args.count, args.seed):
        sys.stdout.write(json.dumps(step, separators=(",", ":")) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
