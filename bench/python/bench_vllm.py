#!/usr/bin/env python3
"""What a vLLM step's GDN / KDA metadata costs from Python: linmeta.vllm's drop-in builders
against the native build they wrap and against the seed builder (vLLM's Python builder, run
through the seed oracle's stand-in ``vllm`` with its tensors on the same device; the oracle is
$LINMETA_ORACLE_DIR, by default ../shared/oracle beside the repository). Without the oracle the
``seed`` columns are left out (a line says so) and linmeta.vllm runs on stand-in config objects.

Columns, per scheduler step (all G KV-cache groups), host time in microseconds, each the
median over single timed steps (timer overhead subtracted; see ``timed``), less the bench's
own loop over the groups (``loop``):

* ``seed``      the seed builders, one object per group, called as vLLM's runner calls them
                (with seed 001's per-step cache), every field read;
* ``adapter``   linmeta.vllm's builders, called the same way, every field read as a torch
                tensor (what an engine gets; fields are read with one operator.attrgetter
                over their names, as attribute loads in an engine's code, in every column);
* ``native``    linmeta's own host time of the same builds (plan + pack + enqueue + the
                returned Metadata, the sum of ``last_timing``'s phases over the G builder
                objects' native builders), the floor the adapter wraps;
* ``py-api``    linmeta's generic Python API (``build_groups`` + every field exported as a
                torch tensor), for reference;
* ``adapter - native``: what the Python layer adds (the median over the timed steps of
                each step's adapter time minus that step's own native time), of which
* ``engine``    the native engines' calls alone (``Engine.build`` of every group's builder
                object, as ``build()`` makes them: the native build, reading
                CommonAttentionMetadata, importing the tensors, the result dicts), and
* ``read``      reading every field of the G returned objects;
                the rest (adapter - engine - read) is ``build()`` above them (the Python
                method and the dataclass);
* ``loop``      the bench's own loop: the function that walks the G (builder, metadata)
                pairs, timed with the calls and reads left out (a Python function call, a
                zip and G iterations: not the builder's cost, which an engine's own loop
                has alike). It is subtracted from ``seed``, ``adapter`` and
                ``adapter - native``, as the timer's own overhead is from every column.

The headline step: 256 spec-decode rows, k = 3, align mode, FULL CUDA graphs (GDN), G = 1
and G = 4; plus the same for KDA and a mixed prefill step. Runs on the CPU (host target)
and on a GPU (``--device cuda``: CUDA tensors, the cuda target; the GPU is synchronised
between timing blocks, never inside one).

    python bench/python/bench_vllm.py [--device cuda] [--iters 2000] [--pin-cpu N] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import operator
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
ORACLE = os.environ.get(
    "LINMETA_ORACLE_DIR", os.path.normpath(os.path.join(REPO, "..", "shared", "oracle"))
)


def load():
    """(seeds, runner, linmeta.vllm); seeds and runner are None without the seed oracle."""
    if not os.path.isfile(os.path.join(ORACLE, "seedload.py")):
        print(f"seed column left out: the seed oracle is not at {ORACLE} (LINMETA_ORACLE_DIR "
              "names another place)")
        import linmeta.vllm as lv

        return None, None, lv
    sys.path.insert(0, ORACLE)
    import runner  # noqa: E402
    import seedload  # noqa: E402

    seeds = seedload.load_seeds()
    # Seed 000's Triton stand-ins build their offsets on the CPU: make the aligned gather
    # device-aware so the KDA seed runs with CUDA tensors too (same semantics).
    def aligned(block_table, seq_lens, kv_cache_spec, mode):
        if mode in ("all", "none"):
            return block_table
        start = ((seq_lens - 1) // kv_cache_spec.block_size).clamp_(min=0)
        offsets = torch.arange(
            1 + kv_cache_spec.num_speculative_blocks, dtype=torch.int32, device=seq_lens.device
        )
        return torch.gather(block_table, 1, (start[:, None] + offsets).to(torch.int64))

    seeds.kda._mamba_get_block_table_tensor = aligned
    import linmeta.vllm as lv  # after the stand-in: same base classes and dataclasses

    return seeds, runner, lv


def workload(name, g, device, rng):
    """(config dict as in the case files, CommonAttentionMetadata per group, accepted, drafts)."""
    k = 3
    rows = 256
    kind = "kda" if name.startswith("kda") else "gdn"
    mixed = "mixed" in name
    config = {
        "num_spec": k,
        "max_num_seqs": 256,
        "full_cuda_graph": True,
        "max_cudagraph_capture_size": None,
        "mamba_cache_mode": "align",
        "block_size": 64,
        "num_speculative_blocks": k,
        "use_recoverssm": False,
        "num_prefill_checkpoint_blocks": 0,
    }
    ql, drafts, prefilling = [], [], []
    for r in range(rows):
        if mixed and r >= rows - 16:
            ql.append(int(rng.integers(100, 400)))
            drafts.append(-1)
            prefilling.append(True)
        else:
            ql.append(k + 1)
            drafts.append(k)
            prefilling.append(False)
    qsl = [0]
    for q in ql:
        qsl.append(qsl[-1] + q)
    seq = [int(rng.integers(500, 5000)) + q for q in ql]
    width = max(seq) // 64 + k + 2
    step = {
        "query_start_loc": qsl,
        "seq_lens": seq,
        "seq_lens_cpu_upper_bound": seq,
        "is_prefilling": prefilling,
        "num_actual_tokens": qsl[-1],
        "block_table": rng.integers(1, 1 << 20, size=(rows, width)).tolist(),
        "num_decode_draft_tokens_cpu": drafts,
        "num_accepted_tokens": [int(rng.integers(1, q + 1)) if q == k + 1 else 1 for q in ql],
    }
    return kind, config, step


def standin_inputs(config, step, tables, device):
    """make_inputs' objects without the oracle: what linmeta.vllm reads of them
    (bench_vllm_builders.py's stand-ins, plus KDA's RecoverSSM switch). The groups share every
    step tensor but the block table, as vLLM's runner hands them."""
    import types

    import bench_vllm_builders as bvb

    base = bvb.common_metadata(dict(step, block_table=tables[0]), device, with_vllm=False)
    ms = [base] + [
        types.SimpleNamespace(**dict(vars(base), block_table_tensor=torch.tensor(
            t, dtype=torch.int32, device=device))) for t in tables[1:]
    ]
    objs = []
    for g in range(len(tables)):
        spec, vc = bvb.standin_objects(config, 8192)
        vc.cache_config.use_kda_recoverssm = bool(config["use_recoverssm"])
        objs.append((spec, [f"model.layers.{g}.linear_attn"], vc))
    return ms, objs


def make_inputs(runner, kind, config, step, groups, device, rng):
    i32 = dict(dtype=torch.int32)
    tables = [step["block_table"]] + [
        rng.integers(1, 1 << 20, size=(len(step["seq_lens"]), len(step["block_table"][0]))).tolist()
        for _ in range(groups - 1)
    ]
    accepted = torch.tensor(step["num_accepted_tokens"], device=device, **i32)
    drafts = torch.tensor(step["num_decode_draft_tokens_cpu"], **i32)
    if runner is None:
        ms, objs = standin_inputs(config, step, tables, device)
        return ms, accepted, drafts, objs
    base = runner.make_common_metadata(step, tables[0])
    base = base.replace(
        query_start_loc=base.query_start_loc.to(device),
        seq_lens=base.seq_lens.to(device),
        block_table_tensor=base.block_table_tensor.to(device),
        slot_mapping=base.slot_mapping.to(device),
    )
    ms = [base] + [
        base.replace(block_table_tensor=torch.tensor(t, device=device, **i32)) for t in tables[1:]
    ]
    objs = []
    for g in range(groups):
        names = [f"model.layers.{g}.linear_attn"]
        vc = runner.make_vllm_config(config, names)
        vc.scheduler_config.max_num_batched_tokens = 8192
        objs.append((runner.make_kv_cache_spec(config), names, vc))
    return ms, accepted, drafts, objs


def reader(names):
    """Reads every field of a metadata object, as an engine's attribute loads do (one C call
    over all names: the read costs the attribute loads, not a Python loop around them)."""
    return operator.attrgetter(*names)


CLOCK = time.perf_counter_ns
WARMUP_S = 0.25


def timer_overhead():
    """The median of an empty timed interval (nanoseconds): subtracted from every sample."""
    xs = []
    for _ in range(20000):
        t0 = CLOCK()
        xs.append(CLOCK() - t0)
    return statistics.median(xs)


def timed(fn, iters, repeats, sync, native=None):
    """The median host time of one call of `fn` (microseconds), after a warm-up, over `iters` x
    `repeats` calls each timed alone (the GPU is synchronised between the `repeats` blocks, never
    inside one): a median of single calls, so a VM's descheduled moments (steal time) and
    other outliers do not move it as they move a block's mean.

    With `native` (a function returning the native build's time of the call just made, in
    microseconds): returns (median time, median native, median of the per-call differences);
    each difference pairs a call with its own native build."""
    # Warm-up: at least a tenth of the calls and WARMUP_S seconds (a host's first calls after
    # idling run at a lower clock: the first workload would pay for it).
    t_end = time.perf_counter() + WARMUP_S
    calls = 0
    while calls < max(10, iters // 10) or time.perf_counter() < t_end:
        fn()
        calls += 1
    sync()
    overhead = timer_overhead()
    out, natives, diffs = [], [], []
    for _ in range(repeats):
        for _ in range(iters):
            t0 = CLOCK()
            fn()
            t = (CLOCK() - t0 - overhead) / 1e3
            out.append(t)
            if native is not None:
                n = native()
                natives.append(n)
                diffs.append(t - n)
        sync()
    if native is None:
        return statistics.median(out)
    return statistics.median(out), statistics.median(natives), statistics.median(diffs)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu", help="cpu (host target) or cuda")
    ap.add_argument("--iters", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed-iters", type=int, default=0, help="iterations for the seed (default iters/10)")
    ap.add_argument("--groups", default="1,4")
    ap.add_argument(
        "--workloads", default="gdn-spec-k3,kda-spec-k3,gdn-mixed-k3", help="comma-separated"
    )
    ap.add_argument("--json", help="write the table as JSON")
    ap.add_argument("--pin-cpu", type=int, help="run on CPU N only (steadier figures: no "
                    "migration between cores)")
    ap.add_argument(
        "--clock",
        choices=("wall", "cpu"),
        default="wall",
        help="wall: perf_counter_ns (default); cpu: this process's CPU time (a shared, "
        "loaded machine; a slower clock to read, meaningless for GPU work)",
    )
    args = ap.parse_args()
    if args.pin_cpu is not None:
        os.sched_setaffinity(0, {args.pin_cpu})
    global CLOCK
    CLOCK = time.perf_counter_ns if args.clock == "wall" else time.process_time_ns

    import numpy as np
    import linmeta

    seeds, runner, lv = load()
    device = torch.device(args.device)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    seed_iters = args.seed_iters or max(20, args.iters // 10)
    rows = []
    print(f"linmeta.vllm bench: device {device}, torch {torch.__version__}, "
          f"iters {args.iters} (seed {seed_iters}) x {args.repeats}")
    header = (f"{'workload':<14} {'G':>2} {'seed':>9} {'adapter':>9} "
              f"{'native':>8} {'py-api':>8} {'adapter-native':>15} {'seed/adapter':>12} "
              f"{'engine':>8} {'read':>6} {'loop':>5}")
    print(header)
    for wl in args.workloads.split(","):
        for groups in (int(x) for x in args.groups.split(",")):
            rng = np.random.default_rng(1)
            kind, config, step = workload(wl, groups, device, rng)
            ms, accepted, drafts, objs = make_inputs(runner, kind, config, step, groups, device, rng)
            our_cls = {"gdn": lv.GDNAttentionMetadataBuilder,
                       "kda": lv.KimiK3KDAMetadataBuilder}[kind]
            ours_b = [our_cls(s, n, vc, device) for s, n, vc in objs]
            names = [f.name for f in __import__("dataclasses").fields(ours_b[0]._cls)]

            read_all = reader(names)

            def run(builders):
                for b, m in zip(builders, ms):
                    read_all(b.build(0, m, accepted, drafts))

            def run_loop(builders):  # run() without the calls: the bench's own part
                for b, m in zip(builders, ms):
                    pass

            t_loop = timed(lambda: run_loop(ours_b), args.iters, args.repeats, sync)
            t_seed = None
            if seeds is not None:
                seed_cls = {"gdn": seeds.gdn.GDNAttentionMetadataBuilder,
                            "kda": seeds.kda.KimiK3KDAMetadataBuilder}[kind]
                seed_b = [seed_cls(s, n, vc, device) for s, n, vc in objs]
                # Equal outputs first (a bench of wrong answers is worthless).
                runner.clear_step_cache(seeds)
                for b, m, ours in zip(seed_b, ms, ours_b):
                    ref = b.build(0, m, accepted, drafts)
                    got = ours.build(0, m, accepted, drafts)
                    for n in names:
                        r, o = getattr(ref, n), getattr(got, n)
                        if isinstance(r, torch.Tensor):
                            assert o.dtype == r.dtype and torch.equal(o.cpu(), r.cpu()), n
                runner.clear_step_cache(seeds)
                t_seed = timed(lambda: run(seed_b), seed_iters, args.repeats, sync) - t_loop
            natives = [b._engine.builder for b in ours_b]

            def native_us():
                return sum(sum(n.last_timing.values()) for n in natives) / 1e3

            t_adapter, t_native, t_over = timed(lambda: run(ours_b), args.iters,
                                                args.repeats, sync, native_us)
            t_adapter, t_over = t_adapter - t_loop, t_over - t_loop
            # The generic Python API on a builder of its own.
            api = linmeta.MetadataBuilder(
                kind, **natives[0].config, target="cuda" if device.type == "cuda" else "host",
                num_groups=groups, array_type="torch")
            stream = 0 if device.type != "cuda" else torch.cuda.current_stream().cuda_stream
            kw = linmeta.step_kwargs(ms[0], accepted, drafts)
            kw.pop("block_table")
            tabs = [m.block_table_tensor for m in ms]
            api_names = [n for n in linmeta.fields_of(kind) if "." not in n]

            read_api = reader(api_names)

            def run_api():
                for md in api.build_groups(block_tables=tabs, stream=stream, **kw):
                    read_api(md)

            t_api = timed(run_api, args.iters, args.repeats, sync)
            # The parts of the adapter's time: its native engine calls, and the field reads.
            engines = [b._engine for b in ours_b]

            def run_engine():
                for e, m in zip(engines, ms):
                    e.build(m, accepted, drafts, False)

            t_session = timed(run_engine, args.iters, args.repeats, sync)
            mds = [b.build(0, m, accepted, drafts) for b, m in zip(ours_b, ms)]
            t_read = timed(lambda: [read_all(md) for md in mds], args.iters,
                           args.repeats, sync)
            row = dict(workload=wl, groups=groups, seed_us=t_seed,
                       adapter_us=t_adapter, native_us=t_native,
                       adapter_minus_native_us=t_over, py_api_us=t_api,
                       engine_us=t_session, read_us=t_read, loop_us=t_loop,
                       device=str(device), torch=torch.__version__)
            rows.append(row)
            seed = ("-", "-") if t_seed is None else (f"{t_seed:.1f}",
                                                      f"{t_seed / t_adapter:.1f}x")
            print(f"{wl:<14} {groups:>2} {seed[0]:>9} {t_adapter:9.1f} "
                  f"{t_native:8.1f} {t_api:8.1f} {t_over:15.1f} "
                  f"{seed[1]:>12} {t_session:8.1f} {t_read:6.1f} {t_loop:5.2f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
