"""linmeta.vllm (profile vllm-0.34) against vLLM 0.34.0's real metadata builders, object to
object, on CPU (docs/vllm.md): GDN, KDA and the Mamba family (Mamba2, Mamba1, ShortConv, linear
attention). Run with the vLLM venv's interpreter:

  adapter_diff.py [--builders LIST] [--steps N] [--seed S] [--zero-drafts P] [--public FILE]
                  [--mamba-public FILES] [--show K] [--dump F] [--record F]

--builders: a comma- (or space-) separated subset of
gdn,kda,mamba2,mamba1,short_conv,linear,bailing_linear
(default all). For each step both sides get the same vllm_config / kv_cache_spec objects
(tests/vllm/wheel_builders.py, one pair per KV-cache group) and the same CommonAttentionMetadata
/ accepted / draft tensors, and are called as vLLM 0.34's model runner V2 calls them.

GDN and KDA: random steps from tests/python/vllm_oracle_util.py's generator (profile vllm-0.34)
and the cases of --public (default tests/data/vllm034_public.jsonl), as
wheel_runner.py calls vLLM's builders:
* runner path: GDN group 0 builds, later groups ``update_block_table`` from group 0's
  metadata; KDA builds every group (after the runner's aligned state indices in align mode);
  the accepted / draft counts reach build() as MRV2 hands them over (its model state's
  get_extra_attn_kwargs, which tests the builder's class), not directly;
* independent path (multi-group steps): every group built by fresh builder objects;
* deferred pass (--steps / 10 KDA RecoverSSM build steps): both sides' builders bound by
  Kimi-K3's DeferredRecoverSSMState (which binds only builders that are vLLM's KDA builder),
  with an fp32_deferred commit context stand-in; the metadata and recoverssm_deferred.

The Mamba family: random steps from tests/vllm/mamba_steps.py (its generator and seeding:
step i of a builder is line i of ``mamba_steps.py --builder B --count N --seed S
--zero-drafts-percent P``), its --edges steps, and the cases of --mamba-public (default
tests/data/vllm034_mamba_public.jsonl, vllm034_mamba_public_errors.jsonl,
vllm034_mamba.jsonl, vllm034_replayssm.jsonl and vllm034_inkling.jsonl); ReplaySSM steps
(``--replayssm-steps``, mamba_steps.py --replayssm's stream, per base-Mamba builder, with
B_cache groups and buffer lengths varied by case name); Inkling capture steps
(``--capture-steps``). Each step runs (``_mrv2``) as vLLM 0.34's
``build_attn_metadata`` (worker/gpu/attn_utils.py:520-605) with its Mamba-hybrid model state
(model_states/mamba_hybrid.py:44-75):
* runner path: each group its own CommonAttentionMetadata, with ``is_prefilling`` as the
  model state slices it for that group (``get_extra_common_attn_kwargs``); a group whose
  builder ``supports_update_block_table`` and whose (kv_cache_spec, builder type) already has
  metadata this step goes through ``update_block_table`` (k = 0, not linear attention); else
  ``build_for_cudagraph_capture`` for a capture step, else ``build(0, m, **kw)`` with the kwargs
  of ``get_extra_attn_kwargs`` (the spec-decode counts only to builders that are vLLM's Mamba2
  / ShortConv builders: isinstance). Each side decides by its own builder's attributes;
* shared path (multi-group steps): the same, with every group handed the very same step
  objects (is_prefilling, counts): the path where linmeta serves later groups from one plan;
* independent path (multi-group steps): every group alone, by fresh builder objects.
Compared besides the returned objects: the builders' attributes vLLM's runner reads
(supports_update_block_table, reorder_batch_threshold, cudagraph support, ...), and which
output tensors are the caller's own objects (CommonAttentionMetadata tensors, the counts
passed) or another field of the same object, as vLLM's are (``_aliases``). Output tensors
that are views of the caller's tensors in vLLM's (state indices over the block table,
query_start_loc_d) are linmeta's own buffers (docs/vllm.md): counted, not compared.

Every returned object is compared recursively (vllm_oracle_util.diff: dataclass types and
fields, nested dataclasses, nums_dict, host lists; tensors: dtype, shape, device, values;
None-ness). A step the wheel rejects must be rejected by the adapter too (any exception class:
the pairs are counted). The one stand-in on both sides: the RecoverSSM commit context (a
forward-pass object over CUDA layers; wheel_env.py) is the same marker object.

Exit status 1 on any difference.
"""

from __future__ import annotations

import argparse
import collections
import dataclasses
import gc
import json
import os
import random
import sys
import time
import traceback
import types
import zlib

# Unset before linmeta.vllm is imported: the profile it chooses for vLLM 0.34 on its own (as
# under the plugin) must be vLLM 0.34's (checked below).
os.environ.pop("LINMETA_VLLM_PROFILE", None)

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
sys.path.insert(1, os.path.join(REPO, "tests", "python"))

import wheel_env  # noqa: E402  (first: environment and CPU stand-ins)
import mamba_steps  # noqa: E402
import wheel_builders  # noqa: E402
import wheel_mamba  # noqa: E402
import wheel_runner  # noqa: E402
from wheel_env import torch  # noqa: E402

import linmeta  # noqa: E402
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

assert lv.profile() == "vllm-0.34", f"linmeta.vllm chose profile {lv.profile()!r} under vLLM 0.34"

DATA = os.path.join(REPO, "tests", "data")
PUBLIC = os.path.join(DATA, "vllm034_public.jsonl")
MAMBA_PUBLIC = ",".join(os.path.join(DATA, f) for f in (
    "vllm034_mamba_public.jsonl", "vllm034_mamba_public_errors.jsonl", "vllm034_mamba.jsonl",
    "vllm034_replayssm.jsonl", "vllm034_inkling.jsonl"))
GDN_KDA = ("gdn", "kda")
# The Mamba family (mamba2, mamba1, short_conv, linear, bailing, ple) and Inkling's short-conv
# builder, which runs through the same path (a plain AttentionMetadataBuilder: every group builds).
MAMBA = tuple(wheel_builders.MAMBA_BUILDERS) + (wheel_builders.INKLING,)
ALL_BUILDERS = GDN_KDA + MAMBA
ADAPTER = {"gdn": lv.GDNAttentionMetadataBuilder, "kda": lv.KimiK3KDAMetadataBuilder}
REFERENCE = {
    "gdn": wheel_env.GDNAttentionMetadataBuilder,
    "kda": wheel_env.KimiK3KDAMetadataBuilder,
}
for _kind in MAMBA:
    _name = wheel_builders.MAMBA_BUILDERS.get(_kind, ("InklingSconvMetadataBuilder",))[0]
    ADAPTER[_kind] = getattr(lv, _name)
    REFERENCE[_kind] = getattr(wheel_env, _name)

# The stand-in the harness gives vLLM's KDA builder (wheel_env.py), given to the adapter too.
lv.KimiK3KDAMetadataBuilder._get_recoverssm_context = (
    lambda self: wheel_env.RECOVERSSM_CONTEXT_MARKER
)


def _objects(kind: str, config: dict, groups: int, num_tokens: int,
             replayssm_shape=wheel_builders.REPLAYSSM_SHAPE):
    """One (kv_cache_spec, layer_names, vllm_config) per group, shared by both sides."""
    wheel_builders.check_config(kind, config)
    layer = "mixer" if kind in MAMBA else "linear_attn"
    inkling = kind == wheel_builders.INKLING
    out = []
    for g in range(groups):
        vc = wheel_builders.make_vllm_config(kind, config, replayssm_shape)
        # The engine's token budget (the adapter sizes its buffers from it; vLLM's builders
        # do not read it). Inkling's builders both read it: the case's.
        if not inkling:
            vc.scheduler_config.max_num_batched_tokens = max(
                int(config.get("max_num_batched_tokens") or 0),
                num_tokens,
                vc.scheduler_config.max_num_batched_tokens,
            )
        spec = (wheel_builders.make_inkling_spec(config) if inkling
                else wheel_builders.make_kv_cache_spec(kind, config, replayssm_shape))
        out.append((spec, [f"model.layers.{g}.{layer}"], vc))
    return out


def _builders(cls, kind: str, config: dict, objs):
    # The GDN prefill backend vLLM's resolver answers (wheel_env's stand-in), read by both.
    backend = wheel_builders.prefill_backend(kind, config) if kind == "gdn" else "triton"
    wheel_env.set_gdn_prefill_backend(backend)
    out = [cls(spec, names, vc, wheel_env.DEVICE) for spec, names, vc in objs]
    if cls is ADAPTER[kind]:
        for b in out:
            # A configuration linmeta.vllm leaves to vLLM makes vLLM's builder instead: that
            # would compare vLLM with itself.
            if not type(b).__module__.startswith("linmeta."):
                raise AssertionError(f"linmeta.vllm made {type(b).__module__}.{type(b).__name__}"
                                     f" (a fallback) for {kind}")
        # Each builder object has its own engine of one group: nothing is shared.
        engines = {id(b._engine): b._engine.builder.num_groups for b in out}
        if list(engines.values()) != [1] * len(out):
            raise AssertionError(f"linmeta engines {list(engines.values())} for {len(out)} "
                                 "builder objects: builder objects share an engine")
    return out


def _runner_counts(b, m, accepted, drafts):
    """The (accepted, drafts) counts vLLM 0.34's MRV2 hands builder `b`: its model state's
    get_extra_attn_kwargs (MambaHybridAttnMetadata) gives them only to builders it takes for
    GDN-family ones (isinstance), None otherwise."""
    state = MambaHybridAttnMetadata(
        is_prefilling=m.is_prefilling, num_accepted_tokens=accepted,
        num_decode_draft_tokens_cpu=drafts
    )
    kw = state.get_extra_attn_kwargs(b, m.num_reqs)
    return kw.get("num_accepted_tokens"), kw.get("num_decode_draft_tokens_cpu")


def _bare(e: Exception) -> Exception:
    """`e` without its traceback: the frames would keep the builder objects (and with them
    linmeta's engine of that configuration) alive into the next path. Keeps where it was
    raised (file, source line of the last frame) as `raised_at`."""
    frames = traceback.extract_tb(e.__traceback__)
    e.raised_at = (frames[-1].filename, frames[-1].line or "") if frames else ("", "")
    return e.with_traceback(None)


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
                counts = _runner_counts(b, m, accepted, drafts)
                out.append(wheel_runner._build(b, mode, m, *counts))
            else:
                out.append(wheel_runner._build(b, mode, m, accepted, drafts))
    except Exception as e:  # noqa: BLE001 - compared with the other side
        return _bare(e)
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


def _count(tags) -> None:
    for t in tags:
        COVERAGE[t] = COVERAGE.get(t, 0) + 1


def _tally(kind: str, ref, groups: int) -> None:
    """What the reference's group-0 object holds (printed: what the steps exercised)."""
    if isinstance(ref, Exception):
        tags = ["raised"]
    else:
        md = ref[0]
        tags = ["groups>1"] if groups > 1 else []
        tags += [name for name in ("checkpoint", "flashinfer_checkpoint_plan",
                                   "recoverssm_commit", "flashinfer_prefill_seq_order",
                                   "chunk_indices")
                 if getattr(md, name, None) is not None]
        if md.num_spec_decodes and md.num_prefills:
            tags.append("spec+prefill")
        if getattr(md, "checkpoint", None) is not None and md.num_spec_decodes:
            tags.append("checkpoint+spec")
    _count(f"{kind} {t}" for t in tags)


def _compare(label: str, ref, ours, skip=()) -> list[str]:
    """The differences of two sides' per-group metadata lists (or the exceptions raised);
    fields in `skip` are not compared."""
    if isinstance(ref, Exception) or isinstance(ours, Exception):
        if isinstance(ref, Exception) and isinstance(ours, Exception):
            # Both reject the step: an `except` clause for vLLM's exception must catch
            # linmeta's, and `except linmeta.Error` too (linmeta.vllm.Error is both).
            if isinstance(ours, type(ref)) and isinstance(ours, linmeta.Error):
                return []
            return [f"{label}: linmeta raised {type(ours).__name__}, which "
                    f"`except {type(ref).__name__}` (vLLM's) or `except linmeta.Error` "
                    f"does not catch: {str(ours)[:200]}"]
        which = "vLLM" if isinstance(ref, Exception) else "linmeta"
        e = ref if isinstance(ref, Exception) else ours
        return [f"{label}: only {which} raised {type(e).__name__}: {str(e)[:300]}"]
    diffs = []
    if len(ours) != len(ref):
        return [f"{label}: {len(ours)} groups vs reference {len(ref)}"]
    for g, (o, r) in enumerate(zip(ours, ref)):
        path = f"{label}.group{g}"
        diffs.extend(util.diff(o, r, path, skip=TIES + tuple(skip)))
        for name in TIES:
            if hasattr(r, name):
                diffs.extend(_diff_up_to_ties(o, r, name, f"{path}.{name}"))
    return diffs


def compare_case(case: dict) -> list[str]:
    """Every difference between the adapter and the wheel on one GDN / KDA case (empty:
    equal)."""
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


# ------------------------------------------------------------------------- the Mamba family

# Builder attributes vLLM's runner (or the builder's own code) reads, compared where vLLM's
# builder has them.
MAMBA_ATTRS = ("supports_update_block_table", "reorder_batch_threshold", "_cudagraph_support",
               "decode_cudagraph_max_bs", "num_spec_tokens", "use_spec_decode", "chunk_size",
               "needs_causal_conv1d_metadata", "use_replayssm", "replayssm_buffer_len",
               "use_flashinfer_replayssm")
# ReplaySSM's B·C scratch is torch.empty (the model's kernels fill it): its values are not
# compared, its dtype, shape and device are.
UNINITIALISED = ("bc_pre_scratch",)
# ReplaySSM configurations' (B_cache ngroups, replayssm_buffer_len), by case name (_replayssm_shape).
REPLAYSSM_SHAPES = [(g, n) for g in (1, 2, 8) for n in (4, 8, 16, 32)]
# The CommonAttentionMetadata tensors a call hands over (their aliases are compared).
STEP_TENSORS = ("query_start_loc", "query_start_loc_cpu", "seq_lens", "seq_lens_cpu_upper_bound",
                "is_prefilling", "block_table_tensor", "slot_mapping")
# Output tensors whose storage is shared with other caller tensors in vLLM's objects than in
# linmeta's: (builder, field, vLLM's, linmeta's) -> count (views; not compared).
VIEWS: collections.Counter = collections.Counter()
# (builder, vLLM's exception class, linmeta's) of the steps both sides rejected.
RAISED: collections.Counter = collections.Counter()
# Steps (runner path) both sides rejected, per builder.
RAISED_STEPS: collections.Counter = collections.Counter()
# Steps only linmeta rejects by its documented stricter table check, on tables no vLLM runner
# makes (_stricter), per builder.
STRICTER: collections.Counter = collections.Counter()
# Valid steps only vLLM rejects, by a known bug of its builder (_reference_bug), per builder.
REFERENCE_BUG: collections.Counter = collections.Counter()
# linmeta's plans and calls (build, capture, update_block_table) of multi-group steps, per
# path (engine stats): one plan per call, each builder object planning its own.
PLANS: collections.Counter = collections.Counter()
# Runner-path calls per builder and way (build / capture / update_block_table).
CALLS: collections.Counter = collections.Counter()


def _tensors(value, path: str):
    """(path, tensor) of every tensor in a metadata object, depth first in field order."""
    if isinstance(value, torch.Tensor):
        yield path, value
    elif value is None or isinstance(value, (bool, int, float, str)):
        return
    elif dataclasses.is_dataclass(value):
        for f in dataclasses.fields(value):
            yield from _tensors(getattr(value, f.name), f"{path}.{f.name}")
    elif isinstance(value, dict):
        for k, v in value.items():
            yield from _tensors(v, f"{path}[{k!r}]")
    elif isinstance(value, (list, tuple)):
        for i, v in enumerate(value):
            yield from _tensors(v, f"{path}[{i}]")


def _aliases(md, inputs: dict) -> tuple[dict, dict]:
    """({path: the caller's objects and earlier paths of `md` it is}, {path: the caller's
    tensors it is a view of}) for every tensor of `md`."""
    same, views, seen = {}, {}, []
    for path, t in _tensors(md, "md"):
        names = {name for name, x in inputs.items() if x is t}
        names |= {p for p, x in seen if x is t}
        if names:
            same[path] = sorted(names)
        elif t.numel():
            ptr = t.untyped_storage().data_ptr()
            shared = {name for name, x in inputs.items() if isinstance(x, torch.Tensor)
                      and x.numel() and x.untyped_storage().data_ptr() == ptr}
            if shared:
                views[path] = sorted(shared)
        seen.append((path, t))
    return same, views


def _mrv2(builders, kind: str, case: dict, per_group, accepted, drafts, shared: bool):
    """One step through vLLM 0.34's build_attn_metadata (attn_utils.py:520-605) with the
    Mamba-hybrid model state: [(metadata, how it was made, the caller's objects of the
    call)] per group, or the exception raised. `shared`: every group gets the very same step
    objects (is_prefilling, counts) instead of the model state's per-group slices."""
    num_reqs = per_group[0].num_reqs
    capture = case["mode"] == "capture"
    state = MambaHybridAttnMetadata(is_prefilling=per_group[0].is_prefilling,
                                    num_accepted_tokens=accepted,
                                    num_decode_draft_tokens_cpu=drafts)
    cached: dict = {}
    out = []
    try:
        for b, m in zip(builders, per_group):
            inputs = {name: getattr(m, name) for name in STEP_TENSORS}
            key = (b.kv_cache_spec, type(b)) if b.supports_update_block_table else None
            if key in cached:
                md0 = cached[key]
                for path, t in _tensors(md0, "group0"):
                    inputs[path] = t
                md = b.update_block_table(md0, m.block_table_tensor, m.slot_mapping)
                how = "update_block_table"
            elif capture:
                md = b.build_for_cudagraph_capture(m)
                how = "capture"
            else:
                kw = state.get_extra_attn_kwargs(b, num_reqs)
                if not kw and kind in wheel_mamba.ACCEPTED_KWARG and accepted is not None:
                    kw = {"num_accepted_tokens": accepted}  # an engine's own call (Bailing)
                if shared:
                    kw = {k: {"num_accepted_tokens": accepted,
                              "num_decode_draft_tokens_cpu": drafts}[k] for k in kw}
                inputs["accepted"] = kw.get("num_accepted_tokens")
                inputs["drafts"] = kw.get("num_decode_draft_tokens_cpu")
                md = b.build(0, m, **kw)
                how = "build" + (" +counts" if kw else "")
            if key is not None and key not in cached:
                cached[key] = md
            out.append((md, how, inputs))
    except Exception as e:  # noqa: BLE001 - compared with the other side
        return _bare(e)
    return out


def _mamba_group_metadata(per_group, shared: bool):
    """Each group's CommonAttentionMetadata as MRV2 makes it: is_prefilling sliced per group
    by the model state (get_extra_common_attn_kwargs), unless `shared`. Made once and handed
    to both sides."""
    if shared:
        return per_group
    out = []
    state = MambaHybridAttnMetadata(is_prefilling=per_group[0].is_prefilling)
    for g, m in enumerate(per_group):
        if m.is_prefilling is None:  # not an MRV2 step (edge cases): passed as it is
            out.append(m)
        else:
            out.append(m.replace(**state.get_extra_common_attn_kwargs(g, m.num_reqs)))
    return out


def _stricter(case: dict, ref, ours) -> bool:
    """Whether only linmeta rejected the step, by its check that the table is wide enough for
    the gathers (docs/semantics.md §11, "stricter than both references"), on a none-mode table
    narrower than the 1 + num_speculative_blocks columns every vLLM runner's table has (where
    vLLM's FULL-graph staging broadcasts a 1-column table: mamba_steps.py's
    narrow-table-broadcast edge, not an MRV2 step)."""
    config, step = case["config"], case["step"]
    tables = step.get("groups") or [step["block_table"]]
    need = 1 + int(config["num_speculative_blocks"])
    return (not isinstance(ref, Exception) and isinstance(ours, linmeta.Error)
            and "too narrow" in str(ours) and config["mamba_cache_mode"] == "none"
            and any(len(row) < need for table in tables for row in table))


def _reference_bug(kind: str, ref, ours) -> bool:
    """Whether only vLLM raised, on its known bug (docs/semantics.md P3): PLE ShortConv's
    FULL-graph staging of a spec-only step whose num_reqs exceeds decode_cudagraph_max_bs
    copies the whole mask into its [D] buffer's first num_reqs entries
    (`self.spec_sequence_masks[:batch_size].copy_`, sizes differ: RuntimeError). The core
    harness counts the same steps as "reference raised, linmeta answered"."""
    if kind != "ple_short_conv" or not isinstance(ref, RuntimeError) or isinstance(
            ours, Exception):
        return False
    filename, line = getattr(ref, "raised_at", ("", ""))
    return (filename.endswith("short_conv_attn.py")
            and "spec_sequence_masks[:batch_size].copy_" in line)


def _compare_mamba(kind: str, label: str, ref, ours, case: dict) -> list[str]:
    if _stricter(case, ref, ours):
        if label == "runner":
            STRICTER[kind] += 1
        return []
    if _reference_bug(kind, ref, ours):
        if label == "runner":
            REFERENCE_BUG[kind] += 1
        return []
    if isinstance(ref, Exception) or isinstance(ours, Exception):
        if isinstance(ref, Exception) and isinstance(ours, Exception):
            RAISED[(kind, type(ref).__name__, type(ours).__name__)] += 1
        return _compare(label, ref, ours)
    diffs = _compare(label, [md for md, _, _ in ref], [md for md, _, _ in ours], UNINITIALISED)
    for g, ((r, r_how, r_in), (o, o_how, o_in)) in enumerate(zip(ref, ours)):
        path = f"{label}.group{g}"
        for name in UNINITIALISED:
            rv, ov = getattr(r, name, None), getattr(o, name, None)
            if (rv is None) != (ov is None) or rv is not None and (
                    (rv.dtype, rv.shape, rv.device) != (ov.dtype, ov.shape, ov.device)):
                diffs.append(f"{path}.{name}: {_meta(ov)} vs reference {_meta(rv)}")
        if r_how != o_how:
            diffs.append(f"{path}: made by {o_how} vs reference {r_how}")
            continue
        r_same, r_views = _aliases(r, r_in)
        o_same, o_views = _aliases(o, o_in)
        for p in sorted(set(r_same) | set(o_same)):
            if r_same.get(p) != o_same.get(p):
                diffs.append(f"{path}.{p[3:]}: is {o_same.get(p)} vs reference "
                             f"{r_same.get(p)} (aliasing)")
        for p in set(r_views) | set(o_views):
            if r_views.get(p) != o_views.get(p):
                VIEWS[(kind, p[3:], str(r_views.get(p)), str(o_views.get(p)))] += 1
    return diffs


def _meta(t) -> str:
    return "None" if t is None else f"{t.dtype} {tuple(t.shape)} {t.device}"


def _replayssm_shape(case: dict) -> tuple[int, int]:
    """The MambaSpec / cache-config sizes of a ReplaySSM case (case files record none): one of
    REPLAYSSM_SHAPES by its name."""
    if not case["config"].get("use_replayssm") or not case["name"].startswith("mambagen"):
        return wheel_builders.REPLAYSSM_SHAPE
    return REPLAYSSM_SHAPES[zlib.crc32(case["name"].encode()) % len(REPLAYSSM_SHAPES)]


def _tally_mamba(kind: str, case: dict, ref, groups: int) -> None:
    if isinstance(ref, Exception):
        _count([f"{kind} raised"])
        return
    md, how, _ = ref[0]
    step, config = case["step"], case["config"]
    qsl = step["query_start_loc"]
    tags = []
    for _, h, _ in ref:
        CALLS[(kind, h)] += 1
    if groups > 1:
        tags.append("groups>1")
        if any(h == "update_block_table" for _, h, _ in ref):
            tags.append("update_block_table")
    if case["mode"] == "capture":
        tags.append("capture")
        if int(step["num_actual_tokens"]) > qsl[-1] or 0 in step["seq_lens"]:
            tags.append("padded-capture")
    if kind == wheel_builders.INKLING:  # per-token fields over the padded tokens (I1)
        pad = int(step["num_actual_tokens"]) - qsl[-1]
        tags += ["token-pad"] * (pad > 0) + ["zero-length-rows"] * (0 in step["seq_lens"])
        _count(f"{kind} {t}" for t in tags)
        return
    if config["mamba_cache_mode"] == "align":
        tags.append("align")
    if md.num_decodes and not md.num_prefills:
        tags.append("decode-only")
    if md.num_prefills and not md.num_decodes:
        tags.append("prefill-only")
    if md.num_prefills and md.num_decodes:
        tags.append("mixed")
    if getattr(md, "num_accepted_tokens", None) is not None:
        tags.append("spec")
    if getattr(md, "has_initial_states_p", None) is not None:
        init = md.has_initial_states_p.tolist()
        tags += ["prefill+state"] * any(init) + ["prefill-fresh"] * (not all(init))
    if any(b - a > 1024 for a, b in zip(qsl, qsl[1:])):
        tags.append("long-prefill")
    if getattr(md, "checkpoint_meta", None) is not None:
        tags.append("checkpoint")
    if getattr(md, "write_pos_d", None) is not None:
        tags.append("replayssm" + ("-align" if md.replayssm_seq_lens_d is not None else ""))
    if getattr(md, "state_indices_tensor_d", None) is not None and md.num_decodes and (
            md.state_indices_tensor_d.shape[0] > md.num_decodes):
        tags.append("graph-padded")
    if getattr(md, "cu_chunk_seqlen_p", None) is not None and (
            md.cu_chunk_seqlen_p.numel() - 1 > md.num_prefills):
        tags.append("multi-chunk")
    _count(f"{kind} {t}" for t in tags)


def _compare_attrs(kind: str, ref_b, our_b, objs) -> list[str]:
    diffs = []
    for name in MAMBA_ATTRS:
        if hasattr(ref_b, name):
            r, o = getattr(ref_b, name), getattr(our_b, name, "<missing>")
            if r != o:
                diffs.append(f"attributes.{name}: {o!r} vs reference {r!r}")
    spec, _, vc = objs[0]
    r = type(ref_b).get_cudagraph_support(vc, spec)
    o = type(our_b).get_cudagraph_support(vc, spec)
    if r != o:
        diffs.append(f"attributes.get_cudagraph_support: {o!r} vs reference {r!r}")
    return diffs


def compare_mamba_case(case: dict) -> list[str]:
    """Every difference between the adapter and the wheel on one Mamba-family case (empty:
    equal): the runner path, then (multi-group steps) the shared and independent paths."""
    kind, step, config = case["builder"], case["step"], case["config"]
    per_group, accepted, drafts = wheel_runner._step_inputs(case)
    tokens = max(int(step["num_actual_tokens"]), int(step["query_start_loc"][-1]))
    objs = _objects(kind, config, len(per_group), tokens, _replayssm_shape(case))
    diffs: list[str] = []

    paths = [("runner", False)] + ([("shared", True)] if len(per_group) > 1 else [])
    for label, shared in paths:
        ms = _mamba_group_metadata(per_group, shared)
        # One builder object per group, all made before the step; compared at once.
        ref_b = _builders(REFERENCE[kind], kind, config, objs)
        our_b = _builders(ADAPTER[kind], kind, config, objs)
        if label == "runner":
            diffs += _compare_attrs(kind, ref_b[0], our_b[0], objs)
        ref = _mrv2(ref_b, kind, case, ms, accepted, drafts, shared)
        ours = _mrv2(our_b, kind, case, ms, accepted, drafts, shared)
        if len(per_group) > 1 and not isinstance(ours, Exception):
            PLANS[(label, "plans")] += sum(b._engine.stats["plans"] for b in our_b)
            PLANS[(label, "calls")] += len(ours)
        if label == "runner":
            _tally_mamba(kind, case, ref, len(per_group))
            if isinstance(ref, Exception) and isinstance(ours, Exception):
                RAISED_STEPS[kind] += 1
            recorded = case.get("error", {}).get("type")
            if recorded and type(ref).__name__ != recorded:
                diffs.append(f"harness: the wheel gave {type(ref).__name__}, "
                             f"the case records {recorded}")
        diffs += _compare_mamba(kind, label, ref, ours, case)
        del ref_b, our_b, ref, ours
    if len(per_group) > 1:
        ms = _mamba_group_metadata(per_group, False)
        for g in range(len(per_group)):
            one = slice(g, g + 1)
            ref = _mrv2(_builders(REFERENCE[kind], kind, config, objs[one]), kind, case,
                        ms[one], accepted, drafts, False)
            ours = _mrv2(_builders(ADAPTER[kind], kind, config, objs[one]), kind, case,
                         ms[one], accepted, drafts, False)
            diffs += _compare_mamba(kind, f"independent{g}", ref, ours, case)
    return diffs


# ------------------------------------------------------------------------- KDA deferred


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
        return _bare(e)
    return out


def compare_deferred(case: dict) -> list[str]:
    """A KDA RecoverSSM build step under the deferred RecoverSSM on both sides: the metadata
    and its recoverssm_deferred (record rows, pending counts, eager rows, state indices)."""
    per_group, accepted, drafts = wheel_runner._step_inputs(case)
    step = case["step"]
    tokens = max(int(step["num_actual_tokens"]), int(step["query_start_loc"][-1]))
    objs = _objects("kda", case["config"], len(per_group), tokens)
    ref = _run_deferred(REFERENCE["kda"], case, per_group, accepted, drafts, objs)
    ours = _run_deferred(ADAPTER["kda"], case, per_group, accepted, drafts, objs)
    if isinstance(ref, Exception) or isinstance(ours, Exception):
        return _compare("deferred", ref, ours)
    # recoverssm_context: the stand-in context, or vLLM's step commit over it (by type).
    diffs = _compare("deferred", [r for r, _ in ref], [o for o, _ in ours],
                     ("recoverssm_context",))
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
            "use_recoverssm", "num_prefill_checkpoint_blocks", "max_cudagraph_capture_size",
            "chunk_size", "prefill_checkpoint_alignment")
    return f"{case['name']} mode={case['mode']} " + " ".join(
        f"{k}={c.get(k)}" for k in keys if k in c)


def _builder_list(text: str) -> list[str]:
    names = [b for b in text.replace(",", " ").split() if b]
    bad = [b for b in names if b not in ALL_BUILDERS]
    if bad or not names:
        raise argparse.ArgumentTypeError(f"unknown builders {bad} (of {','.join(ALL_BUILDERS)})")
    return [b for b in ALL_BUILDERS if b in names]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--builders", type=_builder_list, default=list(ALL_BUILDERS),
                    help="comma-separated subset of " + ",".join(ALL_BUILDERS))
    ap.add_argument("--steps", type=int, default=2000, help="random steps per builder kind")
    ap.add_argument("--replayssm-steps", type=int, default=None,
                    help="random ReplaySSM steps per Mamba base builder (default: --steps)")
    ap.add_argument("--capture-steps", type=int, default=None,
                    help="random Inkling capture steps (default: --steps)")
    ap.add_argument("--seed", type=int, default=None, help="default: from the clock (printed)")
    ap.add_argument("--zero-drafts", type=float, default=10,
                    help="percent of all-zero-draft steps")
    ap.add_argument("--public", default=PUBLIC, help="a GDN / KDA case file ('' for none)")
    ap.add_argument("--mamba-public", default=MAMBA_PUBLIC,
                    help="comma-separated Mamba-family case files ('' for none)")
    ap.add_argument("--show", type=int, default=5, help="differing cases printed in full")
    ap.add_argument("--dump", default="", help="write every differing case (JSON lines) here")
    ap.add_argument("--record", default="", help="also write the summary to this file")
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int(time.time()) % 1000000
    if a.replayssm_steps is None:
        a.replayssm_steps = a.steps
    if a.capture_steps is None:
        a.capture_steps = a.steps
    kinds = a.builders
    print(f"adapter_diff: seed {seed}, {a.steps} random steps per builder "
          f"({','.join(kinds)}), vllm {wheel_env.vllm.__version__}, "
          f"linmeta from {os.path.dirname(lv.__file__)}")
    # vLLM's runner tests its builders with isinstance (_runner_counts, _mrv2, the deferred
    # RecoverSSM).
    for kind in kinds:
        assert issubclass(ADAPTER[kind], REFERENCE[kind]), f"linmeta's {kind} is not vLLM's"
    print(f"profile {lv.profile()} (chosen from vLLM's version); linmeta's builders count as "
          f"vLLM's for isinstance ({', '.join(kinds)})")

    equal = {k: 0 for k in kinds}
    total = {k: 0 for k in kinds}
    shown = 0
    failures: dict[str, int] = {}
    dump = open(a.dump, "w") if a.dump else None

    def report(case: dict, diffs: list[str]) -> None:
        nonlocal shown
        if dump is not None:
            dump.write(json.dumps(case, separators=(",", ":")) + "\n")
        if shown < a.show:
            shown += 1
            print(f"DIFF {_describe(case)}")
            for d in diffs[:8]:
                print(f"  {d[:400]}")

    def one(case: dict, tally: str = "") -> None:
        kind = case["builder"]
        tally = tally or kind
        total[tally] = total.get(tally, 0) + 1
        try:
            diffs = (compare_mamba_case if kind in MAMBA else compare_case)(case)
        except wheel_builders.UnsupportedConfig as e:
            diffs = [f"unsupported config: {e}"]
        if not diffs:
            equal[tally] = equal.get(tally, 0) + 1
            return
        for d in diffs:
            path = d.split(":")[0]
            parts = path.split(".", 2)
            key = parts[2] if len(parts) > 2 else f"{path}: {d.split(':', 1)[1][:60]}"
            key = key.split("[")[0]
            failures[f"{kind} {key}"] = failures.get(f"{kind} {key}", 0) + 1
        report(case, diffs)

    def run_file(path: str, label: str = "public cases") -> None:
        cases = [c for c in util.load_cases(path) if c["builder"] in kinds]
        before = sum(equal.values())
        for case in cases:
            one(case)
        n_eq = sum(equal.values()) - before
        print(f"{label} ({os.path.basename(path)}): {n_eq}/{len(cases)} equal")

    start = time.time()
    summary = []
    gdn_kda = [k for k in kinds if k in GDN_KDA]
    mamba = [k for k in kinds if k in MAMBA]
    deferred = [0, 0]
    if gdn_kda:
        if a.public:
            run_file(a.public)
        cases = [c for c in crafted_cases() if c["builder"] in kinds]
        before = sum(equal.values())
        for case in cases:
            one(case)
        print(f"crafted cases: {sum(equal.values()) - before}/{len(cases)} equal")
        for kind in gdn_kda:
            rng = random.Random(f"{seed}/{kind}")
            for i in range(a.steps):
                case = util.random_case(rng, kind, profile="vllm-0.34",
                                        zero_drafts=a.zero_drafts / 100)
                case["name"] = f"random-{seed}/{kind}/{i}"
                one(case)
        # Kimi-K3's deferred RecoverSSM binds KDA builders by class: RecoverSSM build steps.
        rng = random.Random(f"{seed}/deferred")
        while "kda" in kinds and deferred[1] < a.steps // 10:
            case = util.random_case(rng, "kda", profile="vllm-0.34",
                                    zero_drafts=a.zero_drafts / 100)
            if not case["config"]["use_recoverssm"] or case["mode"] != "build":
                continue
            case["name"] = f"deferred-{seed}/{deferred[1]}"
            diffs = compare_deferred(case)
            deferred[0] += not diffs
            deferred[1] += 1
            if diffs:
                report(case, diffs)
        if "kda" in kinds:
            print(f"deferred RecoverSSM (KDA builders bound by vLLM's DeferredRecoverSSMState): "
                  f"{deferred[0]}/{deferred[1]} equal")
        line = "adapter vs vllm 0.34: " + ", ".join(
            f"{k} {equal[k]}/{total[k]} equal" for k in gdn_kda)
        if "kda" in kinds:
            line += f", deferred RecoverSSM {deferred[0]}/{deferred[1]} equal"
        summary.append(line)
        print(f"({time.time() - start:.0f} s; {TIE_ORDERS[0]} flashinfer_prefill_seq_order "
              "equal up to ties)")
    if mamba:
        t0 = time.time()
        for path in [p for p in a.mamba_public.split(",") if p]:
            run_file(path)
        cases = [c for c in mamba_steps.edges() if c["builder"] in kinds]
        before = sum(equal.values())
        for case in cases:
            one(case)
        print(f"edge cases (mamba_steps.py --edges): {sum(equal.values()) - before}/"
              f"{len(cases)} equal")
        for kind in mamba:
            # mamba_steps.py main()'s stream: step i is line i of its output for this seed.
            rng = random.Random(f"mamba_steps/{kind}/{seed}")
            t1 = time.time()
            for i in range(a.steps):
                case = mamba_steps.make_case(rng, kind, f"mambagen-{seed}/{kind}/{i}", 15,
                                             a.zero_drafts / 100)
                one(case)
            print(f"{kind}: {a.steps} random steps in {time.time() - t1:.0f} s")
            if kind == wheel_builders.INKLING and a.capture_steps:
                # build_for_cudagraph_capture (FULL-graph padding): its own stream.
                rng = random.Random(f"mamba_steps/{kind}/{seed}/capture")
                t1 = time.time()
                for i in range(a.capture_steps):
                    case = mamba_steps.make_case(rng, kind, f"mambagen-capture-{seed}/{kind}/{i}",
                                                 15, a.zero_drafts / 100, capture=True)
                    one(case, f"{kind}/capture")
                print(f"{kind}/capture: {a.capture_steps} random steps in {time.time() - t1:.0f} s")
            if kind not in mamba_steps.REPLAYSSM or not a.replayssm_steps:
                continue
            # ReplaySSM's Triton path: mamba_steps.py --replayssm's stream.
            rng = random.Random(mamba_steps.stream(kind, seed, True))
            t1 = time.time()
            for i in range(a.replayssm_steps):
                case = mamba_steps.make_case(rng, kind, f"mambagen-replayssm-{seed}/{kind}/{i}",
                                             15, a.zero_drafts / 100, True)
                one(case, f"{kind}/replayssm/{case['config']['mamba_cache_mode']}")
            print(f"{kind}/replayssm: {a.replayssm_steps} random steps in {time.time() - t1:.0f} s")
        raised = RAISED_STEPS
        replayssm = [t for k in mamba for t in (f"{k}/capture", f"{k}/replayssm/none",
                                                f"{k}/replayssm/align") if t in total]
        summary.append("adapter vs vllm 0.34 (Mamba family): " + ", ".join(
            f"{k} {equal.get(k, 0)}/{total[k]} equal ({raised[k]} raised by both"
            + (f", {STRICTER[k]} only by linmeta's stricter table check" if STRICTER[k] else "")
            + (f", {REFERENCE_BUG[k]} only by vLLM's spec_sequence_masks staging bug"
               if REFERENCE_BUG[k] else "")
            + ")" for k in mamba) + "".join(
            f", {k} {equal.get(k, 0)}/{total[k]} equal" for k in replayssm))
        pairs = ", ".join(f"{k} {r}/{o} {n}" for (k, r, o), n in sorted(RAISED.items()))
        print(f"raised on both sides (builder vLLM/linmeta count, every path): {pairs or 'none'}")
        print("runner-path calls: " + ", ".join(
            f"{k} {h} {n}" for (k, h), n in sorted(CALLS.items())))
        print("output tensors over the storage of other caller tensors in vLLM's objects than "
              "in linmeta's (views; not compared): " + (", ".join(
                  f"{k}.{f} (vLLM {r}, linmeta {o}) {n}"
                  for (k, f, r, o), n in sorted(VIEWS.items())) or "none"))
        print("linmeta's plans / calls on multi-group steps: " + ", ".join(
            f"{label} path {PLANS[(label, 'plans')]}/{PLANS[(label, 'calls')]}"
            for label in ("runner", "shared")))
        print(f"({time.time() - t0:.0f} s for the Mamba family)")
    print("exercised (runner path, group 0 of vLLM's objects): " + ", ".join(
        f"{k} {n}" for k, n in sorted(COVERAGE.items())))
    for key, n in sorted(failures.items(), key=lambda kv: -kv[1])[:20]:
        print(f"  {n:6d}  {key}")
    print(f"({time.time() - start:.0f} s in all)")
    for line in summary:
        print(line)
    if dump is not None:
        dump.close()
    if a.record:
        with open(a.record, "a") as f:
            f.write("\n".join(summary) + "\n")
    # vLLM's DeferredRecoverSSMState.bind hangs methods of each builder on the builder (a
    # reference cycle): free the last step's builders now, not whenever the collector next
    # runs, so that nanobind's check at exit finds no native builder alive.
    gc.collect()
    return 0 if equal == total and deferred[0] == deferred[1] else 1


if __name__ == "__main__":
    sys.exit(main())
