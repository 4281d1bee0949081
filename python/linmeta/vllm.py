"""linmeta.vllm: drop-in replacements for vLLM's GDN and Kimi-K3 KDA metadata builders.

``GDNAttentionMetadataBuilder`` and ``KimiK3KDAMetadataBuilder`` take the constructor and
call signatures of vLLM's builders (``../shared/seeds``), read the same configuration
attributes, and return vLLM's own metadata dataclasses (``GDNAttentionMetadata`` /
``KimiK3KDAMetadata``, imported from vLLM when it is importable, identical dataclasses of
this module otherwise) with every field equal to the reference builder's: values, dtypes,
shapes, devices and None-ness.

The builder objects of one engine (one per KV-cache group) share one native linmeta builder
with ``num_groups = G``: the first group's ``build()`` of a scheduler step plans the step and
finishes every group in one launch; the other groups' calls are recognised as the same step
(the test of seed 001's per-step cache, made stricter) and served from that plan, re-gathering
only their own state indices. Anything unrecognised plans afresh.

Importing this module needs torch, not vLLM. ``linmeta.vllm_plugin`` swaps vLLM's builder
classes for these (docs/vllm.md).
"""

from __future__ import annotations

import abc
import dataclasses
import enum
import functools
import logging
import os
import sys
import threading
import weakref
from dataclasses import dataclass, field
from typing import Any

import torch

from . import _linmeta

__all__ = [
    "GDNAttentionMetadata",
    "GDNAttentionMetadataBuilder",
    "KDACheckpointMetadata",
    "KDARecoverSSMAlignMetadata",
    "KDARecoverSSMCommitMetadata",
    "KimiK3KDAMetadata",
    "KimiK3KDAMetadataBuilder",
    "metadata_classes",
]

NULL_BLOCK_ID = _linmeta.NULL_BLOCK_ID
_CONV_BLOCK = _linmeta.CONV_BLOCK  # causal-conv1d BLOCK_M, the key of nums_dict
_FLA_CHUNK_SIZE = _linmeta.FLA_CHUNK_SIZE
# GDN's per-group state-index fields: what update_block_table re-gathers.
_STATE_INDEX_FIELDS = (
    "spec_state_indices_tensor",
    "non_spec_state_indices_tensor",
    "prefill_state_indices",
)
_KDA_CHECKPOINT_ALIGN = 16  # FlashKDA's chunk: kKdaCheckpointAlign (include/linmeta/config.hpp)

# Token capacity when the scheduler config has no max_num_batched_tokens (the oracle's
# stand-in config): it grows on demand (see _Engine._ensure_native).
_DEFAULT_TOKEN_CAPACITY = 8192

# Gather every group's state indices in the first group's launch from the table each group
# used the step before (checked per group before it is served: the same memory, else a
# re-gather). Needs every group's block table of a step to be final in stream order when the
# first group builds, as vLLM's runners do (they commit all tables before building metadata).
# On by default; LINMETA_VLLM_PREFETCH_TABLES=0 turns it off. docs/vllm.md.
_PREFETCH_TABLES = os.environ.get("LINMETA_VLLM_PREFETCH_TABLES", "1") != "0"

# build() and GDN's update_block_table() as one C++ call each (_linmeta.vllm_method's
# descriptors over each object's VllmBuildState) for calls that need nothing but
# the session's result; LINMETA_VLLM_FAST_BUILD=0 keeps the Python methods (_build_python,
# _update_block_table_python) for every call.
_FAST_BUILD = os.environ.get("LINMETA_VLLM_FAST_BUILD", "1") != "0"

# vLLM's nums_dict (mixed steps' conv1d metadata) made by the C++ session when
# linmeta._torch_reader is in use; False (tests) leaves it to _assemble (the "_conv" composite,
# the path without the reader). Read when an engine makes its native builder.
_NUMS_DICT_IN_CPP = True

_this_module = sys.modules[__name__]  # VllmBuildState reads _PREFETCH_TABLES from it


# --------------------------------------------------------------------------------------------
# vLLM's base class and metadata dataclasses (or identical ones when vLLM is not importable)


def _import_vllm_base():
    for mod in ("vllm.v1.attention.backend", "vllm.v1.attention.backends.utils"):
        try:
            m = __import__(mod, fromlist=["AttentionMetadataBuilder", "AttentionCGSupport"])
            return m.AttentionMetadataBuilder, m.AttentionCGSupport
        except Exception:  # noqa: BLE001 - vLLM absent or a different layout
            continue
    return None, None


_VllmBase, _VllmCGSupport = _import_vllm_base()


def _default_profile(env: str | None, vllm_version: str | None) -> str | None:
    """The rules profile of the native builders (docs/vllm.md): LINMETA_VLLM_PROFILE when set
    ("seed" or "vllm-0.34"); else the rules of the vLLM this process runs: "vllm-0.34" for
    vLLM 0.34.x, the seed rules (None) for any other version (logged: they are not checked
    against it) and without vLLM."""
    if env:
        return env
    if vllm_version is None:
        return None
    if vllm_version.startswith("0.34."):
        return "vllm-0.34"
    logging.getLogger("linmeta.vllm").warning(
        "linmeta.vllm: vLLM %s has no rules profile of its own; the builders follow the seed "
        "rules (LINMETA_VLLM_PROFILE=vllm-0.34 selects vLLM 0.34's)",
        vllm_version,
    )
    return None


def _vllm_version() -> str | None:
    """vLLM's version when vLLM is imported (a stand-in package without one: None)."""
    v = getattr(sys.modules.get("vllm"), "__version__", None)
    return v if isinstance(v, str) else None


_PROFILE = _default_profile(os.environ.get("LINMETA_VLLM_PROFILE"), _vllm_version())


class _LocalCGSupport(enum.Enum):
    """vLLM's AttentionCGSupport (used when vLLM is not importable)."""

    ALWAYS = 3
    UNIFORM_BATCH = 2
    UNIFORM_SINGLE_TOKEN_DECODE = 1
    NEVER = 0


AttentionCGSupport = _VllmCGSupport if _VllmCGSupport is not None else _LocalCGSupport


class _LocalAttentionMetadataBuilder:
    """The parts of vLLM's AttentionMetadataBuilder base class the builders use."""

    _cudagraph_support = AttentionCGSupport.NEVER
    reorder_batch_threshold: int | None = None
    supports_update_block_table: bool = False

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        self.kv_cache_spec = kv_cache_spec
        self.layer_names = layer_names
        self.vllm_config = vllm_config
        self.device = device

    @classmethod
    def get_cudagraph_support(cls, vllm_config, kv_cache_spec):
        return cls._cudagraph_support

    def _init_reorder_batch_threshold(
        self,
        reorder_batch_threshold: int | None = 1,
        supports_spec_as_decode: bool = False,
        supports_dcp_with_varlen: bool = False,
    ) -> None:
        threshold = reorder_batch_threshold
        spec = self.vllm_config.speculative_config
        if threshold is not None and supports_spec_as_decode and spec is not None:
            k = spec.num_speculative_tokens or 0
            per_draft = 2 if getattr(spec, "parallel_drafting", False) else 1
            threshold = max(threshold, 1 + per_draft * k)
        parallel = getattr(self.vllm_config, "parallel_config", None)
        dcp = getattr(parallel, "decode_context_parallel_size", 1)
        if threshold is not None and dcp > 1 and not supports_dcp_with_varlen:
            threshold = 1
        self.reorder_batch_threshold = threshold

    def use_cascade_attention(self, *args, **kwargs) -> bool:
        return False


_Base = _VllmBase if _VllmBase is not None else _LocalAttentionMetadataBuilder


@dataclass
class GDNAttentionMetadata:
    """vLLM's GDNAttentionMetadata (field for field), used when vLLM is not importable."""

    num_prefills: int
    num_prefill_tokens: int
    num_decodes: int
    num_decode_tokens: int
    num_spec_decodes: int
    num_spec_decode_tokens: int
    num_actual_tokens: int

    has_initial_state: torch.Tensor | None = None

    spec_query_start_loc: torch.Tensor | None = None
    non_spec_query_start_loc: torch.Tensor | None = None

    spec_state_indices_tensor: torch.Tensor | None = None
    non_spec_state_indices_tensor: torch.Tensor | None = None
    spec_sequence_masks: torch.Tensor | None = None
    spec_sequence_masks_cpu: torch.Tensor | None = None
    spec_token_indx: torch.Tensor | None = None
    non_spec_token_indx: torch.Tensor | None = None

    num_accepted_tokens: torch.Tensor | None = None
    uniform_spec_sequence_length: int | None = None

    chunk_indices: torch.Tensor | None = None
    chunk_offsets: torch.Tensor | None = None
    prefill_query_start_loc: torch.Tensor | None = None
    prefill_state_indices: torch.Tensor | None = None
    prefill_has_initial_state: torch.Tensor | None = None

    nums_dict: dict | None = None
    batch_ptr: torch.Tensor | None = None
    token_chunk_offset_ptr: torch.Tensor | None = None


@dataclass
class KDARecoverSSMAlignMetadata:
    block_table: torch.Tensor
    num_computed_tokens: torch.Tensor
    block_size: int


@dataclass
class KDARecoverSSMCommitMetadata:
    state_indices: torch.Tensor
    query_start_loc: torch.Tensor
    request_indices: torch.Tensor | None
    align: KDARecoverSSMAlignMetadata | None


@dataclass
class KDACheckpointMetadata:
    checkpoint_offsets: torch.Tensor
    state_indices: torch.Tensor


@dataclass
class KimiK3KDAMetadata(GDNAttentionMetadata):
    """vLLM's KimiK3KDAMetadata (field for field), used when vLLM is not importable."""

    recoverssm_commit: KDARecoverSSMCommitMetadata | None = None
    recoverssm_context: Any = field(default=None, repr=False, compare=False)
    checkpoint: KDACheckpointMetadata | None = None

    def commit_recoverssm_state(self, num_accepted_tokens: torch.Tensor):
        """As vLLM's: hands the accepted counts to the RecoverSSM commit context."""
        commit = self.recoverssm_commit
        if commit is None:
            return None
        context = self.recoverssm_context
        assert context is not None, "recoverssm_context needs vLLM's Kimi-K3 ops"
        align = commit.align
        context.commit(
            num_accepted_tokens,
            commit.state_indices[: self.num_spec_decodes, 0],
            commit.query_start_loc[: self.num_spec_decodes + 1],
            request_indices=commit.request_indices,
            block_table=align.block_table if align is not None else None,
            num_computed_tokens=align.num_computed_tokens if align is not None else None,
            mamba_block_size=align.block_size if align is not None else None,
        )
        return None


_LOCAL_CLASSES = {
    "gdn": GDNAttentionMetadata,
    "kda": KimiK3KDAMetadata,
    "commit": KDARecoverSSMCommitMetadata,
    "align": KDARecoverSSMAlignMetadata,
    "checkpoint": KDACheckpointMetadata,
}


def metadata_classes(prefer_vllm: bool = True) -> dict:
    """The dataclasses the builders return: vLLM's when importable (and prefer_vllm), else
    this module's. Keys: gdn, kda, commit, align, checkpoint; with vLLM 0.34 also
    gdn_checkpoint and fi_plan (its GDN prefill checkpoint classes)."""
    out = dict(_LOCAL_CLASSES)
    if not prefer_vllm:
        return out
    try:
        from vllm.v1.attention.backends.gdn_attn import GDNAttentionMetadata as gdn

        out["gdn"] = gdn
    except Exception:  # noqa: BLE001
        return out
    try:  # vLLM 0.34: GDN prefill checkpoints and the FlashInfer checkpoint plan
        from vllm.model_executor.layers.mamba.checkpoint import MambaPrefillCheckpointMetadata
        from vllm.v1.attention.backends.gdn_attn import GDNFlashInferCheckpointPlan

        out.update(
            gdn_checkpoint=MambaPrefillCheckpointMetadata, fi_plan=GDNFlashInferCheckpointPlan
        )
    except Exception:  # noqa: BLE001 - an older vLLM
        pass
    try:
        from vllm.models.kimi_k3.nvidia import kda_metadata as kda

        out.update(
            kda=kda.KimiK3KDAMetadata,
            commit=kda.KDARecoverSSMCommitMetadata,
            align=kda.KDARecoverSSMAlignMetadata,
        )
        # vLLM 0.34's KDA checkpoints are the shared MambaPrefillCheckpointMetadata.
        out["checkpoint"] = getattr(kda, "KDACheckpointMetadata", None) or out.get(
            "gdn_checkpoint", out["checkpoint"]
        )
    except Exception:  # noqa: BLE001 - vLLM without Kimi-K3
        pass
    return out


def _defaults(cls) -> dict:
    """The default of every field of dataclass `cls` that has one (factories called)."""
    out = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            out[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            out[f.name] = f.default_factory()  # type: ignore[misc]
    return out


@functools.lru_cache(maxsize=None)
def _is_plain_dataclass(cls) -> bool:
    """Whether an instance of dataclass `cls` is its __dict__ of every field (no
    __post_init__, slots, frozen or factories): such instances are made without __init__."""
    return (
        not hasattr(cls, "__post_init__")
        and "__slots__" not in cls.__dict__
        and not cls.__dataclass_params__.frozen
        and all(f.init and f.default_factory is dataclasses.MISSING for f in dataclasses.fields(cls))
    )


def _with_dict(cls, values: dict):
    """An instance of plain dataclass `cls` whose __dict__ is `values` (every field; no
    __init__ call; VllmBuildState does the same in C++)."""
    obj = object.__new__(cls)
    obj.__dict__ = values
    return obj


def _replace(obj, changes: dict):
    """dataclasses.replace(obj, **changes); a plain dataclass copies its __dict__ instead of
    calling __init__ (the same object, without the per-field Python work)."""
    cls = type(obj)
    if not _is_plain_dataclass(cls):
        return dataclasses.replace(obj, **changes)
    return _with_dict(cls, {**obj.__dict__, **changes})


def _fast_constructor(cls):
    """A constructor of dataclass `cls` from a dict holding every field (VllmSession starts
    each dict from the defaults): plain dataclasses get the dict as their __dict__
    (_with_dict); any other goes through __init__."""
    if not _is_plain_dataclass(cls):
        return lambda values: cls(**values)
    return functools.partial(_with_dict, cls)


# --------------------------------------------------------------------------------------------
# Input dtypes: linmeta reads int32 accepted / draft counts; vLLM versions keep them as int64.
# linmeta's outputs carry vLLM's dtypes natively (int64 chunk_offsets and token partitions).


def _as_int32(t):
    if t is None or t.dtype is torch.int32:
        return t
    return t.to(torch.int32)


class _Int32Inputs:
    """The int32 copies of a step's int64 accepted / draft counts, made once per step and
    handed to every group, so that the groups still see one set of objects."""

    __slots__ = ("src", "out")

    def __init__(self):
        self.src = (None, None)
        self.out = (None, None)

    def __call__(self, accepted, drafts):
        a, d = self.src
        if a is accepted and d is drafts:
            return self.out
        self.src = (accepted, drafts)
        self.out = (_as_int32(accepted), _as_int32(drafts))
        return self.out


def _accepted_dtype(d, accepted_dtype, staged):
    """The reference slices the caller's accepted counts outside the persistent int32 buffer,
    so they keep the caller's dtype there (int64 in some vLLM versions)."""
    acc = d["num_accepted_tokens"]
    if acc is not None and accepted_dtype is not torch.int32 and not staged:
        d["num_accepted_tokens"] = acc.to(accepted_dtype)


_INT32 = torch.int32

_MASK_RING_SLOTS = 8  # host spec-mask rows cycled by builds (spec_sequence_masks_cpu)


def _conv_host_lists(nums_view, tot):
    """vLLM's compute_causal_conv1d_metadata host lists from the per-sequence program counts
    (a view of linmeta's host buffer): (nums int32, mlist int64, offsetlist int32), new CPU
    tensors. Made in C++ by linmeta._torch_reader when it is in use (~1 µs), else with torch
    ops (a clone and two torch.empty, several µs)."""
    lists = _linmeta.conv_host_lists(nums_view, tot)
    if lists is not None:
        return lists
    return _conv_host_lists_torch(nums_view, tot)


def _conv_host_lists_torch(nums_view, tot):
    """_conv_host_lists with torch ops (no linmeta._torch_reader)."""
    nums = nums_view.clone()
    mlist = torch.empty(tot, dtype=torch.int64)
    offsetlist = torch.empty(tot, dtype=torch.int32)
    _linmeta.fill_conv_lists(nums, mlist, offsetlist)
    return nums, mlist, offsetlist


def _with_index(device: torch.device) -> torch.device:
    """`device`, a CUDA device without an index made torch's current one (what it means now):
    the engine's native builder allocates there, and its builds read that device's current
    stream (in C++, by index: VllmBuildState)."""
    if device.type == "cuda" and device.index is None:
        return torch.device("cuda", torch.cuda.current_device())
    return device


def _stream_reader(device: torch.device):
    """A function of no arguments that returns the raw handle of torch's current stream on
    `device` (0 off CUDA), a CUDA device with an index (_with_index): one C function call."""
    if device.type != "cuda":
        return lambda: 0
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return functools.partial(raw, device.index)
    return lambda: torch.cuda.current_stream(device.index).cuda_stream


# --------------------------------------------------------------------------------------------
# One native builder shared by the builder objects (KV-cache groups) of an engine


class _Engine:
    """A native builder with one KV-cache group per registered builder object; the step
    logic (plan once, serve the other groups) is VllmSession's (python/src/vllm_session.cpp)."""

    def __init__(self, kind: str, config: dict, device: torch.device, cls):
        self.kind = kind
        self.config = dict(config)
        self.device = device
        self.current_stream = _stream_reader(device)
        self.cls = cls
        self.token_capacity = config["max_num_batched_tokens"] or _DEFAULT_TOKEN_CAPACITY
        self.grow = config["max_num_batched_tokens"] is None
        self.slots: dict[int, weakref.ref] = {}
        self.native = None
        self.session = None
        self.conv = (None, 0, None)  # (session, plan, host lists) of the last step with conv1d
        self.lock = threading.Lock()
        self.as_int32 = _Int32Inputs()
        self.mask_ring = None
        if kind == "gdn" and config["num_spec"] > 0:
            self.mask_ring = torch.zeros(
                (_MASK_RING_SLOTS, config["max_num_seqs"]), dtype=torch.bool
            )

    # -- groups

    def register(self, obj) -> int:
        with self.lock:
            slot = 0
            while slot in self.slots and self.slots[slot]() is not None:
                slot += 1
            self.slots[slot] = weakref.ref(obj)
            if self.native is not None and slot >= self.native.num_groups:
                # Too few groups: the next call makes a native builder with enough of them
                # (_ensure_native), so that every group of a step shares one plan.
                self.session = None
            return slot

    def alive(self) -> bool:
        return any(r() is not None for r in list(self.slots.values()))

    def _ensure_native(self, num_actual_tokens: int):
        groups = max(self.slots) + 1 if self.slots else 1
        need_tokens = self.token_capacity
        if self.grow and num_actual_tokens > need_tokens:
            while need_tokens < num_actual_tokens:
                need_tokens *= 2
        if (
            self.native is not None
            and self.native.num_groups >= groups
            and need_tokens == self.token_capacity
        ):
            return
        # A new native builder: new buffers (only before CUDA-graph capture in an engine:
        # every builder object exists by then, and vLLM's config fixes the token capacity).
        self.token_capacity = need_tokens
        cls = _linmeta.KdaMetadataBuilder if self.kind == "kda" else _linmeta.GdnMetadataBuilder
        cfg = dict(self.config, max_num_batched_tokens=need_tokens)
        target = "cuda" if self.device.type == "cuda" else "host"
        if target == "cuda":
            with torch.cuda.device(self.device):
                self.native = cls(**cfg, target=target, num_groups=groups, array_type="torch")
        else:
            self.native = cls(**cfg, target=target, num_groups=groups, array_type="torch")
        session = _linmeta.VllmSession(self.native)
        fields = [f.name for f in dataclasses.fields(self.cls)]
        # The session makes vLLM's nums_dict itself when linmeta._torch_reader is in use;
        # otherwise results carry "_conv" and _assemble makes it (_conv below).
        conv_block = _CONV_BLOCK if _NUMS_DICT_IN_CPP else None
        session.configure(fields, _defaults(self.cls), self.mask_ring, self.grow, conv_block)
        self.session = session

    # -- steps

    def run(self, slot, m, table, accepted, drafts, capture):
        """This group's field dict: served from the step's plan, or planned afresh."""
        for attempt in range(2):
            if self.session is not None:
                d = self.session.call(
                    m, table, accepted, drafts, capture, slot, self.current_stream(),
                    _PREFETCH_TABLES,
                )
                if d is not None:
                    return d
            if attempt == 0:
                # No builder yet, a builder object registered after the last one was made
                # (slot past its groups), or (grow) more tokens than its capacity: a larger one.
                self._ensure_native(m.num_actual_tokens)
        raise _linmeta.Error("linmeta: internal error: a new native builder refused the step")

    def conv_lists(self, nums_view, tot):
        """vLLM's conv1d host lists of the last plan, made once per step for every group."""
        session, plan, lists = self.conv
        if session is not self.session or plan != self.session.plans:
            lists = _conv_host_lists(nums_view, tot)
            self.conv = (self.session, self.session.plans, lists)
        return lists

    def regather(self, slot, metadata, table):
        """`slot`'s field dict with its state indices gathered from `table` (re-gathered
        unless the step's launch gathered them from that table's memory already), when
        `metadata` belongs to the last planned step; None otherwise."""
        session = self.session
        if session is None:
            return None
        return session.serve(slot, table, self.current_stream, metadata.num_actual_tokens)


_ENGINES: dict[tuple, _Engine] = {}
_ENGINES_LOCK = threading.Lock()


def _engine(kind: str, config: dict, device: torch.device, cls) -> _Engine:
    """The engine of every builder object with this configuration (one per KV-cache group).
    Engines whose builder objects are all gone are dropped here."""
    key = (kind, str(device), cls) + tuple(sorted(config.items()))
    with _ENGINES_LOCK:
        for k in [k for k, e in _ENGINES.items() if k != key and not e.alive()]:
            del _ENGINES[k]
        e = _ENGINES.get(key)
        if e is None:
            e = _ENGINES[key] = _Engine(kind, config, device, cls)
        return e


def _seq_lens_upper_bound(m):
    """The host upper bound of seq_lens, as VllmSession.call reads it (CallInputs)."""
    ub = getattr(m, "seq_lens_cpu_upper_bound", None)
    if ub is None:
        ub = m.seq_lens_cpu  # older vLLM: the exact host copy
    return ub


# --------------------------------------------------------------------------------------------
# The builders


def _supports_update_block_table(cls, vllm_config, device: torch.device) -> bool:
    """vLLM's supports_update_block_table for a builder of class `cls`: GDN's own class only
    (KDA's RecoverSSM / checkpoint metadata is per group) on CUDA; the seed builder also
    needs the V2 model runner (use_v2_model_runner), vLLM 0.34's does not (MRV2 is its only
    runner)."""
    if cls is not GDNAttentionMetadataBuilder or device.type != "cuda":
        return False
    return _PROFILE == "vllm-0.34" or bool(getattr(vllm_config, "use_v2_model_runner", False))


class GDNAttentionMetadataBuilder(_Base):
    """vLLM's GDNAttentionMetadataBuilder, built by linmeta (see the module docstring)."""

    _cudagraph_support = AttentionCGSupport.UNIFORM_BATCH
    reorder_batch_threshold: int = 1
    _kind = "gdn"

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device):
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.compilation_config = vllm_config.compilation_config
        self.speculative_config = vllm_config.speculative_config
        self.gdn_prefill_backend = _resolve_gdn_prefill_backend(vllm_config)
        if self.speculative_config:
            assert self.speculative_config.num_speculative_tokens is not None
            self.num_spec: int = self.speculative_config.num_speculative_tokens
        else:
            self.num_spec = 0
        self.use_spec_decode: bool = self.num_spec > 0
        self._init_reorder_batch_threshold(1, self.use_spec_decode)
        self.use_full_cuda_graph: bool = self.compilation_config.cudagraph_mode.has_full_cudagraphs()
        self.supports_update_block_table = _supports_update_block_table(
            type(self), vllm_config, torch.device(device)
        )
        if self.supports_update_block_table:
            # vLLM's MRV2 fills this with the aligned state indices of every request.
            self.mamba_aligned_state_indices: torch.Tensor | None = None
        sched = vllm_config.scheduler_config
        self.decode_cudagraph_max_bs: int = sched.max_num_seqs * (self.num_spec + 1)
        if self.compilation_config.max_cudagraph_capture_size is not None:
            self.decode_cudagraph_max_bs = min(
                self.decode_cudagraph_max_bs, self.compilation_config.max_cudagraph_capture_size
            )
        self._mamba_cache_mode = vllm_config.cache_config.mamba_cache_mode
        self._config = self._linmeta_config()
        self._device = _with_index(torch.device(device))
        classes = metadata_classes()
        self._classes = classes
        self._make = _fast_constructor(classes[self._kind])
        # A result dict of exactly the dataclass's fields needs no assembly (no composites under
        # private keys), except the cutedsl backend's GDN chunk metadata.
        plain = self._kind != "gdn" or self.gdn_prefill_backend != "cutedsl"
        self._plain_len = len(dataclasses.fields(classes[self._kind])) if plain else -1
        self._engine = _engine(self._kind, self._config, self._device, classes[self._kind])
        self._slot = self._engine.register(self)
        self._aligned_engine = None  # MRV2's precomputed aligned indices (made on first use)
        self._aligned_slot = -1
        self._install_fast_build()

    def _install_fast_build(self):
        """The fixed parts of build()'s C++ path (VllmBuildState, python/src/vllm_build_call.cpp);
        without them (LINMETA_VLLM_FAST_BUILD=0) build() is _build_python."""
        if not _FAST_BUILD:
            return
        cls = type(self)
        dc = self._classes[self._kind]
        self._fast_build = _linmeta.VllmBuildState(
            self._engine,
            self._slot,
            _this_module,
            cls._build_python,
            cls._assemble,
            dc if _is_plain_dataclass(dc) else None,
            self._make,
            self._plain_len,
            self._fast_build_aligned_rule(),
            torch.int32,
            self._cuda_index(),
            self._fast_update_rule(),
            _STATE_INDEX_FIELDS,
            self._fast_commit(),
        )

    def _fast_commit(self):
        """VllmBuildState's recipe for KDA's RecoverSSM commit objects (KimiK3KDA...); GDN
        has none."""
        return None

    def _cuda_index(self) -> int:
        """The CUDA device index whose current stream builds run on (VllmBuildState reads it
        in C++); -1 off CUDA (then engine.current_stream() is called)."""
        dev = self._device
        return dev.index if dev.type == "cuda" else -1

    # -- configuration

    def _linmeta_config(self) -> dict:
        vc, spec = self.vllm_config, self.kv_cache_spec
        cc = self.compilation_config
        cap = cc.max_cudagraph_capture_size
        profile = {}
        if _PROFILE == "vllm-0.34":
            # 0.34: chunk metadata follows the prefill backend (none for FlashInfer, rule R4),
            # and FlashInfer prefills may carry checkpoint blocks (rule R5).
            profile = dict(
                profile=_PROFILE,
                prefill_backend=(
                    "flashinfer" if self.gdn_prefill_backend == "flashinfer" else "triton"
                ),
                chunk_metadata=True,
                num_prefill_checkpoint_blocks=self._checkpoint_blocks(),
            )
        elif _PROFILE:
            profile = dict(profile=_PROFILE)
        cfg = dict(
            num_spec=self.num_spec,
            max_num_seqs=int(vc.scheduler_config.max_num_seqs),
            max_num_batched_tokens=getattr(vc.scheduler_config, "max_num_batched_tokens", None),
            full_cuda_graph=bool(self.use_full_cuda_graph),
            max_cudagraph_capture_size=None if cap is None else int(cap),
            mamba_cache_mode=self._mamba_cache_mode,
            block_size=int(spec.block_size),
            num_speculative_blocks=int(getattr(spec, "num_speculative_blocks", 0) or 0),
            chunk_metadata=self.gdn_prefill_backend in ("triton", "flashinfer"),
            use_recoverssm=False,
            num_prefill_checkpoint_blocks=0,
        )
        cfg.update(profile)
        return cfg

    def _checkpoint_blocks(self) -> int:
        """kv_cache_spec.num_prefill_checkpoint_blocks as the native builder takes it. vLLM
        0.34 exports checkpoints on the layer's prefill_checkpoint_alignment grid (none when
        it is None); linmeta's rules use the grid a vLLM 0.34 engine sets (KDA: FlashKDA's 16;
        GDN: the Mamba block size) and refuse any other."""
        spec = self.kv_cache_spec
        blocks = int(getattr(spec, "num_prefill_checkpoint_blocks", 0) or 0)
        if _PROFILE != "vllm-0.34" or blocks == 0:
            return blocks
        alignment = getattr(spec, "prefill_checkpoint_alignment", None)
        if alignment is None:
            return 0
        expected = _KDA_CHECKPOINT_ALIGN if self._kind == "kda" else int(spec.block_size)
        if int(alignment) != expected:
            raise NotImplementedError(
                f"linmeta: prefill_checkpoint_alignment = {alignment}; the vllm-0.34 rules "
                f"export {self._kind.upper()} checkpoints on a {expected}-token grid"
            )
        return blocks

    def _precomputed_aligned(self):
        """MRV2's aligned state indices when this builder reads them, else None.

        vllm-0.34 profile: None. There the runner's precompute (compute_aligned_state_indices
        from the step's seq_lens) is the gather the native align mode makes from the block
        table, and align mode also gives what the precomputed table cannot: the prefill
        checkpoints and the RecoverSSM commit's align metadata (both from the block table).
        KDA requires the precompute in align mode, as vLLM 0.34's builder asserts."""
        aligned = getattr(self, "mamba_aligned_state_indices", None)
        if _PROFILE != "vllm-0.34":
            return aligned
        if self._kind == "kda" and self._mamba_cache_mode == "align":
            assert aligned is not None, "Aligned Mamba state indices must be precomputed"
        return None

    def _fast_build_aligned_rule(self) -> int:
        """When mamba_aligned_state_indices sends a call to the Python build(), as
        _precomputed_aligned reads it: 0 never (vllm-0.34 profile), 1 when set (seed
        profile: build() gathers from it), 2 unless set (vllm-0.34, KDA align: it asserts)."""
        if _PROFILE != "vllm-0.34":
            return 1
        return 2 if self._kind == "kda" and self._mamba_cache_mode == "align" else 0

    def _fast_update_rule(self) -> int:
        """Which update_block_table() calls take the C++ path (VllmBuildState; the rest, and
        any result with checkpoints, go to _update_block_table_python): 1 all (they re-gather
        from the table given), 2 when mamba_aligned_state_indices is set (vllm-0.34 align: it
        asserts otherwise), 0 none (KDA's update_block_table is Python; align mode of the seed
        profile gathers from MRV2's aligned indices, on an engine of their own)."""
        if self._kind != "gdn":
            return 0
        if self._mamba_cache_mode != "align":
            return 1
        return 2 if _PROFILE == "vllm-0.34" else 0

    def _aligned(self):
        """The engine of MRV2's precomputed aligned state indices: they are the table,
        gathered as is (mode "none")."""
        if self._aligned_engine is None:
            cfg = dict(self._config, mamba_cache_mode="none")
            self._aligned_engine = _engine(self._kind, cfg, self._device, self._engine.cls)
            self._aligned_slot = self._aligned_engine.register(self)
        return self._aligned_engine, self._aligned_slot

    # -- vLLM's interface

    # vLLM's build(common_prefix_len, common_attn_metadata, num_accepted_tokens=None,
    # num_decode_draft_tokens_cpu=None, fast_build=False): one C++ call that returns the
    # session's result for a plain step and calls _build_python for anything else. A CPython
    # method descriptor (python/src/vllm_build_call.cpp; the interpreter calls it without an
    # argument-conversion layer) of the base class, as this class does not exist yet: made
    # here, in the class body, it implements vLLM's abstract build() (ABCMeta fixes a class's
    # abstract methods when it is created).
    build = _linmeta.vllm_method(_Base, "build")

    def _build_python(
        self,
        common_prefix_len: int,
        common_attn_metadata,
        num_accepted_tokens: torch.Tensor | None = None,
        num_decode_draft_tokens_cpu: torch.Tensor | None = None,
        fast_build: bool = False,
    ):
        m = common_attn_metadata
        aligned = self._precomputed_aligned()
        if aligned is None:
            engine, slot, table = self._engine, self._slot, m.block_table_tensor
        else:
            (engine, slot), table = self._aligned(), aligned[: m.num_reqs]
        accepted, drafts = num_accepted_tokens, num_decode_draft_tokens_cpu
        if (accepted is not None and accepted.dtype is not _INT32) or (
            drafts is not None and drafts.dtype is not _INT32
        ):
            accepted, drafts = engine.as_int32(accepted, drafts)
        d = engine.run(slot, m, table, accepted, drafts, False)
        accepted_dtype = _INT32 if num_accepted_tokens is None else num_accepted_tokens.dtype
        if accepted_dtype is _INT32 and len(d) == self._plain_len:
            return self._make(d)  # every key a field: nothing to assemble
        return self._assemble(d, m, drafts, accepted_dtype)

    def build_for_cudagraph_capture(self, common_attn_metadata):
        m = common_attn_metadata
        assert (
            m.num_reqs <= self.decode_cudagraph_max_bs
            and m.num_actual_tokens <= self.decode_cudagraph_max_bs
        ), (
            f"GDN only supports decode-only full CUDAGraph capture. "
            f"Make sure batch size ({m.num_reqs}) <= "
            f"cudagraph capture sizes ({self.decode_cudagraph_max_bs}), "
            f"and number of tokens ({m.num_actual_tokens}) <= "
            f"cudagraph capture sizes ({self.decode_cudagraph_max_bs})."
        )
        aligned = self._precomputed_aligned()
        if aligned is None:
            engine, slot, table = self._engine, self._slot, m.block_table_tensor
        else:
            (engine, slot), table = self._aligned(), aligned[: m.num_reqs]
        # linmeta derives accepted = query lengths and drafts = query lengths - 1 itself.
        d = engine.run(slot, m, table, None, None, True)
        return self._assemble(d, m, None, torch.int32)

    # vLLM's update_block_table(metadata, blk_table, slot_mapping): one C++ call (a method
    # descriptor as build) for a plain dataclass without checkpoints,
    # _update_block_table_python for anything else; the same result.
    update_block_table = _linmeta.vllm_method(_Base, "update_block_table")

    def _update_block_table_python(
        self, metadata, blk_table: torch.Tensor, slot_mapping: torch.Tensor
    ):
        """Re-gathers this group's state indices from `blk_table` (align mode: from
        mamba_aligned_state_indices) into this group's buffers; every batch-level field stays
        `metadata`'s."""
        engine, slot = self._engine, self._slot
        if self._mamba_cache_mode == "align":
            assert getattr(self, "mamba_aligned_state_indices", None) is not None
            if _PROFILE != "vllm-0.34":
                blk_table = self.mamba_aligned_state_indices
                engine, slot = self._aligned()
        d = engine.regather(slot, metadata, blk_table)
        if d is None:
            raise _linmeta.Error(
                "linmeta: update_block_table takes metadata of the step this engine built last"
            )
        changes = {k: d[k] for k in _STATE_INDEX_FIELDS}
        ckpt = d.get("_checkpoint")
        if getattr(metadata, "checkpoint", None) is not None and ckpt is not None:
            changes["checkpoint"] = dataclasses.replace(metadata.checkpoint, state_indices=ckpt[1])
        return _replace(metadata, changes)

    # -- the outputs

    def _staged_spec(self, d, m) -> bool:
        n = d["num_spec_decodes"]
        return (
            self.use_full_cuda_graph
            and n > 0
            and d["num_prefills"] == 0
            and d["num_decodes"] == 0
            and n <= self.decode_cudagraph_max_bs
            and d["num_spec_decode_tokens"] <= self.decode_cudagraph_max_bs
        )

    def _conv(self, d, engine):
        """vLLM's nums_dict / batch_ptr / token_chunk_offset_ptr from linmeta's conv1d fields."""
        tot, nums_view, batch_ptr, offset_ptr = d.pop("_conv")
        nums, mlist, offsetlist = engine.conv_lists(nums_view, tot)
        d["nums_dict"] = {
            _CONV_BLOCK: {
                "nums": nums,
                "tot": tot,
                "mlist": mlist,
                "mlist_len": tot,
                "offsetlist": offsetlist,
                "batch_ptr": batch_ptr,
                "token_chunk_offset_ptr": offset_ptr,
            }
        }
        d["batch_ptr"] = batch_ptr
        d["token_chunk_offset_ptr"] = offset_ptr

    def _checkpoint_md(self, ckpt, d, m, drafts):
        """vLLM 0.34's MambaPrefillCheckpointMetadata from linmeta's (checkpoint_offsets,
        state_indices), with what vLLM's MambaPrefillCheckpointBuilder also puts there: the
        host lists `offsets` / `query_lens` and the gather indices `request_rows` /
        `block_cols` (int64, on the device of query_start_loc) of the checkpoint rows (the
        non-spec rows). `offsets` is read back from checkpoint_offsets (a device-to-host copy
        on CUDA, only on steps with checkpoints)."""
        offsets_t, state_indices = ckpt
        offsets = offsets_t.tolist()
        qsl = m.query_start_loc_cpu.tolist()
        ub = _seq_lens_upper_bound(m).tolist()
        rows = self._checkpoint_rows(d, m, drafts, qsl)
        assert len(rows) == len(offsets)
        block = int(self.kv_cache_spec.block_size)
        cols = [-(-ub[r] // block) - 2 if o > 0 else -1 for r, o in zip(rows, offsets)]
        dev = m.query_start_loc.device
        return self._classes["gdn_checkpoint"](
            checkpoint_offsets=offsets_t,
            state_indices=state_indices,
            offsets=offsets,
            query_lens=[qsl[r + 1] - qsl[r] for r in rows],
            request_rows=torch.tensor(rows, dtype=torch.int64).to(dev, non_blocking=True),
            block_cols=torch.tensor(cols, dtype=torch.int64).to(dev, non_blocking=True),
        )

    def _checkpoint_rows(self, d, m, drafts, qsl):
        """GDN's checkpoint rows: every row, or the rows outside the spec mask."""
        masks = d.get("spec_sequence_masks_cpu")
        if masks is None:
            return list(range(len(qsl) - 1))
        return (~masks).nonzero().flatten().tolist()

    def _checkpoints(self, d, m, drafts):
        """vLLM 0.34's GDN prefill checkpoint objects (profile vllm-0.34, align mode), when the
        dataclass has the fields."""
        ckpt = d.pop("_checkpoint", None)
        plan = d.pop("_flashinfer_checkpoint_plan", None)
        classes = self._classes
        if ckpt is not None and "checkpoint" in d and "gdn_checkpoint" in classes:
            d["checkpoint"] = self._checkpoint_md(ckpt, d, m, drafts)
        if plan is not None and "flashinfer_checkpoint_plan" in d and "fi_plan" in classes:
            d["flashinfer_checkpoint_plan"] = classes["fi_plan"](
                every_n_tokens=plan[0], num_checkpoints=plan[1], cu_starts=plan[2], rows=plan[3]
            )

    def _assemble(self, d, m, drafts, accepted_dtype):
        if accepted_dtype is not torch.int32:
            _accepted_dtype(d, accepted_dtype, self._staged_spec(d, m))
        if "_conv" in d:
            self._conv(d, self._engine)
        self._checkpoints(d, m, drafts)
        if self.gdn_prefill_backend == "cutedsl" and d["num_prefills"] > 0:
            d["chunk_indices"], d["chunk_offsets"] = _cutedsl_chunk_metadata(
                d["prefill_query_start_loc"], d["num_prefill_tokens"]
            )
        return self._make(d)


class KimiK3KDAMetadataBuilder(GDNAttentionMetadataBuilder):
    """The Kimi-K3 KDA builder (RecoverSSM, prefill checkpoints), built by linmeta."""

    _kind = "kda"

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device) -> None:
        self.use_recoverssm = bool(vllm_config.cache_config.use_kda_recoverssm)
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.spec_state_slots = 1 if self.use_recoverssm else self.num_spec + 1
        self.recoverssm_context = None
        if _PROFILE == "vllm-0.34":
            # vLLM 0.34's KDA builder declares it (a class attribute), and its MRV2 runner
            # sets the aligned state indices only on builders that have it (hasattr).
            self.mamba_aligned_state_indices = None

    def _linmeta_config(self) -> dict:
        cfg = super()._linmeta_config()
        cfg.pop("prefill_backend", None)  # KDA: the native default (FlashKDA) ...
        if "profile" in cfg and cfg["profile"] == "vllm-0.34":
            # ... unless vLLM 0.34's additional_config names one (FlashInfer: its own
            # prefill query_start_loc / seq_order fields).
            extra = self.vllm_config.additional_config
            backend = extra.get("kda_prefill_backend") if isinstance(extra, dict) else None
            if backend in ("triton", "flashinfer", "flashkda"):
                cfg["prefill_backend"] = backend
        cfg.update(
            chunk_metadata=False,
            use_recoverssm=self.use_recoverssm,
            num_prefill_checkpoint_blocks=self._checkpoint_blocks(),
        )
        return cfg

    def _fast_commit(self):
        """VllmBuildState's recipe for the RecoverSSM commit objects (_assemble's, made in C++):
        (commit class, its defaults, align class, its defaults) when both are plain dataclasses
        whose other fields all have defaults; else None (_assemble makes them)."""
        recipe = []
        for key, given in (
            ("commit", {"state_indices", "query_start_loc", "request_indices", "align"}),
            ("align", {"block_table", "num_computed_tokens", "block_size"}),
        ):
            cls = self._classes[key]
            defaults = _defaults(cls)
            names = {f.name for f in dataclasses.fields(cls)}
            if not _is_plain_dataclass(cls) or not names <= given | set(defaults):
                return None
            recipe += [cls, defaults]
        return tuple(recipe)

    def _get_recoverssm_context(self):
        """As the reference builder: the RecoverSSM commit context over this group's layers
        (needs vLLM's Kimi-K3 ops module; None without it)."""
        context = self.recoverssm_context
        if context is not None:
            return context
        try:
            from vllm.models.kimi_k3.nvidia.ops.recoverssm import KDARecoverSSMCommitContext
        except Exception:  # noqa: BLE001 - no Kimi-K3 ops in this vLLM (or no vLLM)
            return None
        forward_context = self.vllm_config.compilation_config.static_forward_context
        layers = [forward_context[name] for name in self.layer_names]
        context = KDARecoverSSMCommitContext.create(
            layers,
            spec_query_len=1 + self.vllm_config.num_speculative_tokens,
            max_num_reqs=self.vllm_config.scheduler_config.max_num_seqs,
        )
        self.recoverssm_context = context
        return context

    def _staged_spec(self, d, m) -> bool:
        n = d["num_spec_decodes"]
        rows = self.vllm_config.scheduler_config.max_num_seqs if self.use_recoverssm else None
        capacity = rows if rows is not None else self.decode_cudagraph_max_bs
        return (
            self.use_full_cuda_graph
            and n > 0
            and d["num_prefills"] == 0
            and d["num_decodes"] == 0
            and m.num_reqs <= capacity
            and d["num_spec_decode_tokens"] <= self.decode_cudagraph_max_bs
        )

    def _assemble(self, d, m, drafts, accepted_dtype):
        if accepted_dtype is not torch.int32:
            _accepted_dtype(d, accepted_dtype, self.use_recoverssm or self._staged_spec(d, m))
        if "_conv" in d:
            self._conv(d, self._engine)
        classes = self._classes
        commit = d.pop("_commit", None)
        if commit is not None:
            _, _, request_indices, align = commit
            align_md = None
            if align is not None:
                align_md = classes["align"](
                    block_table=m.block_table_tensor,
                    num_computed_tokens=align[0],
                    block_size=align[1],
                )
            # The reference hands the spec fields themselves to the commit metadata.
            d["recoverssm_commit"] = classes["commit"](
                state_indices=d["spec_state_indices_tensor"],
                query_start_loc=d["spec_query_start_loc"],
                request_indices=request_indices,
                align=align_md,
            )
            d["recoverssm_context"] = self._get_recoverssm_context()
        ckpt = d.pop("_checkpoint", None)
        if ckpt is not None:
            if classes["checkpoint"] is classes.get("gdn_checkpoint"):  # vLLM 0.34
                d["checkpoint"] = self._checkpoint_md(ckpt, d, m, drafts)
            else:
                d["checkpoint"] = classes["checkpoint"](
                    checkpoint_offsets=ckpt[0], state_indices=ckpt[1]
                )
        return self._make(d)

    def _checkpoint_rows(self, d, m, drafts, qsl):
        """KDA's checkpoint rows (vLLM 0.34): every row without spec decodes, else the
        active (non-empty) rows outside the spec mask (drafts >= 0; RecoverSSM: also every
        active non-prefilling row, and only rows of at most num_spec + 1 tokens)."""
        n = len(qsl) - 1
        if d["num_spec_decodes"] == 0:
            return list(range(n))
        drafts = drafts.tolist()
        prefilling = m.is_prefilling.tolist() if m.is_prefilling is not None else None
        rows = []
        for r in range(n):
            q = qsl[r + 1] - qsl[r]
            spec = drafts[r] >= 0
            if self.use_recoverssm:
                spec = (spec or (not prefilling[r] and q > 0)) and q <= self.num_spec + 1
            if not spec and q > 0:
                rows.append(r)
        return rows

    def update_block_table(self, metadata, blk_table, slot_mapping):
        """Re-gathers every state-index field of this group (spec / non-spec / prefill state
        indices, the RecoverSSM commit's and the checkpoints'), keeping the batch-level ones."""
        d = self._engine.regather(self._slot, metadata, blk_table)
        if d is None:
            raise _linmeta.Error(
                "linmeta: update_block_table takes metadata of the step this engine built last"
            )
        changes = dict(
            spec_state_indices_tensor=d["spec_state_indices_tensor"],
            non_spec_state_indices_tensor=d["non_spec_state_indices_tensor"],
        )
        if metadata.recoverssm_commit is not None:
            align = metadata.recoverssm_commit.align
            if align is not None:
                align = dataclasses.replace(align, block_table=blk_table)
            changes["recoverssm_commit"] = dataclasses.replace(
                metadata.recoverssm_commit,
                state_indices=d["spec_state_indices_tensor"],
                align=align,
            )
        ckpt = d.get("_checkpoint")
        if metadata.checkpoint is not None and ckpt is not None:
            changes["checkpoint"] = dataclasses.replace(metadata.checkpoint, state_indices=ckpt[1])
        return _replace(metadata, changes)


def _resolve_gdn_prefill_backend(vllm_config) -> str:
    """vLLM's GDN prefill backend ("triton", "flashinfer" or "cutedsl"); "triton" when vLLM's
    resolver is not importable (CPU, no vLLM)."""
    try:
        from vllm.model_executor.layers.mamba.gdn.qwen_gdn_linear_attn import (
            _resolve_gdn_prefill_backend as resolve,
        )
    except Exception:  # noqa: BLE001
        return "triton"
    return resolve(vllm_config)[1]


def _cutedsl_chunk_metadata(prefill_query_start_loc, total_tokens):
    """The cutedsl prefill backend's chunk metadata, from vLLM's own helper."""
    from vllm.model_executor.layers.mamba.ops.gdn_chunk_cutedsl import prepare_metadata_cutedsl

    return prepare_metadata_cutedsl(prefill_query_start_loc, int(total_tokens), _FLA_CHUNK_SIZE)


# vLLM's builder classes that linmeta's stand in for: (module, class, linmeta's class name).
_VLLM_BUILDERS = (
    (
        "vllm.v1.attention.backends.gdn_attn",
        "GDNAttentionMetadataBuilder",
        "GDNAttentionMetadataBuilder",
    ),
    (
        "vllm.models.kimi_k3.nvidia.kda_metadata",
        "KimiK3KDAMetadataBuilder",
        "KimiK3KDAMetadataBuilder",
    ),
)


def _register_with_vllm(builders=_VLLM_BUILDERS) -> list[str]:
    """Makes linmeta's builders count as vLLM's where vLLM tests for them with isinstance:
    each is registered as a virtual subclass of the vLLM class it replaces (vLLM's builders
    are abc.ABC classes), so isinstance(ours, vLLM's) holds without inheriting any of vLLM's
    code. vLLM 0.34's MRV2 runner needs it: it hands the spec-decode counts
    (num_accepted_tokens, num_decode_draft_tokens_cpu) only to builders that are vLLM's GDN
    builder or a subclass (MambaHybridAttnMetadata.get_extra_attn_kwargs), and binds the
    deferred RecoverSSM only to vLLM's KDA builder (DeferredRecoverSSMState.bind). Returns
    the vLLM classes registered with (none without vLLM)."""
    done = []
    for module_name, vllm_name, ours_name in builders:
        try:
            theirs = getattr(__import__(module_name, fromlist=[vllm_name]), vllm_name)
        except Exception:  # noqa: BLE001 - vLLM absent, or a build without that model
            continue
        ours = globals()[ours_name]
        if not isinstance(theirs, abc.ABCMeta):
            continue  # not vLLM's abstract builder: nothing to register with
        if not issubclass(ours, theirs):
            theirs.register(ours)
        done.append(f"{module_name}.{vllm_name}")
    return done


_register_with_vllm()
