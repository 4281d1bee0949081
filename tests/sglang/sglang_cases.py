"""Runs SGLang 0.5.23's own linear-attention metadata code on steps of sglang_steps.py and
writes each step's inputs and every field of every resulting object as one JSON line
(format "sglang-case/1", docs/sglang-cases.md). Run with the SGLang venv's python
(scripts/sglang-env.sh, scripts/sglang-cases.sh):

    python sglang_cases.py fill STEPS.jsonl OUT.jsonl      # steps -> cases
    python sglang_cases.py run --backend mamba2 --count 2000 --seed 1 OUT.jsonl
    python sglang_cases.py check CASES.jsonl [--every N]   # rerun in fresh objects, compare
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time

import sglang_world as sw  # first: environment, parallel override, CPU predicates
import sglang_steps
import numpy as np
import torch
from sglang.srt.model_executor.forward_batch_info import (
    CaptureHiddenMode,
    ForwardBatch,
    ForwardMode,
)
from sglang.srt.speculative.eagle_info import EagleVerifyInput

FORMAT = "sglang-case/1"
# Graph buffers are filled with this before a graph entry runs: an element still holding it
# afterwards is one SGLang's entry did not write (it keeps what an earlier step left there).
UNWRITTEN = -7777

_WORLDS: dict = {}
_ACTIVE = [None]


def world_for(backend: str, config: str, graph: str, fresh: bool = False) -> sw.World:
    """The World of (backend, config, graph kind), its server args the installed ones."""
    key = (backend, config, graph)
    w = None if fresh else _WORLDS.get(key)
    if _ACTIVE[0] is not None and _ACTIVE[0] is not w:
        _ACTIVE[0].close()
        _ACTIVE[0] = None
    if w is None:
        cfg = sw.Config(backend=backend, pool_size=sglang_steps.POOL_SIZE,
                        max_context_len=sglang_steps.MAX_CONTEXT,
                        **sglang_steps.CONFIGS[config])
        w = sw.World(cfg)  # installs its server args
        max_bs = sglang_steps.GRAPH_MAX_BS
        tokens = max_bs * max(1, cfg.draft_tokens)
        if graph == "cuda":
            w.backend.init_cuda_graph_state(max_bs, tokens)
        elif graph == "cpu":
            w.backend.init_cpu_graph_state(max_bs, tokens)
        if not fresh:
            _WORLDS[key] = w
    elif _ACTIVE[0] is not w:
        w.reinstall()
    _ACTIVE[0] = w
    return w


def close_all(*more: dict) -> None:
    """Drops every world (these and `more`'s) before the interpreter exits: their backends
    hold native objects whose module may be torn down first."""
    import gc

    if _ACTIVE[0] is not None:
        _ACTIVE[0].close()
        _ACTIVE[0] = None
    for d in (_WORLDS, *more):
        d.clear()
    gc.collect()


def _i32(values):
    return torch.tensor(values, dtype=torch.int32)


def _i64(values):
    return torch.tensor(values, dtype=torch.int64)


def forward_batch(step: dict, world: sw.World) -> ForwardBatch:
    """The step's ForwardBatch, built by hand as ForwardBatch.init_new would fill it (its
    device fields on the harness's device), and its rows' mamba slots written into the
    pool's request -> slot map."""
    pool = world.pool
    mapping = pool.req_index_to_mamba_index_mapping
    mapping.zero_()
    reqs = step["req_pool_indices"]
    slots = step["mamba_slots"]
    mapping[_i64(reqs[: len(slots)])] = _i32(slots).to(mapping.device)
    seq_lens = step["seq_lens"]
    bs = len(reqs)
    mode = ForwardMode[step["forward_mode"]]
    ext = step.get("extend_seq_lens")
    if mode.is_target_verify():
        num_tokens = bs * step["spec"]["draft_token_num"]
    elif ext is not None:
        num_tokens = sum(ext)
    else:
        num_tokens = bs
    fb = ForwardBatch(
        forward_mode=mode,
        batch_size=bs,
        input_ids=torch.zeros(num_tokens, dtype=torch.int64),
        req_pool_indices=_i64(reqs),
        seq_lens=_i64(seq_lens),
        out_cache_loc=torch.zeros(num_tokens, dtype=torch.int64),
        seq_lens_sum=sum(seq_lens),
        seq_lens_cpu=_i64(seq_lens),
    )
    if ext is not None:
        fb.extend_seq_lens = _i32(ext)
        fb.extend_prefix_lens = _i32(step["extend_prefix_lens"])
        fb.extend_seq_lens_cpu = list(ext)
        fb.extend_prefix_lens_cpu = list(step["extend_prefix_lens"])
        start = [0]
        for n in ext[:-1]:
            start.append(start[-1] + n)
        fb.extend_start_loc = _i32(start)
        fb.extend_num_tokens = num_tokens
    if "original_forward_mode" in step:
        fb._original_forward_mode = ForwardMode[step["original_forward_mode"]]
        fb._original_batch_size = step["original_batch_size"]
    track = step.get("track")
    if track is not None:
        fb.mamba_track_mask = torch.tensor(track["mask"], dtype=torch.bool)
        fb.mamba_track_indices = _i64(track["indices"])
        if track["seqlens"] is not None:
            fb.mamba_track_seqlens = _i64(track["seqlens"])
        if track["cpu_lists"]:
            fb.mamba_prefill_track_mask_cpu = list(track["mask"])
            fb.mamba_track_seqlens_cpu = list(track["seqlens"])
    spec = step.get("spec")
    if spec is not None:
        k = spec["draft_token_num"]
        real = len(slots)
        rnt = spec.get("retrieve_next_token")
        rns = spec.get("retrieve_next_sibling")
        fb.spec_info = EagleVerifyInput(
            draft_token=torch.zeros(num_tokens, dtype=torch.int64),
            custom_mask=torch.ones(0, dtype=torch.bool),
            positions=torch.zeros(num_tokens, dtype=torch.int64),
            retrieve_index=torch.zeros((real, k), dtype=torch.int64),
            retrieve_next_token=_i64(rnt) if rnt is not None else None,
            retrieve_next_sibling=_i64(rns) if rns is not None else None,
            retrieve_cum_len=None,
            spec_steps=k - 1,
            topk=spec["topk"],
            draft_token_num=k,
            capture_hidden_mode=CaptureHiddenMode.NULL,
            seq_lens_sum=sum(seq_lens),
            seq_lens_cpu=_i64(seq_lens),
        )
    if "num_padding" in step and step["num_padding"] is not None:
        fb.num_padding = step["num_padding"]
    return world.device_batch(fb)


def run_entry(step: dict, world: sw.World, fb: ForwardBatch):
    """Calls the step's entry point of world.backend (what SGLang's runners call)."""
    b = world.backend
    mode = step["mode"]
    if mode == "capture":
        b.init_forward_metadata_out_graph(fb, in_capture=True)
    elif mode == "replay":
        b.init_forward_metadata_out_graph(fb)
    elif mode == "prefill_graph":
        # The bucket's tables are allocated (and filled) from a batch of the bucket's
        # token count, then refreshed from the step's batch, as a graph replay does.
        real_tokens = fb.extend_num_tokens
        fb.extend_num_tokens = step["bucket_tokens"]
        meta = b.init_prefill_graph_metadata(fb)
        fb.extend_num_tokens = real_tokens
        b.refresh_prefill_graph_metadata(meta, fb)
    elif mode == "cpu_capture":
        b.init_forward_metadata_capture_cpu_graph(
            fb.batch_size, fb.input_ids.shape[0], fb.req_pool_indices, fb.seq_lens,
            fb.out_cache_loc, None, fb.forward_mode, fb.spec_info)
    else:
        b.init_forward_metadata(fb)


def graph_kind(step: dict) -> str:
    """The graph state of the step's world: its graph entry's, else the step's graph_state
    (an eager step on a backend whose graph state is made), else none."""
    return {"replay": "cuda", "capture": "cuda", "cpu_capture": "cpu"}.get(
        step["mode"], step.get("graph_state", "none"))


# ---- encoding ---------------------------------------------------------------------------


def enc(value):
    """A JSON value for a field: tensors as {dtype, shape, data}, dataclasses and named
    tuples as {"type": name, "fields": {...}}."""
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.Tensor):
        return {"dtype": str(value.dtype).removeprefix("torch."), "shape": list(value.shape),
                "data": value.reshape(-1).tolist()}
    if isinstance(value, np.ndarray):
        return {"dtype": str(value.dtype), "shape": list(value.shape),
                "data": value.reshape(-1).tolist()}
    if isinstance(value, torch.dtype):
        return str(value).removeprefix("torch.")
    if isinstance(value, (list, tuple)) and not hasattr(value, "_fields"):
        return [enc(v) for v in value]
    if dataclasses.is_dataclass(value):
        return {"type": type(value).__name__,
                "fields": {f.name: enc(getattr(value, f.name)) for f in dataclasses.fields(value)}}
    if hasattr(value, "_fields"):  # NamedTuple
        return {"type": type(value).__name__,
                "fields": {f: enc(getattr(value, f)) for f in value._fields}}
    if hasattr(value, "__struct_fields__"):  # msgspec.Struct (KDA prefill-graph tables)
        return {"type": type(value).__name__,
                "fields": {f: enc(getattr(value, f)) for f in value.__struct_fields__}}
    raise TypeError(f"cannot encode {type(value).__name__}")


def _mark_unwritten(world: sw.World, bs: int) -> None:
    for name, buf in _static_buffers(world, bs).items():
        if not name.startswith("cached_"):  # constants made once by init_*_graph_state
            buf.fill_(UNWRITTEN)


def _static_buffers(world: sw.World, bs: int) -> dict:
    """The backend's graph buffers of batch size bs, by name (for the aliases map)."""
    b = world.backend
    out = {}
    for name in ("state_indices_list", "query_start_loc_list", "retrieve_next_token_list",
                 "retrieve_next_sibling_list", "retrieve_parent_token_list"):
        lst = getattr(b, name, None)
        if lst and len(lst) >= bs:
            out[f"{name}[{bs - 1}]"] = lst[bs - 1]
    if getattr(b, "mamba_track_indices_buf", None) is not None:
        out["mamba_track_indices_buf"] = b.mamba_track_indices_buf
    if getattr(b, "cached_cuda_graph_decode_query_start_loc", None) is not None:
        out["cached_cuda_graph_decode_query_start_loc"] = b.cached_cuda_graph_decode_query_start_loc
    if getattr(b, "cached_cuda_graph_verify_query_start_loc", None) is not None:
        out["cached_cuda_graph_verify_query_start_loc"] = b.cached_cuda_graph_verify_query_start_loc
    if getattr(b, "_cache_indices_buf", None) is not None:
        out["_cache_indices_buf"] = b._cache_indices_buf
    return out


def _aliases(fields: dict, buffers: dict) -> dict:
    """Which output tensors are views into a graph buffer: {field: [buffer, element offset]}."""
    out = {}
    for name, t in fields.items():
        if not isinstance(t, torch.Tensor) or t.numel() == 0:
            continue
        for bname, buf in buffers.items():
            if buf.numel() == 0 or t.untyped_storage().data_ptr() != buf.untyped_storage().data_ptr():
                continue
            out[name] = [bname, t.storage_offset() - buf.storage_offset()]
            break
    return out


def outputs(step: dict, world: sw.World, fb: ForwardBatch) -> dict:
    """Every field of every object the entry produced or changed."""
    b = world.backend
    if step["mode"] == "prefill_graph":  # forward_metadata is not this entry's
        return {"backend": {"prefill_graph_metadata": enc(b.prefill_graph_metadata)},
                "forward_batch": {"req_pool_indices": enc(fb.req_pool_indices),
                                  "mamba_track_indices": enc(fb.mamba_track_indices)}}
    md = b.forward_metadata
    out = {"forward_metadata": enc(md)}
    eager = step["mode"] not in ("replay", "capture", "cpu_capture")
    if eager and md.retrieve_parent_token is not None:
        # Eager tree verify: torch.empty_like(retrieve_next_token), filled by the verify
        # kernel later; only its shape and dtype are defined here.
        out["forward_metadata"]["fields"]["retrieve_parent_token"]["data"] = None
    tensors = {f.name: getattr(md, f.name) for f in dataclasses.fields(md)}
    mixed = getattr(md, "mixed_metadata", None)
    if mixed is not None:
        tensors.update({f"mixed_metadata.{f.name}": getattr(mixed, f.name)
                        for f in dataclasses.fields(mixed)})
    backend_state = {}
    if step["backend"] == "short_conv":
        scm = b.conv_state_metadata(0, fb)
        backend_state["conv_state_metadata"] = {
            "type": type(scm).__name__,
            "fields": {f: enc(getattr(scm, f)) for f in scm._fields if f != "layer_cache"},
        }
        tensors.update({f"conv_state_metadata.{f}": getattr(scm, f) for f in scm._fields
                        if f != "layer_cache"})
    if step["backend"] == "gdn":
        backend_state["mis_metadata"] = enc(b.mis_metadata)
        backend_state["_use_strided_target_verify_qkv"] = b._use_strided_target_verify_qkv
    if step["backend"] == "kda":
        backend_state["prefill_graph_metadata"] = enc(b.prefill_graph_metadata)
    if backend_state:
        out["backend"] = backend_state
    # Side effects on the batch: tracking destinations translated in place, padded rows of
    # req_pool_indices zeroed on replay.
    out["forward_batch"] = {
        "req_pool_indices": enc(fb.req_pool_indices),
        "mamba_track_indices": enc(fb.mamba_track_indices),
    }
    if graph_kind(step) != "none":
        bs = fb.batch_size
        out["aliases"] = _aliases(tensors, _static_buffers(world, bs))
    return out


def step_inputs(step: dict) -> dict:
    return {k: v for k, v in step.items() if k not in ("backend", "mode", "config", "seed", "index")}


def run_step(step: dict, fresh: bool = False) -> dict:
    """The case of one step: SGLang's outputs, or the exception it raised."""
    world = world_for(step["backend"], step["config"], graph_kind(step), fresh=fresh)
    fb = forward_batch(step, world)
    case = {
        "format": FORMAT,
        "sglang": sw.SGLANG_VERSION,
        "name": f"sglang0523_{step['backend']}_{step['mode']}_s{step['seed']}_{step['index']}",
        "backend": step["backend"],
        "class": type(world.backend).__name__,
        "mode": step["mode"],
        "config": world.cfg.as_json() | {"name": step["config"],
                                         "graph": graph_kind(step),
                                         "graph_max_bs": sglang_steps.GRAPH_MAX_BS},
        "input": step_inputs(step),
    }
    if graph_kind(step) != "none":
        _mark_unwritten(world, fb.batch_size)
    try:
        run_entry(step, world, fb)
    except Exception as e:  # noqa: BLE001 - a raise is SGLang's answer for this step
        case["raises"] = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        return case
    case["output"] = outputs(step, world, fb)
    return case


def dumps(case: dict) -> str:
    return json.dumps(case, separators=(",", ":"))


def cmd_fill(args) -> int:
    n = raised = 0
    with open(args.steps) as src, open(args.out, "w") as dst:
        for line in src:
            case = run_step(json.loads(line))
            raised += "raises" in case
            dst.write(dumps(case) + "\n")
            n += 1
    print(f"{n} cases ({raised} raised)", file=sys.stderr)
    return 0


def cmd_run(args) -> int:
    modes = args.mode or list(sglang_steps.BACKEND_MODES[args.backend])
    counts: dict = {}
    t0 = time.time()
    with open(args.out, "w") as dst:
        for step in sglang_steps.generate(args.backend, modes, args.count, args.seed):
            case = run_step(step)
            key = (step["mode"], "raised" if "raises" in case else "ok")
            counts[key] = counts.get(key, 0) + 1
            dst.write(dumps(case) + "\n")
    took = time.time() - t0
    summary = ", ".join(f"{m} {s} {c}" for (m, s), c in sorted(counts.items()))
    print(f"{args.backend}: {args.count} steps in {took:.1f} s: {summary}", file=sys.stderr)
    return 0


def cmd_check(args) -> int:
    """Re-reads CASES and reruns every N-th step through fresh objects (a new pool, runner
    and backend): the JSON must be identical."""
    n = same = 0
    with open(args.cases) as src:
        for i, line in enumerate(src):
            case = json.loads(line)
            if i % args.every:
                continue
            step = dict(case["input"], backend=case["backend"], mode=case["mode"],
                        config=case["config"]["name"])
            step["seed"], step["index"] = case["name"].rsplit("_s", 1)[1].split("_")
            step["seed"], step["index"] = int(step["seed"]), int(step["index"])
            again = json.loads(dumps(run_step(step, fresh=True)))
            n += 1
            if again == case:
                same += 1
            elif args.verbose:
                print(f"differs: {case['name']}", file=sys.stderr)
    print(f"check: {same}/{n} identical through fresh objects", file=sys.stderr)
    return 0 if same == n else 1


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    p = sub.add_parser("fill")
    p.add_argument("steps")
    p.add_argument("out")
    p.set_defaults(func=cmd_fill)
    p = sub.add_parser("run")
    p.add_argument("--backend", required=True, choices=sorted(sglang_steps.BACKEND_MODES))
    p.add_argument("--mode", action="append")
    p.add_argument("--count", type=int, default=2000)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("out")
    p.set_defaults(func=cmd_run)
    p = sub.add_parser("check")
    p.add_argument("cases")
    p.add_argument("--every", type=int, default=1)
    p.add_argument("--verbose", action="store_true")
    p.set_defaults(func=cmd_check)
    args = ap.parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
