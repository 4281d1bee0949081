"""linmeta.vllm (profile vllm-0.34) against vLLM 0.34.0's real GDN and KDA builders, object to
object, on CPU (docs/vllm.md). Run with the vLLM venv's interpreter:

  adapter_diff.py [--steps N] [--seed S] [--zero-drafts P] [--public FILE] [--show K] [--record F]

For each random step (tests/python/vllm_oracle_util.py's generator, profile vllm-0.34) and each
case of --public (default ../shared/cases/vllm034_public.jsonl when present), both sides get the
same vllm_config / kv_cache_spec objects (tests/vllm/wheel_builders.py, one pair per KV-cache
group) and the same CommonAttentionMetadata / accepted / draft tensors, and are called as
wheel_runner.py calls vLLM's builders:
* runner path: GDN group 0 builds, later groups ``update_block_table`` from group 0's
  metadata; KDA builds every group (after the runner's aligned state indices in align mode);
  the accepted / draft counts reach build() as MRV2 hands them over (its model state's
  get_extra_attn_kwargs, which tests the builder's class), not directly;
* independent path (multi-group steps): every group built by fresh builder objects;
* deferred pass (--steps / 10 KDA RecoverSSM build steps): both sides' builders bound by
  Kimi-K3's DeferredRecoverSSMState (which binds only builders that are vLLM's KDA builder),
  with an fp32_deferred commit context stand-in; the metadata and recoverssm_deferred.
Every returned object is compared recursively (dataclass types and fields, nums_dict, host
lists; tensors: dtype, shape, device, values; None-ness). A step the wheel rejects must be
rejected by the adapter too. The one stand-in on both sides: the RecoverSSM commit context
(a forward-pass object over CUDA layers; wheel_env.py) is the same marker object.

Exit status 1 on any difference.
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time
import types

# Unset before linmeta.vllm is imported: the profile it chooses for vLLM 0.34 on its own (as
# under the plugin) must be vLLM 0.34's (checked below).
os.environ.pop("LINMETA_VLLM_PROFILE", None)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(REPO, "tests", "python"))

import wheel_env  # noqa: E402  (first: environment and CPU stand-ins)
import wheel_builders  # noqa: E402
import wheel_runner  # noqa: E402
from wheel_env import torch  # noqa: E402

import linmeta.vllm as lv  # noqa: E402
import vllm_oracle_util as util  # noqa: E402
from vllm.models.kimi_k3.nvidia.specialized_decode.recoverssm.context import (  # noqa: E402
    FP32_DEFERRED,
    KDADeferredCommitContext,
)
from vllm.models.kimi_k3.nvidia.specialized_decode.recoverssm.state import (  # noqa: E402
    DeferredRecoverSSMState,
)
from vllm.v1.worker.gpu.model_states.mamba_hybrid import MambaHybridAttnMetadata  # noqa: E402

assert lv._PROFILE == "vllm-0.34", f"linmeta.vllm chose profile {lv._PROFILE!r} under vLLM 0.34"

PUBLIC = os.path.normpath(os.path.join(REPO, "..", "shared", "cases", "vllm034_public.jsonl"))
ADAPTER = {"gdn": lv.GDNAttentionMetadataBuilder, "kda": lv.KimiK3KDAMetadataBuilder}
REFERENCE = {"gdn": wheel_env.GDNAttentionMetadataBuilder, "kda": wheel_env.KimiK3KDAMetadataBuilder}

# The stand-in the harness gives vLLM's KDA builder (wheel_env.py), given to the adapter too.
lv.KimiK3KDAMetadataBuilder._get_recoverssm_context = lambda self: wheel_env.RECOVERSSM_CONTEXT_MARKER


def _objects(kind: str, config: dict, groups: int, num_tokens: int):
    """One (kv_cache_spec, layer_names, vllm_config) per group, shared by both sides."""
    wheel_builders.check_config(kind, config)
    out = []
    for g in range(groups):
        vc = wheel_builders.make_vllm_config(kind, config)
        # The engine's token budget (the adapter sizes its buffers from it; vLLM's builders
        # do not read it).
        vc.scheduler_config.max_num_batched_tokens = max(
            int(config.get("max_num_batched_tokens") or 0),
            num_tokens,
            vc.scheduler_config.max_num_batched_tokens,
        )
        out.append((wheel_builders.make_kv_cache_spec(kind, config), [f"model.layers.{g}.linear_attn"], vc))
    return out


def _builders(cls, kind: str, config: dict, objs):
    # The GDN prefill backend vLLM's resolver answers (wheel_env's stand-in), read by both.
    wheel_env.set_gdn_prefill_backend(wheel_builders.prefill_backend(kind, config) if kind == "gdn" else "triton")
    return [cls(spec, names, vc, wheel_env.DEVICE) for spec, names, vc in objs]


def _runner_counts(b, m, accepted, drafts):
    """The (accepted, drafts) counts vLLM 0.34's MRV2 hands builder `b`: its model state's
    get_extra_attn_kwargs (MambaHybridAttnMetadata) gives them only to builders it takes for
    GDN-family ones (isinstance), None otherwise."""
    state = MambaHybridAttnMetadata(
        is_prefilling=m.is_prefilling, num_accepted_tokens=accepted, num_decode_draft_tokens_cpu=drafts
    )
    kw = state.get_extra_attn_kwargs(b, m.num_reqs)
    return kw.get("num_accepted_tokens"), kw.get("num_decode_draft_tokens_cpu")


def _run(builders, kind: str, case: dict, per_group, accepted, drafts, runner_path: bool):
    """The metadata of every group, or the exception raised. The runner path takes the counts
    the way MRV2 hands them over (_runner_counts)."""
    config, mode = case["config"], case["mode"]
    out = []
    try:
        for g, (b, m) in enumerate(zip(builders, per_group)):
            wheel_runner._prepare(b, kind, config, m)
            if runner_path and kind == "gdn" and g > 0:
                out.append(b.update_block_table(out[0], m.block_table_tensor, m.slot_mapping))
            elif runner_path:
                out.append(wheel_runner._build(b, mode, m, *_runner_counts(b, m, accepted, drafts)))
            else:
                out.append(wheel_runner._build(b, mode, m, accepted, drafts))
    except Exception as e:  # noqa: BLE001 - compared with the other side
        return e
    return out


# vLLM sorts these without stability: equal lengths come in no defined order (CPU and CUDA
# torch differ); linmeta orders them by row. Any order of equal lengths is accepted, as in
# linmeta-replay (docs/semantics.md, K6).
TIES = ("flashinfer_prefill_seq_order",)


def _diff_up_to_ties(ours, ref, name: str, path: str) -> list[str]:
    o, r = getattr(ours, name), getattr(ref, name)
    if o is None or r is None or not isinstance(o, torch.Tensor):
        return util.diff(o, r, path)
    if o.dtype != r.dtype or o.shape != r.shape or o.device != r.device:
        return util.diff(o, r, path)
    lengths = ref.flashinfer_prefill_query_start_loc.diff().cpu()
    same = sorted(o.tolist()) == sorted(r.tolist()) and bool(
        torch.equal(lengths[o.long().cpu()], lengths[r.long().cpu()])
    )
    TIE_ORDERS[0] += same and not torch.equal(o.cpu(), r.cpu())
    return [] if same else util.diff(o, r, path)


TIE_ORDERS = [0]  # comparisons where only the order of equal lengths differed


COVERAGE: dict[str, int] = {}


def _tally(kind: str, ref, groups: int) -> None:
    """What the reference's group-0 object holds (printed: what the steps exercised)."""
    if isinstance(ref, Exception):
        tags = ["raised"]
    else:
        md = ref[0]
        tags = ["groups>1"] if groups > 1 else []
        tags += [name for name in ("checkpoint", "flashinfer_checkpoint_plan", "recoverssm_commit",
                                   "flashinfer_prefill_seq_order", "chunk_indices")
                 if getattr(md, name, None) is not None]
        if md.num_spec_decodes and md.num_prefills:
            tags.append("spec+prefill")
        if getattr(md, "checkpoint", None) is not None and md.num_spec_decodes:
            tags.append("checkpoint+spec")
    for t in tags:
        COVERAGE[f"{kind} {t}"] = COVERAGE.get(f"{kind} {t}", 0) + 1


def _compare(label: str, ref, ours, skip=()) -> list[str]:
    """The differences of two sides' per-group metadata lists (or the exceptions raised);
    fields in `skip` are not compared."""
    if isinstance(ref, Exception) or isinstance(ours, Exception):
        if isinstance(ref, Exception) and isinstance(ours, Exception):
            return []  # both reject the step
        which = "vLLM" if isinstance(ref, Exception) else "linmeta"
        e = ref if isinstance(ref, Exception) else ours
        return [f"{label}: only {which} raised {type(e).__name__}: {str(e)[:300]}"]
    diffs = []
    for g, (o, r) in enumerate(zip(ours, ref)):
        path = f"{label}.group{g}"
        diffs.extend(util.diff(o, r, path, skip=TIES + tuple(skip)))
        for name in TIES:
            if hasattr(r, name):
                diffs.extend(_diff_up_to_ties(o, r, name, f"{path}.{name}"))
    return diffs


def compare_case(case: dict) -> list[str]:
    """Every difference between the adapter and the wheel on one case (empty: equal)."""
    kind, step = case["builder"], case["step"]
    per_group, accepted, drafts = wheel_runner._step_inputs(case)
    tokens = max(int(step["num_actual_tokens"]), int(step["query_start_loc"][-1]))
    objs = _objects(kind, case["config"], len(per_group), tokens)
    diffs: list[str] = []

    def check(label, ref, ours):
        diffs.extend(_compare(label, ref, ours))

    # The runner path: one builder object per group, all made before the step.
    ref_b = _builders(REFERENCE[kind], kind, case["config"], objs)
    our_b = _builders(ADAPTER[kind], kind, case["config"], objs)
    ref = _run(ref_b, kind, case, per_group, accepted, drafts, True)
    ours = _run(our_b, kind, case, per_group, accepted, drafts, True)
    _tally(kind, ref, len(per_group))
    check("runner", ref, ours)
    del ref_b, our_b
    if len(per_group) > 1:
        # Every group alone, by fresh builder objects, compared at once: the adapter's
        # builders of equal configurations share buffers (one engine), which the next
        # build reuses.
        for g in range(len(per_group)):
            one = slice(g, g + 1)
            ref = _run(_builders(REFERENCE[kind], kind, case["config"], objs[one]), kind, case,
                       per_group[one], accepted, drafts, False)
            ours = _run(_builders(ADAPTER[kind], kind, case["config"], objs[one]), kind, case,
                        per_group[one], accepted, drafts, False)
            check(f"independent{g}", ref, ours)
    return diffs


def _deferred_context():
    """A commit context of the fp32_deferred backend (the real one needs CUDA layers): all
    the deferred build reads of it is its backend."""
    ctx = object.__new__(KDADeferredCommitContext)
    ctx.__dict__["backend"] = FP32_DEFERRED
    return ctx


def _run_deferred(cls, case: dict, per_group, accepted, drafts, objs):
    """KDA builders bound by vLLM's DeferredRecoverSSMState (Kimi-K3's deferred RecoverSSM,
    which binds only builders that are vLLM's KDA builder), then the runner path; each
    group's metadata with its recoverssm_deferred, or the exception raised."""
    builders = _builders(cls, "kda", case["config"], objs)
    state = DeferredRecoverSSMState(int(case["config"]["max_num_seqs"]), wheel_env.DEVICE)
    groups = [[types.SimpleNamespace(get_metadata_builder=lambda i, b=b: b)] for b in builders]
    state.bind(groups, torch.arange(len(case["step"]["seq_lens"]), dtype=torch.int32))
    out = []
    try:
        for b, m in zip(builders, per_group):
            if getattr(b, "recoverssm_pending", None) is not state.pending:
                raise AssertionError("DeferredRecoverSSMState.bind skipped this builder")
            b.recoverssm_context = _deferred_context()
            wheel_runner._prepare(b, "kda", case["config"], m)
            md = wheel_runner._build(b, case["mode"], m, accepted, drafts)
            out.append((md, md.recoverssm_deferred))
    except Exception as e:  # noqa: BLE001 - compared with the other side
        return e
    return out


def compare_deferred(case: dict) -> list[str]:
    """A KDA RecoverSSM build step under the deferred RecoverSSM on both sides: the metadata
    and its recoverssm_deferred (record rows, pending counts, eager rows, state indices)."""
    per_group, accepted, drafts = wheel_runner._step_inputs(case)
    tokens = max(int(case["step"]["num_actual_tokens"]), int(case["step"]["query_start_loc"][-1]))
    objs = _objects("kda", case["config"], len(per_group), tokens)
    ref = _run_deferred(REFERENCE["kda"], case, per_group, accepted, drafts, objs)
    ours = _run_deferred(ADAPTER["kda"], case, per_group, accepted, drafts, objs)
    if isinstance(ref, Exception) or isinstance(ours, Exception):
        return _compare("deferred", ref, ours)
    # recoverssm_context: the stand-in context, or vLLM's step commit over it (by type).
    diffs = _compare("deferred", [r for r, _ in ref], [o for o, _ in ours], ("recoverssm_context",))
    for g, ((r, rd), (o, od)) in enumerate(zip(ref, ours)):
        if type(o.recoverssm_context) is not type(r.recoverssm_context):
            diffs.append(f"deferred.group{g}.recoverssm_context: type differs")
        if (rd is None) != (od is None):
            diffs.append(f"deferred.group{g}.recoverssm_deferred: None-ness differs")
        elif rd is not None:
            for name in ("record_rows", "pending", "eager", "state_indices"):
                diffs.extend(util.diff(getattr(od, name), getattr(rd, name),
                                       f"deferred.group{g}.recoverssm_deferred.{name}"))
    return diffs


def crafted_cases() -> list[dict]:
    """Rare steps the random stream seldom draws: FULL-graph spec staging of more rows
    (padding) than decode_cudagraph_max_bs, for GDN, KDA and KDA with RecoverSSM (whose
    staging takes up to max_num_seqs rows into [decode_cudagraph_max_bs + 1] buffers)."""
    out = []
    for kind, recoverssm in (("gdn", False), ("kda", False), ("kda", True)):
        n_spec, pads = 6, 6
        n = n_spec + pads
        qsl = [0]
        for i in range(n):
            qsl.append(qsl[-1] + (1 if i < n_spec else 0))
        seq = [100 + i if i < n_spec else 0 for i in range(n)]
        out.append({
            "name": f"crafted/{kind}/staging-past-capture{'-recoverssm' if recoverssm else ''}",
            "builder": kind,
            "mode": "build",
            "config": {
                "num_spec": 1, "max_num_seqs": 64, "max_num_batched_tokens": 2048,
                "full_cuda_graph": True, "max_cudagraph_capture_size": 10,
                "mamba_cache_mode": "none", "block_size": 64,
                "num_speculative_blocks": 0 if recoverssm else 1, "use_recoverssm": recoverssm,
                "num_prefill_checkpoint_blocks": 0, "profile": "vllm-0.34",
            },
            "step": {
                "query_start_loc": qsl, "seq_lens": seq, "seq_lens_cpu_upper_bound": seq,
                "is_prefilling": [False] * n, "num_actual_tokens": qsl[-1],
                "block_table": [[1000 * i + j + 1 for j in range(4)] for i in range(n)],
                "num_decode_draft_tokens_cpu": [0 if i < n_spec else -1 for i in range(n)],
                "num_accepted_tokens": [1] * n,
            },
        })
    return out


def _describe(case: dict) -> str:
    c = case["config"]
    keys = ("num_spec", "mamba_cache_mode", "block_size", "prefill_backend", "full_cuda_graph",
            "use_recoverssm", "num_prefill_checkpoint_blocks", "max_cudagraph_capture_size")
    return f"{case['name']} mode={case['mode']} " + " ".join(f"{k}={c.get(k)}" for k in keys)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=2000, help="random steps per builder kind")
    ap.add_argument("--seed", type=int, default=None, help="default: from the clock (printed)")
    ap.add_argument("--zero-drafts", type=float, default=10, help="percent of all-zero-draft steps")
    ap.add_argument("--public", default=PUBLIC, help="a case file ('' for none)")
    ap.add_argument("--show", type=int, default=5, help="differing cases printed in full")
    ap.add_argument("--record", default="", help="also write the summary to this file")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int(time.time()) % 1000000
    print(f"adapter_diff: seed {seed}, {a.steps} random steps per builder, vllm {wheel_env.vllm.__version__}")
    # vLLM's runner tests its builders with isinstance (_runner_counts, the deferred RecoverSSM).
    for kind in ("gdn", "kda"):
        assert issubclass(ADAPTER[kind], REFERENCE[kind]), f"linmeta's {kind} builder is not vLLM's"
    print(f"profile {lv._PROFILE} (chosen from vLLM's version); linmeta's builders count as vLLM's "
          "for isinstance (GDN, KDA)")

    equal = {"gdn": 0, "kda": 0}
    total = {"gdn": 0, "kda": 0}
    shown = 0
    failures: dict[str, int] = {}

    def one(case: dict) -> None:
        nonlocal shown
        kind = case["builder"]
        total[kind] += 1
        try:
            diffs = compare_case(case)
        except wheel_builders.UnsupportedConfig as e:
            diffs = [f"unsupported config: {e}"]
        if not diffs:
            equal[kind] += 1
            return
        for d in diffs:
            path = d.split(":")[0]
            parts = path.split(".", 2)
            key = parts[2] if len(parts) > 2 else f"{path}: {d.split(':', 1)[1][:60]}"
            key = key.split("[")[0]
            failures[f"{kind} {key}"] = failures.get(f"{kind} {key}", 0) + 1
        if shown < a.show:
            shown += 1
            print(f"DIFF {_describe(case)}")
            for d in diffs[:8]:
                print(f"  {d[:400]}")

    start = time.time()
    if a.public and os.path.isfile(a.public):
        cases = util.load_cases(a.public)
        before = dict(equal)
        for case in cases:
            one(case)
        n_eq = sum(equal.values()) - sum(before.values())
        print(f"public cases ({os.path.basename(a.public)}): {n_eq}/{len(cases)} equal")
    cases = crafted_cases()
    before = sum(equal.values())
    for case in cases:
        one(case)
    print(f"crafted cases: {sum(equal.values()) - before}/{len(cases)} equal")
    for kind in ("gdn", "kda"):
        rng = random.Random(f"{seed}/{kind}")
        for i in range(a.steps):
            case = util.random_case(rng, kind, profile="vllm-0.34", zero_drafts=a.zero_drafts / 100)
            case["name"] = f"random-{seed}/{kind}/{i}"
            one(case)
    # Kimi-K3's deferred RecoverSSM binds KDA builders by class: RecoverSSM build steps.
    rng = random.Random(f"{seed}/deferred")
    deferred = [0, 0]
    while deferred[1] < a.steps // 10:
        case = util.random_case(rng, "kda", profile="vllm-0.34", zero_drafts=a.zero_drafts / 100)
        if not case["config"]["use_recoverssm"] or case["mode"] != "build":
            continue
        case["name"] = f"deferred-{seed}/{deferred[1]}"
        diffs = compare_deferred(case)
        deferred[0] += not diffs
        deferred[1] += 1
        if diffs and shown < a.show:
            shown += 1
            print(f"DIFF {_describe(case)}")
            for d in diffs[:8]:
                print(f"  {d[:400]}")
    print(f"deferred RecoverSSM (KDA builders bound by vLLM's DeferredRecoverSSMState): "
          f"{deferred[0]}/{deferred[1]} equal")
    print("exercised (runner path, group 0 of vLLM's objects): " + ", ".join(
        f"{k} {n}" for k, n in sorted(COVERAGE.items())))
    for key, n in sorted(failures.items(), key=lambda kv: -kv[1])[:20]:
        print(f"  {n:6d}  {key}")
    summary = (
        f"adapter vs vllm 0.34: gdn {equal['gdn']}/{total['gdn']} equal, "
        f"kda {equal['kda']}/{total['kda']} equal, deferred RecoverSSM {deferred[0]}/{deferred[1]} equal"
    )
    print(f"({time.time() - start:.0f} s; {TIE_ORDERS[0]} flashinfer_prefill_seq_order equal up to ties)")
    print(summary)
    if a.record:
        with open(a.record, "a") as f:
            f.write(summary + "\n")
    return 0 if equal == total and deferred[0] == deferred[1] else 1


if __name__ == "__main__":
    sys.exit(main())
