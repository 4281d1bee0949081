"""What linmeta.sglang's backend classes share: one engine per backend object over its own
linmeta builder, the entry points as one native call each, the objects SGLang's code reads
(docs/sglang.md). Python adapts objects only; every rule is the core's (src/kinds/sglang_*)."""

from __future__ import annotations

import dataclasses

from sglang.srt.layers.attention.mamba.mamba2_metadata import ForwardMetadata

from .._linmeta import MetadataBuilder
from .._linmeta import sglang as _native
from ._batch import CPU_GRAPH_CAPTURE, EAGER, GRAPH_CAPTURE, GRAPH_REPLAY, cpu_capture_batch


#: Capacities of a first builder; a larger step makes a builder twice as large (a rare
#: allocation outside the steady state).
MIN_ROWS = 256
MIN_TOKENS = 8192


class Backend:
    """Mixin for a subclass of one of SGLang's MambaAttnBackendBase classes (listed first:
    its entry points run, SGLang's are their ``super()``).

    ``KIND``: linmeta's builder kind; ``METADATA``: SGLang's metadata class of the kind's
    object, ``MIXED``: its nested class (or None)."""

    KIND: str
    METADATA: type
    MIXED: type | None = None
    #: The backend builds GDN's prefill conv block table (SGLang does under is_cuda()).
    def _linmeta_conv_block_table(self) -> bool:
        return False

    def _linmeta_host_mirrors(self) -> bool:
        """ShortConv's needs_extend_host_mirrors (a class constant of SGLang's)."""
        return False

    def _linmeta_cache_indices_buf(self):
        """ShortConv's _cache_indices_buf (None: the kind has none)."""
        return None

    def _linmeta_supported(self) -> bool:
        """What linmeta does not serve stays SGLang's (docs/sglang.md, "Not served"): the
        unified memory pool (virtual slot ids), ReplaySSM."""
        ok = getattr(self, "_linmeta_ok", None)
        if ok is None:
            pool = self.req_to_token_pool
            ok = (
                not self.enable_unified_memory
                and getattr(pool, "mamba_v2p_table", None) is None
                and not self._replayssm_enabled()
            )
            self._linmeta_ok = ok
        return ok

    def _linmeta_engine(self, rows: int, tokens: int):
        eng = getattr(self, "_linmeta", None)
        if eng is not None and rows <= self._linmeta_rows and tokens <= self._linmeta_tokens:
            return eng
        r = max(MIN_ROWS, rows, getattr(self, "_linmeta_rows", 0) * (2 if eng else 1))
        t = max(MIN_TOKENS, tokens, getattr(self, "_linmeta_tokens", 0) * (2 if eng else 1))
        import torch

        cuda = torch.device(self.device).type == "cuda"
        builder = MetadataBuilder(
            self.KIND,
            max_num_seqs=r,
            max_num_batched_tokens=t,
            chunk_size=self.mamba_chunk_size,
            target="cuda" if cuda else "host",
            array_type="torch",
        )
        from sglang.srt.runtime_context import mamba_cache_chunk_size  # noqa: PLC0415

        eng = _native.Engine(
            builder,
            self.req_to_token_pool,
            int(mamba_cache_chunk_size()),
            int(self.conv_states_shape[-1]),
            int(self.topk),
            bool(self._linmeta_conv_block_table()),
            bool(self._linmeta_host_mirrors()),
        )
        self._linmeta, self._linmeta_rows, self._linmeta_tokens = eng, r, t
        return eng

    def _linmeta_build(self, fb, entry: int, graph) -> None:
        """Builds the step: self.forward_metadata, then _linmeta_after."""
        fields = self._linmeta_engine(fb.batch_size, step_tokens(fb)).build(
            fb, entry, graph, self._linmeta_cache_indices_buf())
        self.forward_metadata = self._linmeta_object(fields)
        self._linmeta_after(fb, entry, fields)

    def _linmeta_object(self, fields: dict):
        """SGLang's metadata object of the kind's `fields` (left as they are): the kind's
        dataclass, or the plain ForwardMetadata, holding those of its fields."""
        cls = self.METADATA if fields.get("kind_metadata") else ForwardMetadata
        values, names = _defaults(cls)
        d = values.copy()
        d.update(fields)
        for k in _not_fields(cls, self.KIND, fields):
            del d[k]
        mixed = d.get("mixed_metadata")
        if mixed is not None and self.MIXED is not None:
            d["mixed_metadata"] = _instance(self.MIXED, mixed)
        return _new(cls, d, names)

    def _linmeta_graph(self, bs: int, fb_track_indices, verify_tree: bool):
        """The backend's static buffers of batch size bs (SGLang's init_*_graph_state)."""
        track = None
        if fb_track_indices is not None and self.mamba_track_indices_buf is not None:
            track = self.mamba_track_indices_buf[:bs]
        tree = verify_tree and len(self.retrieve_next_token_list) >= bs
        return (
            self.state_indices_list[bs - 1],
            self.query_start_loc_list[bs - 1],
            track,
            self.retrieve_next_token_list[bs - 1] if tree else None,
            self.retrieve_next_sibling_list[bs - 1] if tree else None,
            self.retrieve_parent_token_list[bs - 1] if tree else None,
        )

    def _linmeta_ragged(self, fb) -> bool:
        spec = getattr(fb, "spec_info", None)
        return getattr(spec, "ragged_verify_layout", None) is not None

    def _linmeta_serves(self, fb) -> bool:
        """Whether linmeta builds this step (else SGLang's own method does)."""
        return self._linmeta_supported() and not self._linmeta_ragged(fb)

    def _linmeta_after(self, fb, entry: int, fields: dict) -> None:
        """What the subclass's entry point does after the metadata (`entry`: EAGER,
        GRAPH_CAPTURE, GRAPH_REPLAY or CPU_GRAPH_CAPTURE; `fields`: the kind's fields, those
        of no SGLang dataclass included): the backend's own state, such as GDN's kernel
        routing."""

    # ---- SGLang's metadata entry points (MambaAttnBackendBase's and its subclasses')

    def init_forward_metadata(self, forward_batch):
        if not self._linmeta_serves(forward_batch):
            return super().init_forward_metadata(forward_batch)
        self._linmeta_build(forward_batch, EAGER, None)

    def init_forward_metadata_out_graph(self, forward_batch, in_capture: bool = False):
        fb = forward_batch
        if not self._linmeta_supported() or self._linmeta_ragged(fb):
            return super().init_forward_metadata_out_graph(fb, in_capture)
        tree = fb.forward_mode.is_target_verify() and self.topk > 1
        graph = self._linmeta_graph(fb.batch_size, getattr(fb, "mamba_track_indices", None), tree)
        self._linmeta_build(fb, GRAPH_CAPTURE if in_capture else GRAPH_REPLAY, graph)

    def init_cuda_graph_state(self, max_bs: int, max_num_tokens: int):
        super().init_cuda_graph_state(max_bs, max_num_tokens)  # SGLang's static buffers

    def init_cpu_graph_state(self, max_bs: int, max_num_tokens: int):
        super().init_cpu_graph_state(max_bs, max_num_tokens)

    def init_forward_metadata_capture_cpu_graph(
        self, bs, num_tokens, req_pool_indices, seq_lens, out_cache_loc, encoder_lens,
        forward_mode, spec_info,
    ):
        if not self._linmeta_supported():
            return super().init_forward_metadata_capture_cpu_graph(
                bs, num_tokens, req_pool_indices, seq_lens, out_cache_loc, encoder_lens,
                forward_mode, spec_info)
        fb = cpu_capture_batch(bs, num_tokens, req_pool_indices, seq_lens, forward_mode, spec_info)
        graph = (self.state_indices_list[bs - 1], self.query_start_loc_list[bs - 1],
                 None, None, None, None)
        self._linmeta_build(fb, CPU_GRAPH_CAPTURE, graph)


def step_tokens(fb) -> int:
    """The tokens a step of ForwardBatch `fb` holds (the engine's capacity must cover them)."""
    tokens = fb.extend_num_tokens or 0
    ids = getattr(fb, "input_ids", None)
    return tokens if ids is None else max(tokens, ids.shape[0])


_DEFAULTS: dict = {}


def _defaults(cls):
    """(the defaults of dataclass `cls`'s fields that have one, every field's name)."""
    d = _DEFAULTS.get(cls)
    if d is None:
        fields = dataclasses.fields(cls)
        values = {}
        for f in fields:
            if f.default is not dataclasses.MISSING:
                values[f.name] = f.default
            elif f.default_factory is not dataclasses.MISSING:
                raise TypeError(f"{cls.__name__}.{f.name} has a default factory")
        d = _DEFAULTS[cls] = (values, frozenset(f.name for f in fields))
    return d


_NOT_FIELDS: dict = {}


def _not_fields(cls, kind: str, fields: dict) -> tuple:
    """The names of a `kind` result's fields that are no field of dataclass `cls` (the
    engine's results of one kind always have the same names: computed once per pair)."""
    key = (cls, kind)
    out = _NOT_FIELDS.get(key)
    if out is None:
        names = _defaults(cls)[1]
        out = _NOT_FIELDS[key] = tuple(k for k in fields if k not in names)
    return out


def _new(cls, d: dict, names: frozenset):
    """An instance of dataclass `cls` whose __dict__ is `d` (every field, nothing else)."""
    if len(d) != len(names):
        raise TypeError(f"{cls.__name__}: fields {sorted(set(d) ^ names)}")
    obj = cls.__new__(cls)
    object.__setattr__(obj, "__dict__", d)
    return obj


def _instance(cls, fields: dict):
    """An instance of SGLang's plain dataclass `cls` holding `fields` (every field without a
    default among them), the others at their defaults: what cls(**fields) makes, without
    running its __init__ (SGLang's metadata dataclasses have no __post_init__)."""
    values, names = _defaults(cls)
    d = values.copy()
    d.update(fields)
    return _new(cls, d, names)
