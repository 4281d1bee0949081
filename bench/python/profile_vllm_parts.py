#!/usr/bin/env python3
"""Where linmeta.vllm's time goes on one step of the adapter bench's headline (GDN, 256 spec
rows, k = 3, align, FULL graphs): each piece timed alone, medians of many calls, microseconds.

    python bench/python/profile_vllm_parts.py [--device cuda] [--groups 4]

Pieces: the first group's build() (plans the step) against the native build's own time
(last_timing), a served group's build(), reading the 28 fields, one tensor import with and
without linmeta._torch_reader, torch's current-stream query, and whether the session re-made
its result dicts (dicts_made) or copied them. GDN with several groups also times vLLM 0.34's
MRV2 path: later groups call update_block_table on the first group's metadata (builders of
the vllm-0.34 profile, where MRV2 takes that path), each call alone.
"""

from __future__ import annotations

import argparse
import dataclasses
import operator
import os
import statistics
import sys
import time

import numpy as np
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import bench_vllm as bv  # noqa: E402


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--groups", type=int, default=4)
    ap.add_argument("--steps", type=int, default=5000)
    ap.add_argument("--workload", default="gdn-spec-k3")
    args = ap.parse_args()
    seeds, runner, lv = bv.load()
    from linmeta import _linmeta

    dev = torch.device(args.device)
    sync = torch.cuda.synchronize if dev.type == "cuda" else (lambda: None)
    rng = np.random.default_rng(1)
    kind, config, step = bv.workload(args.workload, args.groups, dev, rng)
    ms, acc, drafts, objs = bv.make_inputs(runner, kind, config, step, args.groups, dev, rng)
    cls = lv.KimiK3KDAMetadataBuilder if kind == "kda" else lv.GDNAttentionMetadataBuilder
    bs = [cls(s, n, vc, dev) for s, n, vc in objs]
    get = operator.attrgetter(*[f.name for f in dataclasses.fields(lv.metadata_classes()[kind])])
    ns = time.perf_counter_ns
    first, native, served, reads = [], [], [], []
    for b, m in zip(bs, ms):
        b.build(0, m, acc, drafts)
    session = bs[0]._engine.session
    made0 = session.dicts_made
    session.timing = True
    for it in range(args.steps):
        t0 = ns()
        md = bs[0].build(0, ms[0], acc, drafts)
        t1 = ns()
        get(md)
        t2 = ns()
        for b, m in zip(bs[1:], ms[1:]):
            t3 = ns()
            b.build(0, m, acc, drafts)
            served.append(ns() - t3)
        first.append(t1 - t0)
        reads.append(t2 - t1)
        t = bs[0]._engine.native.last_timing
        native.append(t["plan_ns"] + t["pack_ns"] + t["enqueue_ns"])
        if it % 500 == 0:
            sync()
    sync()
    med = lambda xs: statistics.median(xs) / 1e3  # noqa: E731
    print(f"{args.workload} G{args.groups} on {dev} (torch {torch.__version__}, reader: "
          f"{_linmeta.torch_reader_status()})")
    print(f"  first group's build()   {med(first):6.2f}  (native build {med(native):.2f}: "
          f"+{med(first) - med(native):.2f})")
    if served:
        print(f"  a served group's build() {med(served):6.2f}")
    print(f"  reading the fields       {med(reads):6.2f}")
    print(f"  result dicts made during the run: {session.dicts_made - made0} "
          f"(of {args.steps * args.groups} results)")
    phases = session.phase_ns
    session.timing = False
    print("  session call phases, per step (all groups): " + ", ".join(
        f"{k} {v / args.steps / 1e3:.2f}" for k, v in phases.items()))
    x = ms[0].seq_lens

    def per_call(fn, n=20000):
        t = ns()
        for _ in range(n):
            fn()
        return (ns() - t) / n / 1e3

    empty = per_call(lambda: None)
    print(f"  tensor import, reader    {per_call(lambda: _linmeta._import_info(x, True)) - empty:6.3f}")
    print(f"  tensor import, attributes {per_call(lambda: _linmeta._import_info(x, False)) - empty:5.3f}")
    stream = bs[0]._engine.current_stream
    print(f"  current stream query     {per_call(stream) - empty:6.3f}")
    if kind == "gdn" and args.groups > 1:
        print(f"  MRV2 (vllm-0.34 profile): a later group's update_block_table "
              f"{med(mrv2_updates(lv, cls, objs, ms, acc, drafts, dev, args.steps, sync)):6.2f}")


def mrv2_updates(lv, cls, objs, ms, acc, drafts, dev, steps, sync):
    """Nanoseconds of each later group's update_block_table on the first group's metadata,
    as vLLM 0.34's MRV2 runner calls them (builders of the vllm-0.34 profile)."""
    profile = lv._PROFILE
    lv._PROFILE = "vllm-0.34"  # read at construction and by the calls
    try:
        bs = [cls(s, n, vc, dev) for s, n, vc in objs]
        for b, m in zip(bs, ms):  # MRV2 sets the aligned indices (0.34's GDN only asserts them)
            b.mamba_aligned_state_indices = m.block_table_tensor[:, 0]
        ns, out = time.perf_counter_ns, []
        for it in range(steps + 50):
            first = bs[0].build(0, ms[0], acc, drafts)
            for b, m in zip(bs[1:], ms[1:]):
                t = ns()
                b.update_block_table(first, m.block_table_tensor, m.slot_mapping)
                if it >= 50:
                    out.append(ns() - t)
            if it % 500 == 0:
                sync()
        sync()
    finally:
        lv._PROFILE = profile
    return out


if __name__ == "__main__":
    main()
