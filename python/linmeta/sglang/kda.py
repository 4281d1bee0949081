"""linmeta's SGLang KDAAttnBackend: SGLang 0.5.23's class with its metadata entry points built
by linmeta's ``sglang_kda`` kind (docs/sglang.md, "KDA"). What stays SGLang's: the breakable
prefill-graph tables (``init_prefill_graph_metadata`` / ``refresh_prefill_graph_metadata``,
not overridden), the FlashInfer prefill's checkpoint plan (such a backend takes SGLang's own
method), the forward and its kernels."""

from __future__ import annotations

from sglang.srt.layers.attention.linear.kda_backend import KDAAttnBackend
from sglang.srt.layers.attention.mamba.mamba2_metadata import ForwardMetadata

from ._batch import EAGER
from ._common import Backend


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
