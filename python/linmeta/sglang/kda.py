"""linmeta's SGLang KDAAttnBackend: SGLang 0.5.23's class with its metadata entry points built
by linmeta's ``sglang_kda`` kind (docs/sglang.md, "KDA"), the breakable prefill-graph tables
included: ``_fill_prefill_graph_metadata`` (what ``init_prefill_graph_metadata`` and
``refresh_prefill_graph_metadata`` call) fills SGLang's own ``KDAPrefillGraphMetadata``
(allocated by SGLang's ``allocate``) with one native call. What stays SGLang's: the FlashInfer
prefill's checkpoint plan and its prefill-graph wrapper (such a backend or bucket takes
SGLang's own method), a tracked batch on a bucket without track tables (SGLang's assertion),
the forward and its kernels."""

from __future__ import annotations

from sglang.srt.layers.attention.linear.kda_backend import KDAAttnBackend
from sglang.srt.layers.attention.mamba.mamba2_metadata import ForwardMetadata

from ._batch import EAGER, PREFILL_GRAPH
from ._common import Backend, step_tokens


class LinmetaKDAAttnBackend(Backend, KDAAttnBackend):
    KIND = "sglang_kda"
    METADATA = ForwardMetadata

    def _linmeta_serves(self, fb) -> bool:
        checkpoints = getattr(self, "_linmeta_checkpoints", None)
        if checkpoints is None:  # the backend's prefill kernel: fixed at construction
            checkpoints = self._linmeta_checkpoints = bool(
                self.kernel_dispatcher.extend_kernel.uses_state_checkpoints)
        return not checkpoints and super()._linmeta_serves(fb)

    def _linmeta_after(self, fb, entry: int, fields: dict) -> None:
        if entry == EAGER:  # an eager forward never runs on a graph bucket's tables
            self.prefill_graph_metadata = None

    # ---- KDA's breakable prefill-graph tables

    def _linmeta_serves_prefill_graph(self, meta, fb) -> bool:
        return (
            meta.flashinfer is None
            and (meta.track or getattr(fb, "mamba_track_mask", None) is None)
            and self._linmeta_serves(fb)
        )

    def _linmeta_fill_prefill_graph(self, meta, fb) -> None:
        tokens = max(step_tokens(fb), meta.num_tokens)
        engine = self._linmeta_engine(max(fb.batch_size, meta.max_seqs), tokens)
        engine.build(fb, PREFILL_GRAPH, meta)
        self.prefill_graph_metadata = meta

    def refresh_prefill_graph_metadata(self, meta, forward_batch) -> None:
        # SGLang's resolves the batch's slots first (a gather linmeta's build makes itself).
        if not self._linmeta_serves_prefill_graph(meta, forward_batch):
            return super().refresh_prefill_graph_metadata(meta, forward_batch)
        self._linmeta_fill_prefill_graph(meta, forward_batch)

    def _fill_prefill_graph_metadata(self, *, meta, forward_batch, cache_indices) -> None:
        if not self._linmeta_serves_prefill_graph(meta, forward_batch):
            return super()._fill_prefill_graph_metadata(
                meta=meta, forward_batch=forward_batch, cache_indices=cache_indices)
        self._linmeta_fill_prefill_graph(meta, forward_batch)
