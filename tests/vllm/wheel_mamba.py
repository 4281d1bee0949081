"""Runs one case step through vLLM 0.34.0's Mamba-family builders (Mamba2, Mamba1, ShortConv,
linear attention) the way model runner V2 calls them, and serialises the metadata in the
case format of docs/case-format.md.

What model runner V2 does on a CUDA engine, and the harness the same way:
* one CommonAttentionMetadata per KV-cache group, sharing every step tensor but the block
  table (worker/gpu/attn_utils.py: build_attn_metadata); the accepted-count and draft
  tensors are the same objects for every group;
* build kwargs: ``MambaHybridAttnMetadata.get_extra_attn_kwargs``
  (worker/gpu/model_states/mamba_hybrid.py:55-75) hands ``num_accepted_tokens`` and
  ``num_decode_draft_tokens_cpu`` only to Mamba2 / GDN / ShortConv / PLE-ShortConv builders
  (isinstance); Mamba1 and linear attention get ``build(0, m)`` with no kwargs (Mamba1's
  build() would drop them; linear's build() takes none). The runner passes both as None when
  num_speculative_tokens == 0;
* FULL-graph capture (``mode: "capture"``): ``build_for_cudagraph_capture(m)`` on group 0;
* later groups: the runner caches group 0's metadata under (kv_cache_spec, builder type)
  when ``builder.supports_update_block_table`` and re-gathers with
  ``update_block_table(metadata, block_table, slot_mapping)``, at capture too
  (attn_utils.py:570-592). BaseMambaAttentionMetadataBuilder sets it True and turns it off
  under spec decode (mamba_attn.py:93, 188-189); linear attention inherits False from
  AttentionMetadataBuilder, so its groups each build (or capture) afresh.
The harness also builds every later group independently and requires the same answer, so the
re-gather path and a plain build are checked against each other on every multi-group step.

``expected``: every field of the returned dataclass under vLLM's name, in field order;
tensors as (nested) lists with ``<field>__dtype`` beside them and ``<field>__shape`` for empty
tensors of 2+ dimensions; nested dataclasses (``checkpoint_meta``) and dicts (``nums_dict``,
keys as strings) as objects serialised the same way. The ReplaySSM-only fields are left out
where ReplaySSM is off (the harness checks they are unset). With ``use_replayssm`` (its Triton
path) ``write_pos_d``, ``is_flush_d`` and ``bc_pre_scratch`` are views of the builder's
persistent scratch, which the model's kernels fill: the harness checks their dtypes (int32,
int8, float32), trailing shape ((ngroups, replayssm_buffer_len) for the last) and equal row
counts, and records that count (or null) as linmeta's ``replayssm_rows``;
``replayssm_seq_lens_d`` is recorded when set, ``replayssm_align_block_size`` always, and
FlashInfer's ``replayssm_scratch`` / ``replayssm_state_indices_d`` are checked unset.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import wheel_builders
from wheel_env import torch

# BaseMambaAttentionMetadata fields that only ReplaySSM sets (left out; checked unset).
REPLAYSSM_FIELDS = {
    "write_pos_d": None,
    "is_flush_d": None,
    "bc_pre_scratch": None,
    "replayssm_seq_lens_d": None,
    "replayssm_align_block_size": 0,
    "replayssm_scratch": None,
    "replayssm_state_indices_d": None,
}
# ReplaySSM's (Triton) scratch views: field -> (dtype, the builder's buffer).
REPLAYSSM_SCRATCH = {
    "write_pos_d": (torch.int32, "decode_write_pos_d"),
    "is_flush_d": (torch.int8, "decode_is_flush_d"),
    "bc_pre_scratch": (torch.float32, "decode_bc_pre_scratch"),
}
# Inkling's fields that are the caller's tensors (checked, left out: case files record no table).
PASSED_THROUGH = {"block_table", "slot_mapping"}
# Builders whose build() the runner hands the spec-decode counts (mamba_hybrid.py:59-68).
GETS_SPEC_KWARGS = {"mamba2", "short_conv", "ple_short_conv"}
# Bailing's build() takes num_accepted_tokens though the runner hands it none: the harness
# passes the step's when the case has them (the speculative path an engine's own call takes).
ACCEPTED_KWARG = {"bailing_linear"}


class HarnessMismatch(RuntimeError):
    """The runner's update_block_table path and an independent build disagree (a harness or
    vLLM finding, never a case error)."""


def _dtype(t: torch.Tensor) -> str:
    return str(t.dtype).removeprefix("torch.")


def serialise_value(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, torch.Tensor):
        return value.item() if value.dim() == 0 else value.tolist()
    if isinstance(value, (list, tuple)):
        return [serialise_value(v) for v in value]
    if isinstance(value, dict):
        return serialise_object({str(k): v for k, v in value.items()})
    if dataclasses.is_dataclass(value):
        return serialise_object({f.name: getattr(value, f.name) for f in dataclasses.fields(value)})
    raise TypeError(f"cannot serialise {type(value).__name__}")


def serialise_object(items: dict[str, Any]) -> dict:
    out: dict[str, Any] = {}
    for name, value in items.items():
        out[name] = serialise_value(value)
        if isinstance(value, torch.Tensor):
            out[f"{name}__dtype"] = _dtype(value)
            if value.numel() == 0 and value.dim() >= 2:
                out[f"{name}__shape"] = list(value.shape)
    return out


def _check_passed_through(md, m) -> None:
    """Inkling's block_table and slot_mapping: the caller's own tensors (left out)."""
    assert md.block_table is m.block_table_tensor, "inkling block_table is not the caller's"
    sm = md.slot_mapping
    assert sm.data_ptr() == m.slot_mapping.data_ptr() and sm.shape == m.slot_mapping.shape, (
        "inkling slot_mapping is not the caller's whole slot_mapping")


def _replayssm_rows(md, b) -> int | None:
    """The row count of vLLM's ReplaySSM scratch views (None: unset), after checking each is
    contiguous first rows of a scratch buffer of builder `b`'s shape and dtype."""
    rows = set()
    for name, (dtype, buffer) in REPLAYSSM_SCRATCH.items():
        v, buf = getattr(md, name), getattr(b, buffer)
        if v is None:
            rows.add(None)
            continue
        if v.dtype != dtype or tuple(v.shape[1:]) != tuple(buf.shape[1:]) or not v.is_contiguous():
            raise RuntimeError(f"ReplaySSM {name}: {v.dtype} {tuple(v.shape)}, not rows of "
                               f"{buf.dtype} {tuple(buf.shape)}")
        rows.add(v.shape[0])
    if len(rows) != 1:
        raise RuntimeError(f"ReplaySSM scratch views of different rows {rows}")
    return rows.pop()


def serialise(md, m=None, b=None) -> dict:
    """`b`: the builder (its ReplaySSM scratch buffers' shapes) when ReplaySSM is on."""
    fields = {}
    replayssm = b is not None and getattr(b, "use_replayssm", False)
    if replayssm and (md.replayssm_scratch is not None or md.replayssm_state_indices_d is not None):
        raise RuntimeError("FlashInfer ReplaySSM fields set on the Triton path")
    for f in dataclasses.fields(md):
        value = getattr(md, f.name)
        if f.name in PASSED_THROUGH:
            _check_passed_through(md, m)
            continue
        if replayssm and f.name in REPLAYSSM_SCRATCH:
            if "replayssm_rows" not in fields:
                fields["replayssm_rows"] = _replayssm_rows(md, b)
            continue
        if replayssm and f.name == "replayssm_align_block_size" or (
                replayssm and f.name == "replayssm_seq_lens_d" and value is not None):
            fields[f.name] = value
            continue
        if f.name in REPLAYSSM_FIELDS:
            if value != REPLAYSSM_FIELDS[f.name]:
                raise RuntimeError(f"ReplaySSM field {f.name} set with ReplaySSM off")
            continue
        fields[f.name] = value
    return serialise_object(fields)


def _build(b, builder: str, mode: str, m, accepted, drafts):
    if mode == "capture":
        return b.build_for_cudagraph_capture(m)
    assert mode == "build", mode
    if builder in GETS_SPEC_KWARGS:
        # The runner computes both only when num_speculative_tokens > 0 (else None).
        return b.build(0, m, num_accepted_tokens=accepted, num_decode_draft_tokens_cpu=drafts)
    if builder in ACCEPTED_KWARG and accepted is not None:
        return b.build(0, m, num_accepted_tokens=accepted)
    return b.build(0, m)


def _log_dtypes(dtype_log: dict, builder: str, out: dict, prefix: str = "") -> None:
    for name, value in out.items():
        if name.endswith("__dtype"):
            dtype_log.setdefault((builder, prefix + name.removesuffix("__dtype")), set()).add(value)
        elif isinstance(value, dict):
            _log_dtypes(dtype_log, builder, value, f"{prefix}{name}.")


def execute(case: dict, per_group, accepted, drafts, dtype_log: dict | None = None
            ) -> tuple[dict, list[dict] | None]:
    """Returns (expected, expected_groups or None). Builder exceptions propagate."""
    builder, config, mode = case["builder"], case["config"], case["mode"]
    runner_out = []
    first_md = None
    updated = []
    for g, m in enumerate(per_group):
        b = wheel_builders.make_builder(builder, config, g)
        if g > 0 and b.supports_update_block_table:
            md = b.update_block_table(first_md, m.block_table_tensor, m.slot_mapping)
            updated.append(g)
        else:
            md = _build(b, builder, mode, m, accepted, drafts)
        if g == 0:
            first_md = md
        runner_out.append(serialise(md, m, b))
        if dtype_log is not None:
            _log_dtypes(dtype_log, builder, runner_out[-1])

    for g in updated:
        m = per_group[g]
        b = wheel_builders.make_builder(builder, config, g)
        alone = serialise(_build(b, builder, mode, m, accepted, drafts), m, b)
        if alone != runner_out[g]:
            raise HarnessMismatch(f"group {g}: update_block_table and an independent build differ")
    return runner_out[0], (runner_out if "groups" in case["step"] else None)


# --------------------------------------------------------------------------- provenance probe


def _provenance(value, inputs: dict, buffers: dict) -> str:
    """Where a metadata tensor lives: the caller's tensor itself, a view of one, one of the
    builder's persistent buffers (a view), or a tensor the build made."""
    for name, t in inputs.items():
        if t is not None and value is t:
            return f"caller {name}"
    ptr = value.untyped_storage().data_ptr()
    for name, t in inputs.items():
        if t is not None and t.numel() and ptr == t.untyped_storage().data_ptr():
            return f"view of caller {name}"
    for name, t in buffers.items():
        if t is not None and t.numel() and ptr == t.untyped_storage().data_ptr():
            return f"builder buffer {name}"
    return "new"


def probe(paths: list[str]) -> None:
    """Prints, per builder, field and situation, where each metadata tensor comes from (the
    zero-copy rules a reimplementation has to mirror: which fields alias the caller's inputs)."""
    import collections
    import json

    import wheel_runner

    seen: dict = collections.defaultdict(collections.Counter)
    for path in paths:
        for line in open(path):
            case = json.loads(line)
            if not wheel_builders.is_mamba(case["builder"]) or "error" in case:
                continue
            builder, config, mode = case["builder"], case["config"], case["mode"]
            per_group, accepted, drafts = wheel_runner._step_inputs(case)
            first = None
            for g, m in enumerate(per_group):
                b = wheel_builders.make_builder(builder, config, g)
                via_update = g > 0 and b.supports_update_block_table
                md = (b.update_block_table(first, m.block_table_tensor, m.slot_mapping) if via_update
                      else _build(b, builder, mode, m, accepted, drafts))
                first = first or md
                inputs = {"query_start_loc": m.query_start_loc, "seq_lens": m.seq_lens,
                          "block_table": m.block_table_tensor, "num_accepted_tokens": accepted,
                          "query_start_loc_cpu": m.query_start_loc_cpu,
                          "seq_lens_cpu_upper_bound": m.seq_lens_cpu_upper_bound}
                buffers = {"state_indices_tensor_d": getattr(b, "state_indices_tensor_d", None),
                           "decode_num_accepted_tokens": getattr(b, "decode_num_accepted_tokens", None)}
                nd = md.num_decodes
                situation = (
                    f"mode={mode} cache={config['mamba_cache_mode']} k={'>0' if config['num_spec'] else 0}"
                    f" full_cg={config['full_cuda_graph']} nd={'>0' if nd else 0}"
                    f" np={'>0' if md.num_prefills else 0}{' update_block_table' if via_update else ''}"
                )
                for f in dataclasses.fields(md):
                    v = getattr(md, f.name)
                    if isinstance(v, torch.Tensor):
                        seen[(builder, f.name)][(situation, _provenance(v, inputs, buffers))] += 1
    for (builder, field), rows in sorted(seen.items()):
        kinds = {p for _, p in rows}
        print(f"{builder}.{field}: {', '.join(sorted(kinds))}")
        if len(kinds) > 1:
            for (situation, p), c in sorted(rows.items()):
                print(f"    {p:38s} {situation}  ({c})")


if __name__ == "__main__":
    import sys

    if len(sys.argv) < 3 or sys.argv[1] != "probe":
        print("usage: wheel_mamba.py probe FILLED.jsonl...", file=sys.stderr)
        sys.exit(2)
    probe(sys.argv[2:])
