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

import dataclasses
import enum
import os
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

# Token capacity when the scheduler config has no max_num_batched_tokens (the oracle's
# stand-in config): it grows on demand (see _Engine._ensure_native).
_DEFAULT_TOKEN_CAPACITY = 8192

# Opt-in: gather every group's state indices in the first group's launch from the table
# each group used the step before (verified per group before it is served). Needs every
# group's block table of a step to be final in stream order when the first group builds
# (vLLM's runners commit all tables before building metadata). docs/vllm.md.
_PREFETCH_TABLES = os.environ.get("LINMETA_VLLM_PREFETCH_TABLES", "0") == "1"


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


class AttentionCGSupport(enum.Enum):
    """vLLM's AttentionCGSupport (used when vLLM is not importable)."""

    ALWAYS = 3
    UNIFORM_BATCH = 2
    UNIFORM_SINGLE_TOKEN_DECODE = 1
    NEVER = 0


if _VllmCGSupport is not None:
    AttentionCGSupport = _VllmCGSupport  # type: ignore[misc]  # noqa: F811


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
    this module's. Keys: gdn, kda, commit, align, checkpoint."""
    out = dict(_LOCAL_CLASSES)
    if not prefer_vllm:
        return out
    try:
        from vllm.v1.attention.backends.gdn_attn import GDNAttentionMetadata as gdn

        out["gdn"] = gdn
    except Exception:  # noqa: BLE001
        return out
    try:
        from vllm.models.kimi_k3.nvidia import kda_metadata as kda

        out.update(
            kda=kda.KimiK3KDAMetadata,
            commit=kda.KDARecoverSSMCommitMetadata,
            align=kda.KDARecoverSSMAlignMetadata,
            checkpoint=kda.KDACheckpointMetadata,
        )
    except Exception:  # noqa: BLE001 - vLLM without Kimi-K3
        pass
    return out


def _fast_constructor(cls):
    """A constructor for dataclass `cls` taking a dict of field values: plain dataclasses get
    their __dict__ filled directly (all fields, defaults included); others go through
    __init__."""
    fields = dataclasses.fields(cls)
    plain = (
        not hasattr(cls, "__post_init__")
        and not hasattr(cls, "__slots__")
        and not cls.__dataclass_params__.frozen
        and all(f.init for f in fields)
    )
    if not plain:
        return lambda values: cls(**values)
    defaults = {}
    for f in fields:
        if f.default is not dataclasses.MISSING:
            defaults[f.name] = f.default
        elif f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
            return lambda values: cls(**values)
    names = {f.name for f in fields}
    new = object.__new__

    def make(values):
        assert names.issuperset(values)
        obj = new(cls)
        d = dict(defaults)
        d.update(values)
        obj.__dict__ = d
        return obj

    return make


# --------------------------------------------------------------------------------------------
# dtype conversions (DELETE once linmeta's native dtypes land)


def _vllm_dtypes(kind, f, accepted_dtype, staged_spec):
    """LINMETA-DTYPE-SHIM: linmeta returns every index array as int32; vLLM's builders mix
    int32 and int64. This is the ONE place that converts (a device op per converted array,
    prefill / mixed steps only). Delete it when linmeta's Metadata carries vLLM's dtypes
    natively (int64 chunk_offsets, int64 token index partitions of mixed batches, the caller's
    accepted-count dtype outside the FULL-graph buffers).

    `f`: the mutable field list of VllmSession (see _F_*). Returns nothing."""
    if f[_F_CHUNK_OFFSETS] is not None:
        f[_F_CHUNK_OFFSETS] = f[_F_CHUNK_OFFSETS].to(torch.int64)
    # Stable-argsort token partitions (GDN mixed batches, every KDA batch that has them).
    if f[_F_SPEC_TOKEN_INDX] is not None and (
        kind == "kda" or f[_F_NUM_PREFILLS] > 0 or f[_F_NUM_DECODES] > 0
    ):
        f[_F_SPEC_TOKEN_INDX] = f[_F_SPEC_TOKEN_INDX].to(torch.int64)
        f[_F_NON_SPEC_TOKEN_INDX] = f[_F_NON_SPEC_TOKEN_INDX].to(torch.int64)
    # Accepted counts outside the persistent int32 buffer keep the caller's dtype.
    acc = f[_F_NUM_ACCEPTED]
    if acc is not None and accepted_dtype is not torch.int32 and not staged_spec:
        f[_F_NUM_ACCEPTED] = acc.to(accepted_dtype)


def _as_int32(t):
    """LINMETA-DTYPE-SHIM (input side): linmeta reads int32; vLLM versions keep the accepted
    counts (and sometimes drafts) as int64."""
    if t is None or t.dtype is torch.int32:
        return t
    return t.to(torch.int32)


# --------------------------------------------------------------------------------------------
# The fields tuple of VllmSession (python/src/module.cpp, VllmSession::fields)

(
    _F_NUM_PREFILLS,
    _F_NUM_PREFILL_TOKENS,
    _F_NUM_DECODES,
    _F_NUM_DECODE_TOKENS,
    _F_NUM_SPEC_DECODES,
    _F_NUM_SPEC_DECODE_TOKENS,
    _F_NUM_ACTUAL_TOKENS,
    _F_UNIFORM,
    _F_HAS_INITIAL_STATE,
    _F_CHUNK_INDICES,
    _F_CHUNK_OFFSETS,
    _F_PREFILL_QSL,
    _F_PREFILL_STATE_INDICES,
    _F_PREFILL_HAS_INITIAL_STATE,
    _F_SPEC_QSL,
    _F_NON_SPEC_QSL,
    _F_SPEC_STATE_INDICES,
    _F_NON_SPEC_STATE_INDICES,
    _F_SPEC_SEQUENCE_MASKS,
    _F_SPEC_TOKEN_INDX,
    _F_NON_SPEC_TOKEN_INDX,
    _F_NUM_ACCEPTED,
    _F_CONV,
    _F_COMMIT,
    _F_CHECKPOINT,
) = range(25)

_GDN_NAMES = (
    (_F_NUM_PREFILLS, "num_prefills"),
    (_F_NUM_PREFILL_TOKENS, "num_prefill_tokens"),
    (_F_NUM_DECODES, "num_decodes"),
    (_F_NUM_DECODE_TOKENS, "num_decode_tokens"),
    (_F_NUM_SPEC_DECODES, "num_spec_decodes"),
    (_F_NUM_SPEC_DECODE_TOKENS, "num_spec_decode_tokens"),
    (_F_NUM_ACTUAL_TOKENS, "num_actual_tokens"),
    (_F_HAS_INITIAL_STATE, "has_initial_state"),
    (_F_SPEC_QSL, "spec_query_start_loc"),
    (_F_NON_SPEC_QSL, "non_spec_query_start_loc"),
    (_F_SPEC_STATE_INDICES, "spec_state_indices_tensor"),
    (_F_NON_SPEC_STATE_INDICES, "non_spec_state_indices_tensor"),
    (_F_SPEC_SEQUENCE_MASKS, "spec_sequence_masks"),
    (_F_SPEC_TOKEN_INDX, "spec_token_indx"),
    (_F_NON_SPEC_TOKEN_INDX, "non_spec_token_indx"),
    (_F_NUM_ACCEPTED, "num_accepted_tokens"),
    (_F_UNIFORM, "uniform_spec_sequence_length"),
    (_F_CHUNK_INDICES, "chunk_indices"),
    (_F_CHUNK_OFFSETS, "chunk_offsets"),
    (_F_PREFILL_QSL, "prefill_query_start_loc"),
    (_F_PREFILL_STATE_INDICES, "prefill_state_indices"),
    (_F_PREFILL_HAS_INITIAL_STATE, "prefill_has_initial_state"),
)
# KDA's builder leaves the GDN-only fields at their defaults (None).
_KDA_NAMES = tuple(
    (i, n)
    for i, n in _GDN_NAMES
    if n
    not in (
        "spec_sequence_masks",
        "uniform_spec_sequence_length",
        "chunk_indices",
        "chunk_offsets",
        "prefill_query_start_loc",
        "prefill_state_indices",
        "prefill_has_initial_state",
    )
)


def _conv_host_lists(nums):
    """vLLM's compute_causal_conv1d_metadata host lists from the per-sequence program counts:
    (nums clone int32, tot, mlist int64, offsetlist int32), all CPU tensors."""
    nums = nums.clone()
    n64 = nums.to(torch.int64)
    mlist = torch.repeat_interleave(torch.arange(n64.numel(), dtype=torch.int64), n64)
    starts = torch.cumsum(n64, 0) - n64
    tot = int(mlist.numel())
    offsetlist = (
        torch.arange(tot, dtype=torch.int64) - torch.repeat_interleave(starts, n64)
    ).to(torch.int32)
    return nums, tot, mlist, offsetlist


def _current_stream(device: torch.device) -> int:
    if device.type != "cuda":
        return 0
    idx = device.index if device.index is not None else torch.cuda.current_device()
    raw = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    if raw is not None:
        return raw(idx)
    return torch.cuda.current_stream(idx).cuda_stream


# --------------------------------------------------------------------------------------------
# One native builder shared by the builder objects (KV-cache groups) of an engine


class _Step:
    """What the first group's call of a step saw; later groups must see the same."""

    __slots__ = (
        "qsl_cpu",
        "qsl",
        "seq_lens",
        "ub",
        "is_prefilling",
        "drafts",
        "accepted",
        "num_actual_tokens",
        "num_reqs",
        "capture",
        "served",
        "tables",
        "accepted_dtype",
        "masks_cpu",
        "conv",
    )


def _same_host(a, b) -> bool:
    if a is b:
        return True
    if a is None or b is None:
        return False
    return a.shape == b.shape and a.dtype == b.dtype and bool(torch.equal(a, b))


def _same_memory(a, b) -> bool:
    """Device arrays: the same memory, shape and strides (their contents are not read)."""
    if a is b:
        return True
    if a is None or b is None:
        return False
    return (
        a.data_ptr() == b.data_ptr()
        and a.shape == b.shape
        and a.stride() == b.stride()
        and a.dtype == b.dtype
        and a.device == b.device
    )


class _Engine:
    """A native builder with one KV-cache group per registered builder object."""

    def __init__(self, kind: str, config: dict, device: torch.device):
        self.kind = kind
        self.config = dict(config)
        self.device = device
        self.token_capacity = config["max_num_batched_tokens"] or _DEFAULT_TOKEN_CAPACITY
        self.grow = config["max_num_batched_tokens"] is None
        self.slots: dict[int, weakref.ref] = {}
        self.native = None
        self.session = None
        self.step: _Step | None = None
        self.lock = threading.Lock()

    # -- groups

    def register(self, obj) -> int:
        with self.lock:
            slot = 0
            while slot in self.slots and self.slots[slot]() is not None:
                slot += 1
            self.slots[slot] = weakref.ref(obj)
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
        self.session = _linmeta.VllmSession(self.native)
        self.step = None

    # -- steps

    def _matches(self, s: _Step, slot, m, qsl_cpu, ub, drafts, accepted, capture) -> bool:
        return (
            slot not in s.served
            and s.capture == capture
            and s.num_actual_tokens == m.num_actual_tokens
            and s.num_reqs == m.num_reqs
            and _same_host(s.qsl_cpu, qsl_cpu)
            and _same_host(s.ub, ub)
            and _same_host(s.is_prefilling, m.is_prefilling)
            and _same_host(s.drafts, drafts)
            and _same_memory(s.accepted, accepted)
            and _same_memory(s.qsl, m.query_start_loc)
            and _same_memory(s.seq_lens, m.seq_lens)
        )

    def run(self, slot, m, table, accepted, drafts, capture):
        """This group's fields (a list, see _F_*) and the step entry."""
        qsl_cpu = m.query_start_loc_cpu
        ub = _seq_lens_upper_bound(m)
        s = self.step
        if s is not None and self._matches(s, slot, m, qsl_cpu, ub, drafts, accepted, capture):
            s.served.add(slot)
            used = s.tables[slot] if slot < len(s.tables) else None
            regather = not _same_memory(used, table)
            stream = _current_stream(self.device)
            return list(self.session.serve(slot, table if regather else None, stream)), s

        self._ensure_native(m.num_actual_tokens)
        groups = self.native.num_groups
        tables = [table] * groups
        if _PREFETCH_TABLES and s is not None:
            for g in range(groups):
                cand = s.tables[g] if g < len(s.tables) else None
                if g != slot and cand is not None and cand.shape[0] >= m.num_reqs:
                    tables[g] = cand
        stream = _current_stream(self.device)
        f = self.session.build(
            qsl_cpu,
            m.seq_lens,
            ub,
            m.num_actual_tokens,
            m.query_start_loc,
            m.is_prefilling,
            drafts,
            accepted,
            m.num_reqs,
            stream,
            tables,
            capture,
            slot,
        )
        n = _Step()
        n.qsl_cpu, n.qsl, n.seq_lens, n.ub = qsl_cpu, m.query_start_loc, m.seq_lens, ub
        n.is_prefilling, n.drafts, n.accepted = m.is_prefilling, drafts, accepted
        n.num_actual_tokens, n.num_reqs, n.capture = m.num_actual_tokens, m.num_reqs, capture
        n.served = {slot}
        n.tables = tables
        n.masks_cpu = None
        n.conv = None
        self.step = n
        return list(f), n

    def regather(self, slot, metadata, table):
        """Fields of `slot` with its state indices re-gathered from `table`, when `metadata`
        belongs to the last built step; None otherwise."""
        s = self.step
        if s is None or self.session is None or s.num_actual_tokens != metadata.num_actual_tokens:
            return None
        stream = _current_stream(self.device)
        try:
            return list(self.session.serve(slot, table, stream))
        except _linmeta.Error:
            return None


_ENGINES: dict[tuple, _Engine] = {}
_ENGINES_LOCK = threading.Lock()


def _engine(kind: str, config: dict, device: torch.device) -> _Engine:
    """The engine of every builder object with this configuration (one per KV-cache group).
    Engines whose builder objects are all gone are dropped here."""
    key = (kind, str(device)) + tuple(sorted(config.items()))
    with _ENGINES_LOCK:
        for k in [k for k, e in _ENGINES.items() if k != key and not e.alive()]:
            del _ENGINES[k]
        e = _ENGINES.get(key)
        if e is None:
            e = _ENGINES[key] = _Engine(kind, config, device)
        return e


def _seq_lens_upper_bound(m):
    ub = getattr(m, "seq_lens_cpu_upper_bound", None)
    if ub is None:
        ub = m.seq_lens_cpu  # older vLLM: the exact host copy
    return ub


# --------------------------------------------------------------------------------------------
# The builders


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
        self.supports_update_block_table = (
            bool(getattr(vllm_config, "use_v2_model_runner", False))
            and torch.device(device).type == "cuda"
            and type(self) is GDNAttentionMetadataBuilder
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
        self._device = torch.device(device)
        self._engine = _engine(self._kind, self._config, self._device)
        self._slot = self._engine.register(self)
        self._aligned_engine = None  # MRV2's precomputed aligned indices (built lazily)
        self._aligned_slot = -1
        classes = metadata_classes()
        self._classes = classes
        self._make = _fast_constructor(classes[self._kind])

    # -- configuration

    def _linmeta_config(self) -> dict:
        vc, spec = self.vllm_config, self.kv_cache_spec
        cc = self.compilation_config
        cap = cc.max_cudagraph_capture_size
        return dict(
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

    def _engine_and_table(self, m):
        aligned = getattr(self, "mamba_aligned_state_indices", None)
        if aligned is None:
            return self._engine, self._slot, m.block_table_tensor
        # MRV2 precomputed the aligned state indices: they are the table, gathered as is.
        if self._aligned_engine is None:
            cfg = dict(self._config, mamba_cache_mode="none")
            self._aligned_engine = _engine(self._kind, cfg, self._device)
            self._aligned_slot = self._aligned_engine.register(self)
        return self._aligned_engine, self._aligned_slot, aligned[: m.num_reqs]

    # -- vLLM's interface

    def build(
        self,
        common_prefix_len: int,
        common_attn_metadata,
        num_accepted_tokens: torch.Tensor | None = None,
        num_decode_draft_tokens_cpu: torch.Tensor | None = None,
        fast_build: bool = False,
    ):
        return self._build(
            common_attn_metadata, num_accepted_tokens, num_decode_draft_tokens_cpu, False
        )

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
        # linmeta derives accepted = query lengths and drafts = query lengths - 1 itself.
        return self._build(m, None, None, True)

    def update_block_table(self, metadata, blk_table: torch.Tensor, slot_mapping: torch.Tensor):
        """Re-gathers this group's state indices from `blk_table` (align mode: from
        mamba_aligned_state_indices) into this group's buffers; every batch-level field stays
        `metadata`'s."""
        engine, slot = self._engine, self._slot
        if self._mamba_cache_mode == "align":
            assert getattr(self, "mamba_aligned_state_indices", None) is not None
            blk_table = self.mamba_aligned_state_indices
            engine, slot, _ = self._engine_and_table_for_update()
        f = engine.regather(slot, metadata, blk_table)
        if f is None:
            raise _linmeta.Error(
                "linmeta: update_block_table takes metadata of the step this engine built last"
            )
        changes = dict(
            spec_state_indices_tensor=f[_F_SPEC_STATE_INDICES],
            non_spec_state_indices_tensor=f[_F_NON_SPEC_STATE_INDICES],
            prefill_state_indices=f[_F_PREFILL_STATE_INDICES],
        )
        return dataclasses.replace(metadata, **changes)

    def _engine_and_table_for_update(self):
        if self._aligned_engine is None:
            cfg = dict(self._config, mamba_cache_mode="none")
            self._aligned_engine = _engine(self._kind, cfg, self._device)
            self._aligned_slot = self._aligned_engine.register(self)
        return self._aligned_engine, self._aligned_slot, None

    # -- the build

    def _build(self, m, accepted_in, drafts, capture):
        engine, slot, table = self._engine_and_table(m)
        accepted = _as_int32(accepted_in)
        drafts = _as_int32(drafts)
        f, step = engine.run(slot, m, table, accepted, drafts, capture)
        accepted_dtype = torch.int32 if accepted_in is None else accepted_in.dtype
        return self._assemble(f, step, m, accepted_dtype, drafts)

    def _staged_spec(self, f, m) -> bool:
        n = f[_F_NUM_SPEC_DECODES]
        return (
            self.use_full_cuda_graph
            and n > 0
            and f[_F_NUM_PREFILLS] == 0
            and f[_F_NUM_DECODES] == 0
            and n <= self.decode_cudagraph_max_bs
            and f[_F_NUM_SPEC_DECODE_TOKENS] <= self.decode_cudagraph_max_bs
        )

    def _conv(self, f, step):
        conv = f[_F_CONV]
        if conv is None:
            return None, None, None
        tot, nums_view, batch_ptr, offset_ptr = conv
        if step.conv is None:
            step.conv = _conv_host_lists(nums_view)
        nums, tot2, mlist, offsetlist = step.conv
        assert tot2 == tot
        nums_dict = {
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
        return nums_dict, batch_ptr, offset_ptr

    def _assemble(self, f, step, m, accepted_dtype, drafts):
        if f[_F_SPEC_STATE_INDICES] is not None or f[_F_CHUNK_OFFSETS] is not None:
            _vllm_dtypes("gdn", f, accepted_dtype, self._staged_spec(f, m))
        values = {name: f[i] for i, name in _GDN_NAMES}
        if f[_F_NUM_SPEC_DECODES] > 0:
            if step.masks_cpu is None:
                if drafts is None:  # capture build: drafts = query lengths - 1
                    qsl = m.query_start_loc_cpu[: m.num_reqs + 1]
                    step.masks_cpu = (qsl[1:] - qsl[:-1]) >= 1
                else:
                    step.masks_cpu = drafts[: m.num_reqs] >= 0
            values["spec_sequence_masks_cpu"] = step.masks_cpu
        if self.gdn_prefill_backend == "cutedsl" and f[_F_NUM_PREFILLS] > 0:
            values["chunk_indices"], values["chunk_offsets"] = _cutedsl_chunk_metadata(
                f[_F_PREFILL_QSL], f[_F_NUM_PREFILL_TOKENS]
            )
        values["nums_dict"], values["batch_ptr"], values["token_chunk_offset_ptr"] = self._conv(
            f, step
        )
        return self._make(values)


class KimiK3KDAMetadataBuilder(GDNAttentionMetadataBuilder):
    """The Kimi-K3 KDA builder (RecoverSSM, prefill checkpoints), built by linmeta."""

    _kind = "kda"

    def __init__(self, kv_cache_spec, layer_names, vllm_config, device) -> None:
        self.use_recoverssm = bool(vllm_config.cache_config.use_kda_recoverssm)
        super().__init__(kv_cache_spec, layer_names, vllm_config, device)
        self.spec_state_slots = 1 if self.use_recoverssm else self.num_spec + 1
        self.recoverssm_context = None

    def _linmeta_config(self) -> dict:
        cfg = super()._linmeta_config()
        cfg.update(
            chunk_metadata=False,
            use_recoverssm=self.use_recoverssm,
            num_prefill_checkpoint_blocks=int(
                getattr(self.kv_cache_spec, "num_prefill_checkpoint_blocks", 0) or 0
            ),
        )
        return cfg

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

    def _staged_spec(self, f, m) -> bool:
        n = f[_F_NUM_SPEC_DECODES]
        rows = self.vllm_config.scheduler_config.max_num_seqs if self.use_recoverssm else None
        capacity = rows if rows is not None else self.decode_cudagraph_max_bs
        return (
            self.use_full_cuda_graph
            and n > 0
            and f[_F_NUM_PREFILLS] == 0
            and f[_F_NUM_DECODES] == 0
            and m.num_reqs <= capacity
            and f[_F_NUM_SPEC_DECODE_TOKENS] <= self.decode_cudagraph_max_bs
        )

    def _assemble(self, f, step, m, accepted_dtype, drafts):
        if f[_F_SPEC_TOKEN_INDX] is not None or (
            f[_F_NUM_ACCEPTED] is not None and accepted_dtype is not torch.int32
        ):
            _vllm_dtypes("kda", f, accepted_dtype, self.use_recoverssm or self._staged_spec(f, m))
        values = {name: f[i] for i, name in _KDA_NAMES}
        values["nums_dict"], values["batch_ptr"], values["token_chunk_offset_ptr"] = self._conv(
            f, step
        )
        classes = self._classes
        commit = f[_F_COMMIT]
        if commit is not None:
            state_indices, qsl, request_indices, align = commit
            # The reference hands the spec fields themselves to the commit metadata.
            state_indices = values["spec_state_indices_tensor"]
            qsl = values["spec_query_start_loc"]
            align_md = None
            if align is not None:
                align_md = classes["align"](
                    block_table=m.block_table_tensor,
                    num_computed_tokens=align[0],
                    block_size=align[1],
                )
            values["recoverssm_commit"] = classes["commit"](
                state_indices=state_indices,
                query_start_loc=qsl,
                request_indices=request_indices,
                align=align_md,
            )
            values["recoverssm_context"] = self._get_recoverssm_context()
        ckpt = f[_F_CHECKPOINT]
        if ckpt is not None:
            values["checkpoint"] = classes["checkpoint"](
                checkpoint_offsets=ckpt[0], state_indices=ckpt[1]
            )
        return self._make(values)

    def update_block_table(self, metadata, blk_table, slot_mapping):
        """Re-gathers every state-index field of this group (spec / non-spec / prefill state
        indices, the RecoverSSM commit's and the checkpoints'), keeping the batch-level ones."""
        f = self._engine.regather(self._slot, metadata, blk_table)
        if f is None:
            raise _linmeta.Error(
                "linmeta: update_block_table takes metadata of the step this engine built last"
            )
        changes = dict(
            spec_state_indices_tensor=f[_F_SPEC_STATE_INDICES],
            non_spec_state_indices_tensor=f[_F_NON_SPEC_STATE_INDICES],
            prefill_state_indices=f[_F_PREFILL_STATE_INDICES],
        )
        if metadata.recoverssm_commit is not None:
            align = metadata.recoverssm_commit.align
            if align is not None:
                align = dataclasses.replace(align, block_table=blk_table)
            changes["recoverssm_commit"] = dataclasses.replace(
                metadata.recoverssm_commit,
                state_indices=f[_F_SPEC_STATE_INDICES],
                align=align,
            )
        if metadata.checkpoint is not None and f[_F_CHECKPOINT] is not None:
            changes["checkpoint"] = dataclasses.replace(
                metadata.checkpoint, state_indices=f[_F_CHECKPOINT][1]
            )
        return dataclasses.replace(metadata, **changes)


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
