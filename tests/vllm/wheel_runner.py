"""Runs one case step through vLLM 0.34.0's builders the way its model runner calls them,
and serialises the metadata in the case format (docs/semantics.md, "Case files").

Model runner V2 (vllm/v1/worker/gpu/attn_utils.py: build_attn_metadata) on a CUDA engine:
* one CommonAttentionMetadata per KV-cache group, sharing every step tensor but the block
  table; the accepted-count and draft tensors are the same objects for every group;
* GDN: group 0 builds (or build_for_cudagraph_capture); every later group with the same
  spec re-gathers its state indices with ``update_block_table`` from group 0's metadata
  (``supports_update_block_table`` is CUDA-only, so the harness calls it directly, after
  setting the aligned state indices the runner precomputes for it);
* KDA (whose metadata is per group): every group builds, after the runner has set its
  aligned state indices in align mode.
The harness also builds every group independently and requires the same answer, so the
runner's re-gather path and a plain build are checked against each other on every step.
The Mamba family (mamba2, mamba1, short_conv, linear) runs in wheel_mamba.py, from the same
step tensors (make_common_metadata / _step_inputs).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import wheel_builders
import wheel_env
import wheel_mamba
from wheel_env import torch

# Output fields shared by both builders, in case-file order.
OUTPUT_FIELDS = [
    "num_prefills",
    "num_prefill_tokens",
    "num_decodes",
    "num_decode_tokens",
    "num_spec_decodes",
    "num_spec_decode_tokens",
    "num_actual_tokens",
    "has_initial_state",
    "chunk_indices",
    "chunk_offsets",
    "prefill_query_start_loc",
    "prefill_state_indices",
    "prefill_has_initial_state",
    "spec_query_start_loc",
    "non_spec_query_start_loc",
    "spec_state_indices_tensor",
    "non_spec_state_indices_tensor",
    "spec_sequence_masks",
    "spec_token_indx",
    "non_spec_token_indx",
    "num_accepted_tokens",
    "uniform_spec_sequence_length",
]
COUNT_FIELDS = OUTPUT_FIELDS[:7]
# Fields that exist only in the 0.34 profile: written only when not None (absent = None).
NEW_GDN_FIELDS = ["checkpoint", "flashinfer_checkpoint_plan"]
NEW_KDA_FIELDS = [
    "spec_token_start",
    "non_spec_token_start",
    "flashinfer_prefill_query_start_loc",
    "flashinfer_prefill_seq_order",
]
# On the metadata objects, not written as such:
NOT_SERIALISED = {
    "nums_dict",  # with batch_ptr / token_chunk_offset_ptr -> "conv1d"
    "batch_ptr",
    "token_chunk_offset_ptr",
    "spec_sequence_masks_cpu",  # host copy of the mask
    "aiter_prefill_metadata",  # ROCm backend only: checked to be None
}
KDA_NOT_SERIALISED = {"recoverssm_context"}  # forward-pass object
CONV_BLOCK_M = 8


def _i32(values) -> torch.Tensor:
    return torch.tensor(values, dtype=torch.int32)


def make_common_metadata(step: dict, block_table: torch.Tensor):
    from vllm.v1.attention.backend import CommonAttentionMetadata

    qsl = step["query_start_loc"]
    seq_lens = step["seq_lens"]
    upper = step["seq_lens_cpu_upper_bound"]
    query_lens = [b - a for a, b in zip(qsl[:-1], qsl[1:])]
    is_prefilling = step["is_prefilling"]
    return CommonAttentionMetadata(
        query_start_loc=_i32(qsl),
        query_start_loc_cpu=_i32(qsl),
        seq_lens=_i32(seq_lens),
        num_reqs=len(seq_lens),
        num_actual_tokens=int(step["num_actual_tokens"]),
        max_query_len=max(query_lens, default=0),
        max_seq_len=max(upper, default=0),
        block_table_tensor=block_table,
        slot_mapping=torch.zeros(int(step["num_actual_tokens"]), dtype=torch.int64),
        causal=True,
        is_prefilling=None if is_prefilling is None else torch.tensor(is_prefilling, dtype=torch.bool),
        seq_lens_cpu_upper_bound=_i32(upper),
    )


# --------------------------------------------------------------------------- outputs


def _json(x: Any):
    if x is None or isinstance(x, (bool, int)):
        return x
    if isinstance(x, torch.Tensor):
        return x.item() if x.dim() == 0 else x.tolist()
    raise TypeError(f"cannot serialise {type(x).__name__}")


def _conv1d(md) -> dict | None:
    nums_dict = md.nums_dict
    if nums_dict is None:
        assert md.batch_ptr is None and md.token_chunk_offset_ptr is None
        return None
    assert list(nums_dict) == [CONV_BLOCK_M], list(nums_dict)
    entry = nums_dict[CONV_BLOCK_M]
    tot = entry["tot"]
    batch_ptr, chunk_ptr = md.batch_ptr, md.token_chunk_offset_ptr
    assert entry["batch_ptr"] is batch_ptr and entry["token_chunk_offset_ptr"] is chunk_ptr
    assert batch_ptr.dtype == chunk_ptr.dtype == torch.int32
    assert entry["mlist_len"] == tot == int(entry["nums"].sum())
    assert entry["mlist"].tolist() == batch_ptr[:tot].tolist()
    assert entry["offsetlist"].tolist() == chunk_ptr[:tot].tolist()
    assert batch_ptr.numel() == chunk_ptr.numel() == 2 * max(1024, tot)
    padding_ok = bool((batch_ptr[tot:] == -1).all()) and bool((chunk_ptr[tot:] == -1).all())
    assert padding_ok, "causal-conv1d program arrays must be PAD_SLOT_ID past tot"
    return {
        "nums": entry["nums"].tolist(),
        "tot": tot,
        "batch_ptr": batch_ptr[:tot].tolist(),
        "token_chunk_offset_ptr": chunk_ptr[:tot].tolist(),
        "capacity_padding_ok": padding_ok,
    }


def _recoverssm_commit(md, m) -> dict | None:
    commit = md.recoverssm_commit
    if commit is None:
        assert md.recoverssm_context is None
        return None
    assert md.recoverssm_context is wheel_env.RECOVERSSM_CONTEXT_MARKER
    align = commit.align
    if align is not None:
        assert align.block_table is m.block_table_tensor
        align = {"num_computed_tokens": _json(align.num_computed_tokens), "block_size": int(align.block_size)}
    return {
        "state_indices": _json(commit.state_indices),
        "query_start_loc": _json(commit.query_start_loc),
        "request_indices": _json(commit.request_indices),
        "align": align,
    }


def _checkpoint(md) -> dict | None:
    ckpt = md.checkpoint
    if ckpt is None:
        return None
    offsets = ckpt.checkpoint_offsets.tolist()
    # The host copies and gather indices travel with the tensors; they must agree.
    assert ckpt.offsets == offsets
    assert ckpt.request_rows is not None and len(ckpt.query_lens) == len(offsets)
    assert ckpt.request_rows.numel() == ckpt.block_cols.numel() == len(offsets)
    return {"checkpoint_offsets": offsets, "state_indices": _json(ckpt.state_indices)}


def _flashinfer_checkpoint_plan(md) -> dict | None:
    plan = md.flashinfer_checkpoint_plan
    if plan is None:
        return None
    assert plan.cu_starts.dtype == plan.rows.dtype == torch.int64
    return {
        "every_n_tokens": int(plan.every_n_tokens),
        "num_checkpoints": int(plan.num_checkpoints),
        "cu_starts": plan.cu_starts.tolist(),
        "rows": plan.rows.tolist(),
    }


def serialise(md, builder: str, m) -> dict:
    names = {f.name for f in dataclasses.fields(md)}
    modelled = set(OUTPUT_FIELDS) | NOT_SERIALISED | set(NEW_GDN_FIELDS) | {"checkpoint"}
    if builder == "kda":
        modelled |= set(NEW_KDA_FIELDS) | {"recoverssm_commit"} | KDA_NOT_SERIALISED
    if names != modelled:
        raise RuntimeError(
            f"{type(md).__name__} fields changed: extra {sorted(names - modelled)}, "
            f"missing {sorted(modelled - names)}"
        )
    assert md.aiter_prefill_metadata is None
    out = {}
    for name in OUTPUT_FIELDS:
        value = getattr(md, name)
        if name in COUNT_FIELDS:
            assert isinstance(value, int) and not isinstance(value, bool), (name, value)
        out[name] = _json(value)
    if builder == "kda":
        assert md.flashinfer_checkpoint_plan is None
        out["recoverssm_commit"] = _recoverssm_commit(md, m)
        out["checkpoint"] = _checkpoint(md)
    out["conv1d"] = _conv1d(md)
    new = {}
    if builder == "gdn":
        new["checkpoint"] = _checkpoint(md)
        new["flashinfer_checkpoint_plan"] = _flashinfer_checkpoint_plan(md)
    else:
        for name in NEW_KDA_FIELDS:
            new[name] = _json(getattr(md, name))
    out.update({k: v for k, v in new.items() if v is not None})
    return out


def dtypes(md) -> dict[str, str]:
    """dtype of every tensor field (for docs/semantics.md)."""
    out = {}
    for f in dataclasses.fields(md):
        v = getattr(md, f.name)
        if isinstance(v, torch.Tensor):
            out[f.name] = str(v.dtype).removeprefix("torch.")
        elif f.name == "checkpoint" and v is not None:
            out["checkpoint.checkpoint_offsets"] = str(v.checkpoint_offsets.dtype).removeprefix("torch.")
            out["checkpoint.state_indices"] = str(v.state_indices.dtype).removeprefix("torch.")
        elif f.name == "recoverssm_commit" and v is not None and v.request_indices is not None:
            out["recoverssm_commit.request_indices"] = str(v.request_indices.dtype).removeprefix("torch.")
        elif f.name == "flashinfer_checkpoint_plan" and v is not None:
            out["flashinfer_checkpoint_plan.cu_starts"] = str(v.cu_starts.dtype).removeprefix("torch.")
    return out


# --------------------------------------------------------------------------- execution


def _prepare(b, kind: str, config: dict, m) -> None:
    """What the CUDA runner sets on a builder before building (align mode only). MRV2
    (model_states/mamba_hybrid.py) sets the aligned state indices only on builders that have
    the attribute (hasattr): vLLM's KDA builder declares it on its class and always reads it;
    GDN's sets it in __init__ where supports_update_block_table, which is CUDA-only, so on
    this CPU harness GDN builders get it as the CUDA runner would give it."""
    if config["mamba_cache_mode"] != "align":
        return
    if kind != "gdn" and not hasattr(b, "mamba_aligned_state_indices"):
        return
    b.mamba_aligned_state_indices = wheel_env.aligned_state_indices(
        m.block_table_tensor, m.seq_lens, int(config["block_size"]), int(config["num_speculative_blocks"])
    )


def _build(b, mode: str, m, accepted, drafts):
    if mode == "capture":
        return b.build_for_cudagraph_capture(m)
    assert mode == "build", mode
    return b.build(0, m, num_accepted_tokens=accepted, num_decode_draft_tokens_cpu=drafts)


def _step_inputs(case: dict):
    step = case["step"]
    tables = step.get("groups") or [step["block_table"]]
    if "groups" in step and step["block_table"] != tables[0]:
        raise ValueError("step.block_table must equal groups[0]")
    base = make_common_metadata(step, _i32(tables[0]))
    per_group = [base] + [base.replace(block_table_tensor=_i32(t)) for t in tables[1:]]
    accepted = None if step["num_accepted_tokens"] is None else _i32(step["num_accepted_tokens"])
    drafts = None if step["num_decode_draft_tokens_cpu"] is None else _i32(step["num_decode_draft_tokens_cpu"])
    return per_group, accepted, drafts


def execute(case: dict, dtype_log: dict | None = None) -> tuple[dict, list[dict] | None]:
    """Returns (expected, expected_groups or None). Builder exceptions propagate."""
    builder, config, mode = case["builder"], case["config"], case["mode"]
    per_group, accepted, drafts = _step_inputs(case)
    if wheel_builders.runs_like_mamba(builder):
        return wheel_mamba.execute(case, per_group, accepted, drafts, dtype_log)

    runner_out = []
    first_md = None
    for g, m in enumerate(per_group):
        b = wheel_builders.make_builder(builder, config, g)
        _prepare(b, builder, config, m)
        if builder == "gdn" and g > 0:
            md = b.update_block_table(first_md, m.block_table_tensor, m.slot_mapping)
        else:
            md = _build(b, mode, m, accepted, drafts)
        if g == 0:
            first_md = md
        if dtype_log is not None:
            for name, dt in dtypes(md).items():
                dtype_log.setdefault((builder, name), set()).add(dt)
        runner_out.append(serialise(md, builder, m))

    if len(per_group) > 1:
        for g, m in enumerate(per_group):
            b = wheel_builders.make_builder(builder, config, g)
            _prepare(b, builder, config, m)
            alone = serialise(_build(b, mode, m, accepted, drafts), builder, m)
            if alone != runner_out[g]:
                raise RuntimeError(f"group {g}: update_block_table and an independent build differ")
    return runner_out[0], (runner_out if "groups" in case["step"] else None)
