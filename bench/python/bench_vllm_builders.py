#!/usr/bin/env python3
"""vLLM 0.34's own Mamba-family metadata builders and Inkling's short-conv builder against
linmeta's host target and against linmeta.vllm's drop-in classes, on the same steps, in one run
(docs/bench.md, "vLLM's builders"; docs/vllm.md, "Costs"): ratios, not absolutes.

1. runs ``linmeta-bench --target host`` on the workloads, with ``--json`` (linmeta's host time
   per build, median) and ``--steps`` (each workload's step as a case-file line);
2. builds every Mamba-family step of that file with vLLM's builder on CPU tensors, as vLLM
   0.34's model runner calls it (``build(0, common_attn_metadata, **kwargs)``; Mamba2,
   ShortConv and PLE ShortConv get ``num_accepted_tokens`` / ``num_decode_draft_tokens_cpu``,
   Mamba1, linear attention, Bailing and Inkling nothing), and times each call alone: median of at least ``--reps`` calls and
   ``--min-time`` seconds after ``--warmup`` calls. Inkling's build launches a Triton kernel
   (``sconv_seq_metadata``), which runs here in Triton's CPU interpreter (``TRITON_INTERPRET=1``,
   set before vLLM is imported): its vLLM column is the interpreter's time, marked ``interp``,
   not what the kernel launch costs on a GPU;
3. prints vLLM's median, linmeta's and vLLM / linmeta, with the target of the prefill-heavy
   step (>= 100x), and vLLM / (linmeta's plan + pack phases): the host work the cuda target
   has too (there the element work, the host target's 'enq', is a kernel launch instead).
   vLLM's counts (prefills, decodes and their tokens) must equal linmeta's;
4. builds the same steps through linmeta.vllm's class (``adapter``: one KV-cache group, every
   field of the returned dataclass read) and reports, per call, its host time, the native
   build's (``native``: plan + pack + enqueue + the returned Metadata, of the builder it
   wraps) and the difference (target: adapter <= native + 3 us per group).

Needs a built linmeta-bench. With the vLLM 0.34.0 wheel (e.g. /work/venv-vllm) every column
runs on CPU tensors; without vLLM (a GPU machine: ``--device cuda``) the adapter runs on
stand-in config objects and only the adapter / native columns are printed:

    /work/venv-vllm/bin/python bench/python/bench_vllm_builders.py [--pin-cpu 1] [--json OUT]
    python bench/python/bench_vllm_builders.py --device cuda      # no vLLM: adapter, native
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types

REPO = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
PREFILL_HEAVY = "mamba2/prefill4096/B8/none/G1/nograph"
TARGET_RATIO = 100.0
WORKLOADS = [
    PREFILL_HEAVY,
    "mamba2/prefill4096/B8/align/G1/nograph",
    "mamba2/decode/B256/none/G1/fullgraph",
    "mamba2/decode/B256/align/G1/fullgraph",
    "mamba2/spec-k3/B256/align/G1/fullgraph",
    "mamba1/decode/B256/none/G1/fullgraph",
    "mamba1/prefill4096/B8/none/G1/nograph",
    "short_conv/decode/B256/none/G1/fullgraph",
    "short_conv/prefill4096/B8/none/G1/nograph",
    "linear/decode/B256/none/G1/fullgraph",
    "linear/prefill4096/B8/none/G1/nograph",
    "ple_short_conv/decode/B256/none/G1/fullgraph",
    "ple_short_conv/spec-k3/B256/align/G1/fullgraph",
    "ple_short_conv/prefill4096/B8/none/G1/nograph",
    "bailing_linear/decode/B256/none/G1/fullgraph",
    "bailing_linear/prefill4096/B8/none/G1/nograph",
    "inkling/decode/B256/none/G1/fullgraph",
    "inkling/prefill4096/B8/none/G1/nograph",
    # linmeta-bench's same-run references of the Mamba family (GDN headline family, same rows).
    "gdn/spec-k3/B256/align/G4/fullgraph",
    "gdn/spec-k3/B8/align/G4/fullgraph",
]
COUNTS = ("num_prefills", "num_prefill_tokens", "num_decodes", "num_decode_tokens")


def run_linmeta(args, workloads: list[str], tmp: str) -> tuple[dict, list[dict], str]:
    """linmeta-bench's JSON workloads by name, the step lines, and its printed output."""
    out_json, out_steps = os.path.join(tmp, "linmeta.json"), os.path.join(tmp, "steps.jsonl")
    cmd = [args.bench, "--target", "host", "--quiet", "--json", out_json, "--steps", out_steps,
           "--reps", str(args.reps), "--min-time", str(args.min_time)]
    cmd += ["--pin-cpu", str(args.pin_cpu)] if args.pin_cpu is not None else []
    for w in workloads:
        cmd += ["--workload", w]
    done = subprocess.run(cmd, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"bench_vllm_builders: {' '.join(cmd)} failed:\n{done.stdout}{done.stderr}")
    with open(out_json) as f:
        figures = {w["name"]: w for w in json.load(f)["workloads"]}
    with open(out_steps) as f:
        steps = [json.loads(line) for line in f if line.strip()]
    return figures, steps, done.stdout


ADAPTER_TARGET_US = 3.0
ADAPTER_CLASSES = {
    "mamba2": "Mamba2AttentionMetadataBuilder",
    "mamba1": "Mamba1AttentionMetadataBuilder",
    "short_conv": "ShortConvAttentionMetadataBuilder",
    "linear": "LinearAttentionMetadataBuilder",
    "ple_short_conv": "PleShortConvAttentionMetadataBuilder",
    "bailing_linear": "BailingLinearAttentionMetadataBuilder",
    "inkling": "InklingSconvMetadataBuilder",
}
# vLLM's builders whose build runs a Triton kernel (interpreted on CPU: not comparable).
INTERPRETED = ("inkling",)


def vllm_builders():
    """vLLM's Mamba-family builder classes by linmeta's builder name (imports vLLM on CPU)."""
    os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ["CUDA_VISIBLE_DEVICES"] = ""
    os.environ.setdefault("TRITON_INTERPRET", "1")  # Inkling's sconv_seq_metadata kernel
    import vllm
    from vllm.v1.attention.backends.linear_attn import (BailingLinearAttentionMetadataBuilder,
                                                        LinearAttentionMetadataBuilder)
    from vllm.v1.attention.backends.mamba1_attn import Mamba1AttentionMetadataBuilder
    from vllm.v1.attention.backends.mamba2_attn import Mamba2AttentionMetadataBuilder
    from vllm.v1.attention.backends.short_conv_attn import (PleShortConvAttentionMetadataBuilder,
                                                            ShortConvAttentionMetadataBuilder)
    from vllm.models.inkling.nvidia.sconv_swa_attn import InklingSconvMetadataBuilder

    if vllm.__version__ != "0.34.0":
        sys.exit(f"bench_vllm_builders: needs vllm 0.34.0, found {vllm.__version__}")
    return vllm.__version__, {
        "mamba2": Mamba2AttentionMetadataBuilder,
        "mamba1": Mamba1AttentionMetadataBuilder,
        "short_conv": ShortConvAttentionMetadataBuilder,
        "linear": LinearAttentionMetadataBuilder,
        "ple_short_conv": PleShortConvAttentionMetadataBuilder,
        "bailing_linear": BailingLinearAttentionMetadataBuilder,
        "inkling": InklingSconvMetadataBuilder,
    }


def make_builder(cls, builder: str, config: dict, num_tokens: int = 8192):
    """One vLLM builder for a case-file config, as an engine of that configuration makes it
    (the recipe of tests/vllm/wheel_builders.py, with a MambaSpec and the model's chunk size)."""
    import torch
    from vllm.config import (CacheConfig, CompilationConfig, CUDAGraphMode, SchedulerConfig,
                             SpeculativeConfig, VllmConfig)
    from vllm.v1.kv_cache_interface import MambaSpec, SlidingWindowSpec

    k, block = int(config["num_spec"]), int(config["block_size"])
    mode = CUDAGraphMode.FULL_AND_PIECEWISE if config["full_cuda_graph"] else CUDAGraphMode.PIECEWISE
    capture = config.get("max_cudagraph_capture_size")
    vc = VllmConfig(
        compilation_config=CompilationConfig(cudagraph_mode=mode, max_cudagraph_capture_size=capture),
        speculative_config=(SpeculativeConfig(method="ngram", num_speculative_tokens=k)
                            if k > 0 else None),
        scheduler_config=SchedulerConfig(max_num_seqs=int(config["max_num_seqs"]),
                                         max_num_batched_tokens=max(8192, num_tokens),
                                         max_model_len=1 << 20, is_encoder_decoder=False),
        cache_config=CacheConfig(mamba_cache_mode=config["mamba_cache_mode"],
                                 mamba_block_size=block))
    # The CPU platform turns graphs off; the builder must see the engine's settings.
    vc.compilation_config.cudagraph_mode = mode
    vc.compilation_config.max_cudagraph_capture_size = capture
    vc.cache_config.hash_block_size = block
    vc.cache_config.cache_hit_alignment_tokens = block
    # The one model-config call the builders make (Mamba2: the SSD chunk size; vLLM's default
    # 2048 for models without one).
    chunk = int(config.get("chunk_size") or 2048)
    vc.model_config = types.SimpleNamespace(get_mamba_chunk_size=lambda: chunk)
    checkpoints = int(config.get("num_prefill_checkpoint_blocks", 0))
    alignment = config.get("prefill_checkpoint_alignment") or (1 if checkpoints else None)
    if builder == "inkling":  # its conv cache: a sliding-window KV cache of kernel-size blocks
        spec = SlidingWindowSpec(block_size=block, num_kv_heads=1, head_size=64,
                                 dtype=torch.bfloat16, sliding_window=block)
        return cls(spec, ["model.layers.0.sconv"], vc, torch.device("cpu"))
    spec = MambaSpec(block_size=block, shapes=((1,),), dtypes=(torch.float32,),
                     mamba_cache_mode=config["mamba_cache_mode"],
                     num_speculative_blocks=int(config["num_speculative_blocks"]),
                     num_prefill_checkpoint_blocks=checkpoints,
                     prefill_checkpoint_alignment=alignment)
    return cls(spec, ["model.layers.0.mixer"], vc, torch.device("cpu"))


class _GraphMode:
    def __init__(self, full: bool):
        self.full = full

    def has_full_cudagraphs(self) -> bool:
        return self.full


def standin_objects(config: dict, num_tokens: int):
    """(kv_cache_spec, vllm_config) as far as linmeta.vllm's Mamba classes read them (no vLLM)."""
    k, chunk = int(config["num_spec"]), config.get("chunk_size")
    ns = types.SimpleNamespace
    vc = ns(
        scheduler_config=ns(max_num_seqs=int(config["max_num_seqs"]),
                            max_num_batched_tokens=max(8192, num_tokens)),
        compilation_config=ns(cudagraph_mode=_GraphMode(bool(config["full_cuda_graph"])),
                              max_cudagraph_capture_size=config.get("max_cudagraph_capture_size"),
                              static_forward_context={}),
        speculative_config=ns(num_speculative_tokens=k, parallel_drafting=False) if k else None,
        num_speculative_tokens=k,
        cache_config=ns(mamba_cache_mode=config["mamba_cache_mode"], use_replayssm=False),
        model_config=ns(get_mamba_chunk_size=lambda: None if chunk is None else int(chunk)),
        parallel_config=ns(decode_context_parallel_size=1), additional_config={})
    spec = ns(block_size=int(config["block_size"]), mamba_cache_mode=config["mamba_cache_mode"],
              shapes=((1,),),
              num_speculative_blocks=int(config["num_speculative_blocks"]),
              num_prefill_checkpoint_blocks=int(config.get("num_prefill_checkpoint_blocks", 0)),
              prefill_checkpoint_alignment=config.get("prefill_checkpoint_alignment"))
    return spec, vc


def common_metadata(step: dict, device, with_vllm: bool):
    """The step's CommonAttentionMetadata (vLLM's class, or the attributes linmeta.vllm reads)."""
    import torch

    def i32(v, dev=device):
        return torch.tensor(v, dtype=torch.int32, device=dev)

    qsl, seq, upper = step["query_start_loc"], step["seq_lens"], step["seq_lens_cpu_upper_bound"]
    fields = dict(
        query_start_loc=i32(qsl), query_start_loc_cpu=i32(qsl, "cpu"), seq_lens=i32(seq),
        num_reqs=len(seq), num_actual_tokens=int(step["num_actual_tokens"]),
        block_table_tensor=i32(step["block_table"]),
        is_prefilling=torch.tensor(step["is_prefilling"], dtype=torch.bool),
        seq_lens_cpu_upper_bound=i32(upper, "cpu"),
        slot_mapping=torch.zeros(int(step["num_actual_tokens"]), dtype=torch.int64,
                                 device=device))
    if not with_vllm:
        return types.SimpleNamespace(**fields)
    from vllm.v1.attention.backend import CommonAttentionMetadata

    return CommonAttentionMetadata(
        **fields, max_query_len=max(b - a for a, b in zip(qsl, qsl[1:])), max_seq_len=max(upper),
        causal=True)


def call_for(builder: str, b, step: dict, device="cpu", with_vllm=True, read=None):
    """build() of `b` on the step's CommonAttentionMetadata, as vLLM 0.34's runner calls it;
    `read` (an attrgetter) reads the returned object's fields, as a layer would."""
    import torch

    m = common_metadata(step, device, with_vllm)
    kwargs = {}
    if builder in ("mamba2", "short_conv", "ple_short_conv"):  # mamba_hybrid.py
        accepted, drafts = step["num_accepted_tokens"], step["num_decode_draft_tokens_cpu"]
        kwargs = {"num_accepted_tokens": None if accepted is None else torch.tensor(
                      accepted, dtype=torch.int32, device=device),
                  "num_decode_draft_tokens_cpu": None if drafts is None else torch.tensor(
                      drafts, dtype=torch.int32)}
    if read is None:
        return lambda: b.build(0, m, **kwargs)
    return lambda: read(b.build(0, m, **kwargs))


def timed(fn, reps: int, min_time: float, warmup: int, native=None, sync=None) -> dict:
    """Each call timed alone (perf_counter_ns, its own overhead subtracted): median and
    quartiles in microseconds over at least `reps` calls and `min_time` seconds. `native`
    (the native build's time of the call just made, us): also the median native time and the
    median of each call's difference. `sync` runs every 64 calls, outside the timing."""
    for _ in range(warmup):
        fn()
    overhead = statistics.median(-time.perf_counter_ns() + time.perf_counter_ns()
                                 for _ in range(10000))
    xs, natives, diffs, t_end = [], [], [], time.perf_counter() + min_time
    while len(xs) < reps or (time.perf_counter() < t_end and len(xs) < 100 * reps):
        t0 = time.perf_counter_ns()
        fn()
        xs.append((time.perf_counter_ns() - t0 - overhead) / 1e3)
        if native is not None:
            natives.append(native())
            diffs.append(xs[-1] - natives[-1])
        if sync is not None and len(xs) % 64 == 0:
            sync()
    q = statistics.quantiles(xs, n=4)
    out = {"median": statistics.median(xs), "p25": q[0], "p75": q[2], "count": len(xs)}
    if native is not None:
        out.update(native=statistics.median(natives), over=statistics.median(diffs))
    return out


def adapter_figures(builder: str, case: dict, args, with_vllm: bool, make=None) -> dict:
    """linmeta.vllm's class on the step: its time, the native build's, their difference."""
    import operator
    import dataclasses

    import torch
    import linmeta.vllm as lv

    cls = getattr(lv, ADAPTER_CLASSES[builder])
    device = torch.device(args.device)
    if make is not None:
        b = make(cls)
    else:
        spec, vc = standin_objects(case["config"], case["step"]["num_actual_tokens"])
        b = cls(spec, ["model.layers.0.mixer"], vc, device)
    names = [f.name for f in dataclasses.fields(b._cls)]
    build = call_for(builder, b, case["step"], device, with_vllm, operator.attrgetter(*names))
    build()
    engine = b._engine

    def native():
        t = engine.builder.last_timing
        return sum(t.values()) / 1e3

    sync = torch.cuda.synchronize if device.type == "cuda" else None
    return timed(build, args.reps_adapter, args.min_time, args.warmup, native, sync)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--bench", default=os.path.join(REPO, "build/release/bench/linmeta-bench"))
    ap.add_argument("--workloads", default=",".join(WORKLOADS), help="comma-separated names")
    ap.add_argument("--reps", type=int, default=2000, help="linmeta host builds, at least")
    ap.add_argument("--vllm-reps", type=int, default=300, help="vLLM builds, at least")
    ap.add_argument("--min-time", type=float, default=0.5, help="seconds per figure, at least")
    ap.add_argument("--warmup", type=int, default=20, help="untimed vLLM builds first")
    ap.add_argument("--pin-cpu", type=int, help="pin linmeta-bench's timing thread and this "
                    "process to CPU N")
    ap.add_argument("--json", help="write every figure to this file")
    ap.add_argument("--device", default="cpu", help="the adapter's tensors: cpu or cuda")
    ap.add_argument("--reps-adapter", type=int, default=2000, help="adapter builds, at least")
    args = ap.parse_args()
    if args.pin_cpu is not None:
        os.sched_setaffinity(0, {args.pin_cpu})
    with tempfile.TemporaryDirectory() as tmp:
        linmeta, steps, printed = run_linmeta(args, args.workloads.split(","), tmp)
    print(printed, end="")
    try:
        version, classes = vllm_builders() if args.device == "cpu" else (None, {})
    except ImportError:
        version, classes = None, {}
    if version is None:
        os.environ.setdefault("LINMETA_VLLM_PROFILE", "vllm-0.34")
    import torch

    torch.set_num_threads(1)
    if version:
        print(f"\nvLLM {version} builders on CPU tensors (torch {torch.__version__}, 1 thread) "
              "against linmeta's host target above and linmeta.vllm's class (adapter, native: "
              "the build it wraps); microseconds per build, medians of calls timed alone")
    else:
        print(f"\nno vLLM 0.34: linmeta.vllm's classes on stand-in configs, {args.device} tensors "
              f"(torch {torch.__version__}); microseconds per build, medians of calls timed alone")
    head = (f"{'workload':<42} {'vLLM med':>9} {'linmeta':>8} {'vLLM/linmeta':>12} "
            f"{'vLLM/(plan+pack)':>16} {'adapter':>8} {'native':>7} {'adapter-native':>14}")
    print(head)
    rows = []
    for case in steps:
        name, builder = case["name"], case["builder"]
        if builder not in ADAPTER_CLASSES:
            continue
        ours = linmeta[name]
        host = ours["host_us"]
        lin, phases = host["total"]["median"], host["plan"]["median"] + host["pack"]["median"]
        row = {"workload": name, "linmeta_host_us": host}
        make = None
        t = None
        if builder in classes:
            tokens = int(case["step"]["num_actual_tokens"])
            b = make_builder(classes[builder], builder, case["config"], tokens)
            build = call_for(builder, b, case["step"])
            md = build()
            if builder == "inkling":  # per-token fields over the padded tokens, no counts
                got = {"tokens": int(md.seq_idx.shape[0])}
                want = {"tokens": tokens}
            else:
                got = {c: int(getattr(md, c)) for c in COUNTS}
                want = {c: ours["metadata"][c] for c in COUNTS}
            if got != want:
                sys.exit(f"bench_vllm_builders: {name}: vLLM's counts {got} differ from "
                         f"linmeta's {want}")
            interp = builder in INTERPRETED
            t = timed(build, args.vllm_reps // 10 if interp else args.vllm_reps,
                      args.min_time, 2 if interp else args.warmup)
            row.update(vllm_us=t, ratio=t["median"] / lin, ratio_plan_pack=t["median"] / phases,
                       vllm_triton_interpreted=interp)

            def make(cls, builder=builder, config=case["config"], tokens=tokens):
                return make_builder(cls, builder, config, tokens)
        a = adapter_figures(builder, case, args, version is not None, make)
        row["adapter_us"] = a
        rows.append(row)
        mark = "x interp" if t and row.get("vllm_triton_interpreted") else "x"
        vllm_cols = (f"{t['median']:9.1f} {lin:8.2f} {t['median'] / lin:11.1f}{mark} "
                     f"{t['median'] / phases:15.1f}x" if t else
                     f"{'-':>9} {lin:8.2f} {'-':>12} {'-':>16}")
        print(f"{name:<42} {vllm_cols} {a['median']:8.2f} {a['native']:7.2f} {a['over']:14.2f}")
    print()
    for r in rows:
        if r["workload"] == PREFILL_HEAVY and "ratio" in r:
            ok = "ok" if r["ratio"] >= TARGET_RATIO else "UNDER"
            print(f"{PREFILL_HEAVY}: vLLM / linmeta host target = {r['ratio']:.1f}x, vLLM / "
                  f"(plan + pack) = {r['ratio_plan_pack']:.1f}x (target >= "
                  f"{TARGET_RATIO:.0f}x) {ok}")
    worst = max(rows, key=lambda r: r["adapter_us"]["over"]) if rows else None
    if worst:
        over = worst["adapter_us"]["over"]
        ok = "ok" if over <= ADAPTER_TARGET_US else "OVER"
        print(f"adapter - native, worst workload ({worst['workload']}): {over:.2f} us "
              f"(target <= {ADAPTER_TARGET_US:.0f} us per group) {ok}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"vllm": version, "torch": torch.__version__, "device": args.device,
                       "rows": rows}, f, indent=1)


if __name__ == "__main__":
    main()
