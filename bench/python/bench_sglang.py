#!/usr/bin/env python3
"""What SGLang 0.5.23's own linear-attention metadata path costs per step, on CPU or CUDA
tensors, and linmeta.sglang's replacement on the same steps in the same run (issue 42). Run with the
SGLang venv's python (scripts/sglang-env.sh) and linmeta importable (PYTHONPATH=<a build with
-DLINMETA_BUILD_PYTHON=ON for that python>/python, as scripts/sglang-diff.sh makes):

    ../venv-sglang/bin/python bench/python/bench_sglang.py [--iters 30] [--backend mamba2 ...]
        [--step decode ...] [--impl sglang --impl linmeta] [--json out.json] [--device cuda]

``--impl``: ``sglang`` (SGLang's class), ``linmeta`` (linmeta.sglang's subclass, where linmeta
serves the backend: Mamba2, GDN, KDA, Lightning; on CPU tensors its builder is the host target, the finish jobs
run inside the call), default both. Each row's ``x`` is SGLang's time over linmeta's.

Per (backend, step): SGLang's backend object is built once (tests/sglang/sglang_world.py:
the stand-ins of the harness, nothing inside SGLang's code replaced), the step's
ForwardBatch once; then the step's entry point (``init_forward_metadata``, or
``init_forward_metadata_out_graph`` for the replay step) is called ``--warmup`` times and
timed ``--iters`` times one call at a time (``time.perf_counter_ns``, the timer's own cost
subtracted); the table gives the median. One ATen thread (torch.set_num_threads(1)).

Then one more call runs under a counting mode (untimed) that reports, per step:

* ``ops``: ATen operators dispatched (every torch call that reaches ATen, in SGLang's code);
* ``syncs``: the calls that would make the host wait for the device if the batch's tensors
  were CUDA tensors, as SGLang would have them on a GPU:
  - scalar reads of a device tensor: ``aten._local_scalar_dense`` (``.item()``, ``int(t)``,
    ``bool(t)``, a slice bounded by a tensor, ``t[tensor_scalar]`` read) and
    ``aten.is_nonzero``;
  - operators whose output size depends on device data: ``nonzero``, ``masked_select``,
    indexing / index_put with a boolean mask, ``unique``, ``repeat_interleave`` without
    ``output_size``;
  - device -> host copies: ``Tensor.cpu()``, ``.tolist()``, ``.numpy()`` of a device
    tensor.
  A tensor counts as a host tensor (no sync) when it is one of the batch's host fields
  (``seq_lens_cpu``, the ``*_cpu`` lists), a ``.cpu()`` result, made by a factory without
  a device argument, or computed only from host tensors; a host tensor moved with
  ``.to(device)`` is a device tensor again. Host -> device copies are not counted.
  ``syncs`` is the sum; the parts are in ``--json``.

``--device cuda`` (or ``LINMETA_SGLANG_DEVICE=cuda``): the batch's device fields, the pool and
the graph buffers are CUDA tensors, as in SGLang's server (sglang_world.py; linmeta's builder
is then the cuda target). Each timed call starts with the GPU idle (``torch.cuda.synchronize()``
before it, outside the timing), so a sync costs its round trip, not a wait behind a forward.
Two more figures per row: ``done_us``, the call plus ``torch.cuda.synchronize()`` (until the
metadata is on the device), and ``cuda_syncs``, the synchronizing CUDA operations torch itself
reports in one more call under ``torch.cuda.set_sync_debug_mode("warn")`` (every ``.item()``,
``nonzero``, ``.cpu()`` / ``.tolist()`` of a device tensor, and every blocking host -> device
copy of pageable memory, which the modelled ``syncs`` do not count; a wait inside a native
extension that bypasses torch's CUDA calls is not seen).

Steps (tests/sglang/sglang_steps.py layout; request rows and mamba slots at random, fixed
seed):

* ``decode``      B = 256 decodes (DECODE);
* ``mixed``       4 prefills (prefix, new tokens) = (0, 512), (1024, 512), (0, 300),
                  (2048, 200) then 252 running decodes as 1-token extends (MIXED);
* ``track``       8 extends (prefix 0 or 1024, 300 new tokens), prefix-cache tracking on
                  every row, with the scheduler's host lists (EXTEND);
* ``track_dev``   the same without the host lists (device tensors only);
* ``replay``      decode B = 256 through init_forward_metadata_out_graph (graph replay,
                  after init_cuda_graph_state(256, 256));
* ``prefill_graph``  KDA only: refresh_prefill_graph_metadata of 16 extends (prefix 0 or
                  1024, 100 to 500 new tokens) on a bucket of 8,192 tokens (its tables
                  allocated once by init_prefill_graph_metadata, outside the timing);
* ``prefill_graph_track``  the same with the radix cache's extra buffer (track tables) and
                  prefix-cache tracking on every row that reaches the cache grid, with the
                  scheduler's host lists.

Chunk sizes: Mamba2 mamba_chunk_size 128, the others 64; mamba_cache_chunk_size 256.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import time
import warnings

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.normpath(os.path.join(HERE, "..", "..", "tests", "sglang")))
# --device must be known before sglang_world is imported (it hides the GPU for cpu).
for _i, _a in enumerate(sys.argv):
    if _a == "--device" and _i + 1 < len(sys.argv):
        os.environ["LINMETA_SGLANG_DEVICE"] = sys.argv[_i + 1]
    elif _a.startswith("--device="):
        os.environ["LINMETA_SGLANG_DEVICE"] = _a.split("=", 1)[1]

import sglang_world as sw  # noqa: E402  (first: environment and stand-ins)
import sglang_cases  # noqa: E402
import torch  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

BACKENDS = ("mamba2", "gdn", "kda", "short_conv", "lightning")
STEPS = ("decode", "mixed", "track", "track_dev", "replay", "prefill_graph", "prefill_graph_track")
#: Steps of one backend's own entry points.
OWN_STEPS = {"prefill_graph": "kda", "prefill_graph_track": "kda"}
PREFILL_BUCKET = 8192
POOL = 512


def make_step(backend: str, name: str, chunk: int, cache_chunk: int) -> dict:
    rng = random.Random(42)
    if name in ("decode", "replay"):
        rows = [(rng.randint(100, 3000), 1) for _ in range(256)]
        forward_mode = "DECODE"
    elif name == "mixed":
        rows = [(0, 512), (1024, 512), (0, 300), (2048, 200)]
        rows += [(1000 + i, 1) for i in range(252)]
        forward_mode = "MIXED"
    elif name.startswith("prefill_graph"):
        rows = [(rng.choice([0, 1024]), rng.randint(100, 500)) for _ in range(16)]
        forward_mode = "EXTEND"
    else:
        rows = [(rng.choice([0, 1024]), 300) for _ in range(8)]
        forward_mode = "EXTEND"
    n = len(rows)
    step = {
        "backend": backend,
        "mode": "replay" if name == "replay" else "bench",
        "forward_mode": forward_mode,
        "req_pool_indices": rng.sample(range(1, POOL), n),
        "mamba_slots": rng.sample(range(1, POOL + 1), n),
        "seq_lens": [p + e for p, e in rows],
    }
    if forward_mode != "DECODE":
        step["extend_prefix_lens"] = [p for p, _ in rows]
        step["extend_seq_lens"] = [e for _, e in rows]
    if name.startswith("track") or name == "prefill_graph_track":
        mask, seqlens = [], []
        for p, e in rows:  # ScheduleBatch's track seqlen for these rows
            aligned = p + (e // cache_chunk) * cache_chunk
            seqlens.append(p + e if p + (e // chunk) * chunk == aligned else aligned + 1)
            mask.append(True)
            if name == "prefill_graph_track" and e < cache_chunk:  # the scheduler's rule
                mask[-1], seqlens[-1] = False, -1
        step["track"] = {"mask": mask, "indices": rng.sample(range(1, POOL + 1), n),
                         "seqlens": seqlens, "cpu_lists": name != "track_dev"}
    if name == "replay":
        step["num_padding"] = 0
    return step


class Counter(TorchDispatchMode):
    """Counts ATen ops and the would-be device syncs (module docstring)."""

    DATA_SHAPE = {"nonzero", "masked_select", "_unique2", "unique_dim", "unique_consecutive",
                  "_unique"}

    def __init__(self, host_ids: set):
        super().__init__()
        self.host = host_ids
        self.ops = 0
        self.parts = {"scalar_reads": 0, "data_dependent_shapes": 0, "device_to_host": 0}

    def is_host(self, t) -> bool:
        return id(t) in self.host

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.ops += 1
        name = func._overloadpacket.__name__
        tensors = [a for a in _flat(args) + _flat(list(kwargs.values()))
                   if isinstance(a, torch.Tensor)]
        on_device = any(not self.is_host(t) for t in tensors)
        if on_device:
            if name in ("_local_scalar_dense", "is_nonzero"):
                self.parts["scalar_reads"] += 1
            elif name in self.DATA_SHAPE:
                self.parts["data_dependent_shapes"] += 1
            elif name == "repeat_interleave" and kwargs.get("output_size") is None and (
                    len(args) < 3 or args[-1] is None):
                self.parts["data_dependent_shapes"] += 1
            elif name in ("index", "index_put", "index_put_") and any(
                    isinstance(i, torch.Tensor) and i.dtype == torch.bool
                    for i in _flat(list(args[1:2]))):
                self.parts["data_dependent_shapes"] += 1
        out = func(*args, **kwargs)
        host_out = (not on_device) if tensors else kwargs.get("device") is None
        if host_out:
            for t in _flat([out]):
                if isinstance(t, torch.Tensor):
                    self.host.add(id(t))
        return out


def _flat(xs):
    out = []
    for x in xs:
        if isinstance(x, (list, tuple)):
            out.extend(_flat(x))
        else:
            out.append(x)
    return out


def count(call, fb):
    """One call under the counter, with Tensor.cpu / tolist / numpy / to tracked."""
    host = {id(fb.seq_lens_cpu)}
    counter = Counter(host)
    originals = {m: getattr(torch.Tensor, m) for m in ("cpu", "tolist", "numpy", "to")}

    def d2h(method):
        def wrapper(self, *a, **k):
            if not counter.is_host(self):
                counter.parts["device_to_host"] += 1
            out = originals[method](self, *a, **k)
            if method == "cpu":
                out = out.clone() if out is self else out
                host.add(id(out))
            return out
        return wrapper

    def to(self, *a, **k):
        dev = k.get("device") is not None or any(
            isinstance(x, (str, torch.device)) for x in a)
        out = originals["to"](self, *a, **k)
        if dev and counter.is_host(self):
            out = out.clone() if out is self else out
            host.discard(id(out))  # moved to the device
        return out

    for m in ("cpu", "tolist", "numpy"):
        setattr(torch.Tensor, m, d2h(m))
    torch.Tensor.to = to
    try:
        with counter:
            call()
    finally:
        for m, f in originals.items():
            setattr(torch.Tensor, m, f)
    return counter.ops, counter.parts


def cuda_syncs(call) -> int:
    """The synchronizing CUDA operations torch reports in one call (module docstring)."""
    torch.cuda.synchronize()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            call()
        finally:
            torch.cuda.set_sync_debug_mode("default")
    return sum("synchronizing CUDA operation" in str(w.message) for w in caught)


def timed(fn, iters: int, warmup: int, before=None):
    for _ in range(warmup):
        fn()
    empty = []
    for _ in range(iters):
        t0 = time.perf_counter_ns()
        t1 = time.perf_counter_ns()
        empty.append(t1 - t0)
    samples = []
    for _ in range(iters):
        if before is not None:
            before()
        t0 = time.perf_counter_ns()
        fn()
        samples.append(time.perf_counter_ns() - t0)
    return (statistics.median(samples) - statistics.median(empty)) / 1000.0


def linmeta_classes() -> dict:
    """linmeta.sglang's classes by backend (none when linmeta is not importable)."""
    try:
        from linmeta.sglang import gdn, kda, lightning, mamba2, short_conv
    except ImportError:
        return {}
    return {"mamba2": mamba2.LinmetaMamba2AttnBackend, "gdn": gdn.LinmetaGDNAttnBackend,
            "lightning": lightning.LinmetaLightningAttentionBackend,
            "kda": kda.LinmetaKDAAttnBackend,
            "short_conv": short_conv.LinmetaShortConvAttnBackend}


def bench_one(backend: str, name: str, iters: int, warmup: int, impl: str = "sglang") -> dict:
    chunk = 128 if backend == "mamba2" else 64
    cfg = sw.Config(backend=backend, chunk_size=chunk, cache_chunk_size=256, pool_size=POOL,
                    extra_buffer=name == "prefill_graph_track")
    saved = sw.BACKENDS[backend]
    if impl == "linmeta":
        sw.BACKENDS[backend] = linmeta_classes()[backend]
    try:
        world = sw.World(cfg)
    finally:
        sw.BACKENDS[backend] = saved
    try:
        if name == "replay":
            world.backend.init_cuda_graph_state(256, 256)
        step = make_step(backend, name, chunk, 256)
        fb = sglang_cases.forward_batch(step, world)
        call = lambda: sglang_cases.run_entry(step, world, fb)  # noqa: E731
        if name.startswith("prefill_graph"):  # the bucket's tables allocated once, untimed
            real = fb.extend_num_tokens
            fb.extend_num_tokens = PREFILL_BUCKET
            meta = world.backend.init_prefill_graph_metadata(fb)
            fb.extend_num_tokens = real
            call = lambda: world.backend.refresh_prefill_graph_metadata(meta, fb)  # noqa: E731
        cuda = {}
        if sw.DEVICE == "cuda":
            sync = torch.cuda.synchronize
            us = timed(call, iters, warmup, before=sync)
            cuda["done_us"] = timed(lambda: (call(), sync()), iters, 0, before=sync)
            cuda["cuda_syncs"] = cuda_syncs(call)
        else:
            us = timed(call, iters, warmup)
        ops, parts = count(call, fb)
    finally:
        world.close()
    return {"backend": backend, "step": name, "impl": impl, "us": us, "ops": ops,
            "syncs": sum(parts.values()), "sync_parts": parts, **cuda}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--iters", type=int, default=30)
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--backend", action="append", choices=BACKENDS)
    ap.add_argument("--step", action="append", choices=STEPS)
    ap.add_argument("--impl", action="append", choices=("sglang", "linmeta"))
    ap.add_argument("--json")
    ap.add_argument("--device", choices=("cpu", "cuda"), default=sw.DEVICE,
                    help="where the batch's device tensors live (default: cpu)")
    args = ap.parse_args(argv)
    rows = []
    served = linmeta_classes()
    for backend in args.backend or BACKENDS:
        for name in args.step or STEPS:
            if OWN_STEPS.get(name, backend) != backend:
                continue
            ours = {}
            for impl in args.impl or ("sglang", "linmeta"):
                if impl == "linmeta" and backend not in served:
                    continue
                r = bench_one(backend, name, args.iters, args.warmup, impl)
                ours[impl] = r
                rows.append(r)
                ratio = ""
                if impl == "linmeta" and "sglang" in ours and r["us"] > 0:
                    r["x"] = ours["sglang"]["us"] / r["us"]
                    ratio = f"  {r['x']:8.1f}x"
                extra = (f"  done {r['done_us']:10.1f} us  {r['cuda_syncs']:5} cuda syncs"
                         if "done_us" in r else "")
                print(f"{backend:10} {name:9} {impl:7} {r['us']:10.1f} us  {r['ops']:6} ops  "
                      f"{r['syncs']:5} syncs{ratio} {r['sync_parts']}{extra}", flush=True)
    meta = {"sglang": sw.SGLANG_VERSION, "torch": torch.__version__,
            "machine": platform.processor() or platform.machine(),
            "date": time.strftime("%Y-%m-%d", time.gmtime()), "iters": args.iters,
            "threads": torch.get_num_threads(), "device": sw.DEVICE,
            "python": platform.python_version()}
    if sw.DEVICE == "cuda":
        meta["gpu"] = torch.cuda.get_device_name()
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
